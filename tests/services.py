"""Servers of a test's own, on free ports, that the test may stop and start again (never the machine's
shared Redis or PostgreSQL)."""
from __future__ import annotations

import subprocess
import time

import redis

from stack.dynamodb_local import free_port


class RedisServer:
    """A redis-server of this test's own, on a free port, its dump file in a temporary folder."""

    def __init__(self, folder):
        self.folder = folder
        self.port = free_port()
        self.process = None

    def start(self) -> "RedisServer":
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.folder), "--dbfilename", "dump.rdb", "--logfile", "redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        for _ in range(100):
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        """Save to disk and exit, as an operator's SHUTDOWN SAVE would."""
        redis.Redis(port=self.port).shutdown(save=True)
        self.process.wait(10)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
