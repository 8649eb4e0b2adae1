"""Servers of a test's own, on free ports, that the test may stop and start again (never the machine's
shared Redis or PostgreSQL)."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from stack.dynamodb_local import free_port, free_ports

PORT_ATTEMPTS = 3  # a port free a moment ago can be taken by another process before the server binds it


class PortTaken(RuntimeError):
    pass


def start_on_free_ports(start, move):
    """start(); when it finds its port (or bus port) taken, move() to other free ports and start
    again, up to PORT_ATTEMPTS times in all."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return start()
        except PortTaken:
            if attempt == PORT_ATTEMPTS:
                raise
            move()


def wait_for_redis(process: subprocess.Popen, port: int, log) -> None:
    """Until the redis-server on `port` answers PING. If it exits first, PortTaken when its log says
    the address was in use (the caller tries other ports), else a RuntimeError with the log's tail."""
    client = redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=1,
                         retry=Retry(NoBackoff(), 0))  # this loop is the retry, and it watches the process
    for _ in range(200):
        try:
            client.ping()
            return
        except (redis.ConnectionError, redis.TimeoutError):
            if process.poll() is not None:
                break
            time.sleep(0.05)
    else:
        process.kill()
        process.wait(10)
    tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
    error = PortTaken if any("Address already in use" in line for line in tail) else RuntimeError
    raise error(f"redis-server did not start on port {port}: " + (" | ".join(tail) or f"no log at {log}"))


class RedisServer:
    """A redis-server of this test's own, on a free port, its dump file in a temporary folder.
    `durable`: an append-only file synced on every write, so a kill -9 loses nothing acknowledged
    (what a Redis holding the index needs: docs/operations.md)."""

    def __init__(self, folder, *, durable: bool = False):
        self.folder = folder
        self.port = free_port()
        self.durable = durable
        self.process = None

    def start(self) -> "RedisServer":
        """Starts it, on another free port if this one was taken meanwhile (only on a first start: a
        restart keeps its port, which clients already know)."""
        if self.process is not None:
            return self._start()
        return start_on_free_ports(self._start, self._move)

    def _move(self) -> None:
        self.port = free_port()

    def _start(self) -> "RedisServer":
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else ["--appendonly", "no"]
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", *persistence,
             "--dir", str(self.folder), "--dbfilename", "dump.rdb", "--logfile", "redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for_redis(self.process, self.port, self.folder / "redis.log")
        return self

    def stop(self) -> None:
        """Save to disk and exit, as an operator's SHUTDOWN SAVE would."""
        redis.Redis(port=self.port).shutdown(save=True)
        self.process.wait(10)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class RedisClusterServers:
    """A Redis Cluster of this run's own: `masters` primaries with `replicas` replicas each, one
    redis-server per node on free ports, joined by `redis-cli --cluster create`.

    Replicas never fail over by themselves (a test promotes one with CLUSTER FAILOVER TAKEOVER, so
    it sees the cluster with a slot range lost first), and the nodes keep serving the slots they
    have while another range is down (cluster-require-full-coverage no). `node_timeout_ms`: 1,000
    for the tests, which lose nodes and want it seen at once; Redis's default, 15,000, makes the
    nodes ping each other a tenth as often (a node pings every other one it has not heard from for
    half the timeout)."""

    def __init__(self, folder, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000):
        self.folder = folder
        self.masters = masters
        self.node_timeout_ms = node_timeout_ms
        picked = free_ports(2 * masters * (1 + replicas))
        self.ports = picked[::2]
        self.bus_ports = dict(zip(self.ports, picked[1::2]))
        self.replicas = replicas
        self.processes: dict[int, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}/0"

    def start_node(self, port: int) -> None:
        folder = self.folder / str(port)
        folder.mkdir(exist_ok=True)
        self.processes[port] = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", str(folder), "--logfile", "redis.log", "--cluster-enabled", "yes",
             "--cluster-port", str(self.bus_ports[port]),  # else port + 10000, which may be taken or too high
             "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(self.node_timeout_ms),
             "--cluster-require-full-coverage", "no", "--cluster-replica-no-failover", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for_redis(self.processes[port], port, folder / "redis.log")

    def start(self) -> "RedisClusterServers":
        try:
            for index in range(len(self.ports)):
                start_on_free_ports(lambda: self.start_node(self.ports[index]), lambda: self._move(index))
            subprocess.run(
                ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )
            self.wait_until_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def _move(self, index: int) -> None:
        """Node `index` to other free ports (before the cluster is formed: none knows it yet)."""
        del self.processes[self.ports[index]], self.bus_ports[self.ports[index]]
        port, bus_port = free_ports(2)
        self.ports[index] = port
        self.bus_ports[port] = bus_port

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=2)

    def live_ports(self) -> list[int]:
        return [port for port, process in self.processes.items() if process.poll() is None]

    def wait_until_ok(self, seconds: float = 30) -> None:
        """Until every live node says cluster_state:ok and agrees on one slot map."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                states = [self.node(port).cluster("info")["cluster_state"] for port in self.live_ports()]
                maps = {self._slot_owners(port) for port in self.live_ports()}
                if set(states) == {"ok"} and len(maps) == 1:
                    return
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")

    def wait_for_replicas_online(self, seconds: float = 30) -> None:
        """Until every live primary's replicas have synced (state online), as a test of WAIT needs."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                infos = [self.node(port).info("replication") for port in self.live_ports()]
                primaries = [info for info in infos if info["role"] == "master"]
                if all(info["connected_slaves"] >= self.replicas and all(
                        info[f"slave{n}"]["state"] == "online" for n in range(info["connected_slaves"]))
                       for info in primaries):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the Redis Cluster's replicas did not come online")

    def _slot_owners(self, port: int) -> tuple:
        """(start, end, primary's port) of every slot range, as the node on `port` sees them."""
        return tuple(sorted((start, end, primary[1]) for start, end, primary, *_ in
                            self.node(port).execute_command("CLUSTER SLOTS")))

    def primary_port_of(self, key: str) -> int:
        """The port of the primary serving `key`'s slot, as the nodes see it now."""
        port = self.live_ports()[0]
        slot = self.node(port).cluster("keyslot", key)
        for start, end, primary_port in self._slot_owners(port):
            if start <= slot <= end:
                return primary_port
        raise LookupError(slot)

    def replica_port_of(self, primary_port: int) -> int:
        for port in self.live_ports():
            info = self.node(port).info("replication")
            if info["role"] == "slave" and info["master_port"] == primary_port:
                return port
        raise LookupError(primary_port)

    def kill(self, port: int) -> None:
        process = self.processes[port]
        process.kill()
        process.wait(10)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)


class S3Server:
    """moto's standalone S3-compatible server (PyPI `moto[server]`) as a process of its own on a
    free port: real HTTP, ranged GETs and conditional PUTs, as the files backend's S3 storage uses."""

    def __init__(self, folder, env: dict | None = None):
        self.folder = folder
        self.port = free_port()
        self.process = None
        self.env = env or {}  # e.g. INITIAL_NO_AUTH_ACTION_COUNT: moto enforces IAM policies after that many requests

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "S3Server":
        import sys
        import urllib.request

        log = open(self.folder / "moto.log", "w")
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        log.close()
        for _ in range(200):
            try:
                urllib.request.urlopen(self.url + "/moto-api/", timeout=0.5)
                return self
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        raise RuntimeError(f"moto's S3 server did not start on port {self.port} (log in {self.folder})")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class ServeIndex:
    """`manage.py serve_index` of this test's own: the files index in `folder`, on a free port, which the
    test may kill (-9), stop (SIGTERM) and start again on the same port. `env`: settings for it, as
    environment variables (PAGINATION_INDEX_RESP_PASSWORD, ..._APPENDFSYNC, ...)."""

    def __init__(self, folder, *, env: dict | None = None, args: tuple = (), tls_ca: str | None = None):
        self.folder = folder
        self.tls_ca = tls_ca  # the CA of its TLS certificate (PAGINATION_INDEX_RESP_TLS_*_FILE in `env`)
        self.path = folder / "files-index"
        self.port = free_port()
        self.env = env or {}
        self.args = args
        self.process = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "ServeIndex":
        if self.process is not None:
            return self._start()
        return start_on_free_ports(self._start, self._move)

    def _move(self) -> None:
        self.port = free_port()

    def _start(self) -> "ServeIndex":
        import os
        import sys
        from pathlib import Path

        root = Path(__file__).resolve().parents[1]
        log = self.folder / "serve_index.log"
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", **self.env}
        with open(log, "ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, str(root / "manage.py"), "serve_index", "--bind", "127.0.0.1",
                 "--port", str(self.port), "--path", str(self.path), *self.args],
                cwd=root, env=env, stdout=output, stderr=subprocess.STDOUT,
            )
        tls = {"ssl": True, "ssl_ca_certs": self.tls_ca} if self.tls_ca else {}
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5, socket_timeout=2, **tls,
                             retry=Retry(NoBackoff(), 0), password=self.env.get("PAGINATION_INDEX_RESP_PASSWORD"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                client.ping()
                return self
            except (redis.ConnectionError, redis.TimeoutError):
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
        self.kill()
        tail = log.read_text(errors="replace").splitlines()[-5:]
        error = PortTaken if any("address already in use" in line for line in tail) else RuntimeError
        raise error(f"serve_index did not start on port {self.port}: " + " | ".join(tail))

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, as an operator's stop: its exit status."""
        self.process.terminate()
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class RedisSentinelServers:
    """A primary, `replicas` replicas and `sentinels` Sentinels (redis-server --sentinel) of this
    test's own on free ports, monitoring the primary as SERVICE with a quorum of 2. Sentinels call a
    primary down after `down_after_ms` without an answer and fail over; `url(db)` is the
    redis+sentinel:// URL the index and the cache take."""

    SERVICE = "pidx-primary"

    def __init__(self, folder, *, replicas: int = 1, sentinels: int = 3, down_after_ms: int = 1000):
        self.folder = folder
        ports = free_ports(1 + replicas + sentinels)
        self.data_ports = ports[: 1 + replicas]
        self.sentinel_ports = ports[1 + replicas :]
        self.down_after_ms = down_after_ms
        self.processes: dict[int, subprocess.Popen] = {}

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.SERVICE}/{db}"

    def start_data(self, port: int, replica_of: int | None = None) -> None:
        folder = self.folder / str(port)
        folder.mkdir(exist_ok=True)
        replication = ["--replicaof", "127.0.0.1", str(replica_of)] if replica_of else []
        self.processes[port] = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", str(folder), "--logfile", "redis.log", *replication],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for_redis(self.processes[port], port, folder / "redis.log")

    def start_sentinel(self, port: int) -> None:
        folder = self.folder / f"sentinel-{port}"
        folder.mkdir(exist_ok=True)
        config = folder / "sentinel.conf"  # Sentinel rewrites its own file as it learns the topology
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {folder}\nlogfile sentinel.log\n"
            f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.data_ports[0]} 2\n"
            f"sentinel down-after-milliseconds {self.SERVICE} {self.down_after_ms}\n"
            f"sentinel failover-timeout {self.SERVICE} 10000\n"
            f"sentinel parallel-syncs {self.SERVICE} 1\n"
        )
        self.processes[port] = subprocess.Popen(["redis-server", str(config), "--sentinel"],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_redis(self.processes[port], port, folder / "sentinel.log")

    def start(self) -> "RedisSentinelServers":
        try:
            self.start_data(self.data_ports[0])
            for port in self.data_ports[1:]:
                self.start_data(port, replica_of=self.data_ports[0])
            for port in self.sentinel_ports:
                self.start_sentinel(port)
            self.wait_until_settled(self.data_ports[0])
        except BaseException:
            self.stop()
            raise
        return self

    def node(self, port: int, db: int = 0) -> redis.Redis:
        return redis.Redis(port=port, db=db, socket_connect_timeout=0.5, socket_timeout=5, retry=Retry(NoBackoff(), 0))

    def primary_port(self) -> int:
        """The primary as the first Sentinel that answers names it."""
        for port in self.sentinel_ports:
            try:
                return int(self.node(port).sentinel_get_master_addr_by_name(self.SERVICE)[1])
            except (redis.RedisError, TypeError):
                continue
        raise RuntimeError("no Sentinel answers")

    def wait_until_settled(self, primary: int, seconds: float = 60) -> None:
        """Until every live Sentinel names `primary`, knows the other Sentinels, and the primary has
        every live replica online."""
        deadline = time.monotonic() + seconds
        live = [port for port in self.data_ports if port != primary and self.processes[port].poll() is None]
        sentinels = [port for port in self.sentinel_ports if self.processes[port].poll() is None]
        while time.monotonic() < deadline:
            try:
                named = {int(self.node(port).sentinel_get_master_addr_by_name(self.SERVICE)[1]) for port in sentinels}
                known = all(len(self.node(port).sentinel_sentinels(self.SERVICE)) >= len(sentinels) - 1
                            for port in sentinels)
                info = self.node(primary).info("replication")
                online = {info[f"slave{n}"]["port"] for n in range(info["connected_slaves"])
                          if info[f"slave{n}"]["state"] == "online"}
                if named == {primary} and known and info["role"] == "master" and set(live) <= online:
                    return
            except (redis.RedisError, KeyError, TypeError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the Sentinels did not settle on primary {primary}")

    def wait_for_failover(self, old: int, seconds: float = 60) -> int:
        """Until the Sentinels name a primary other than `old`, and it says it is one; its port."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                port = self.primary_port()
                if port != old and self.node(port).info("replication")["role"] == "master":
                    return port
            except (redis.RedisError, RuntimeError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the Sentinels did not fail over from {old}")

    def kill(self, port: int) -> None:
        process = self.processes[port]
        if process.poll() is None:
            process.kill()
            process.wait(10)

    def cut_replication(self, replica: int) -> "LoopbackCut":
        """A context in which nothing the primary sends reaches `replica` (its replication link's packets
        dropped by nft on loopback: the replica neither receives nor acknowledges, as in a partition;
        a SIGSTOP would not do, since the kernel still takes the stream into the paused replica's socket)."""
        primary = self.primary_port()
        for client in self.node(replica).client_list():  # its link to the primary is the client flagged M
            if "M" in client["flags"] and client["addr"].endswith(f":{primary}"):
                return LoopbackCut(source_port=primary, destination_port=int(client["laddr"].rpartition(":")[2]))
        raise LookupError(f"{replica} is not connected to the primary {primary}")

    def pause(self, port: int) -> None:
        self.processes[port].send_signal(signal.SIGSTOP)

    def resume(self, port: int) -> None:
        self.processes[port].send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
                process.wait(10)


class LoopbackCut:
    """Drops TCP packets on loopback from source_port to destination_port while entered: an nft table
    of its own (root), deleted on the way out."""

    def __init__(self, *, source_port: int, destination_port: int):
        self.table = f"pidx_cut_{source_port}_{destination_port}"
        self.rule = f"iifname lo tcp sport {source_port} tcp dport {destination_port} drop"

    def __enter__(self) -> "LoopbackCut":
        script = (f"add table inet {self.table}\n"
                  f"add chain inet {self.table} input {{ type filter hook input priority -10; }}\n"
                  f"add rule inet {self.table} input {self.rule}\n")
        subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True, capture_output=True, timeout=10)
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["nft", "delete", "table", "inet", self.table], check=True, capture_output=True, timeout=10)
