"""serve_index (the files index over RESP) and the RESP backend: the contract suite through it, replies
equal to a real redis-server's, acknowledged writes kept across kill -9, redis-cli against it, and
its limits (docs/backends-resp.md)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid

import pytest
import redis

from pagination_index.backends.base import Add, IndexUnavailable, Remove
from pagination_index.backends.resp import RespIndex
from tests.conftest import service_missing
from pagination_index.testing import IndexContract, sk
from tests.pagination_index.resp_differential import RawClient, differences
from tests.services import ServeIndex

# The differential test's length here; bench.resp runs 20,000 (RESP_DIFFERENTIAL_OPERATIONS overrides).
DIFFERENTIAL_OPERATIONS = int(os.environ.get("RESP_DIFFERENTIAL_OPERATIONS", "4000"))


class TestRespIndex(IndexContract):
    """The whole contract through redis-py and serve_index, on the run's server."""

    @pytest.fixture
    def index(self, resp_index_options):
        index = RespIndex(resp_index_options)
        yield index
        index.close()

    def test_writes_are_staged_until_committed(self, index):
        index.add_many("g", [("a", sk(1)), ("b", sk(2))])
        assert index.pending_changes("g") == 2
        assert "g" in index.pending_groups()
        assert index.range("g", 0, 5) == [("b", sk(2)), ("a", sk(1))]  # reads include staged changes
        assert index.commit("g") is True
        assert index.pending_changes("g") == 0 and index.commit("g") is False
        assert index.range("g", 0, 5) == [("b", sk(2)), ("a", sk(1))]

    def test_a_conditional_remove_is_one_command_in_the_batch(self, index):
        index.add_many("g", [("a", sk(2))])
        index.apply([Remove("g", "a", sk(1)), Add("g", "b", sk(3))])
        assert index.range("g", 0, 5) == [("b", sk(3)), ("a", sk(2))]
        index.apply([Remove("g", "a", sk(2))])
        assert index.range("g", 0, 5) == [("b", sk(3))]

    def test_scores_are_the_redis_backends(self, index):
        index.add_many("g", [("a", "2021-08-25T13:00:00.123456Z")])
        assert index.client.zscore("g", "a") == 1629896400123456
        with pytest.raises(ValueError):
            index.add_many("g", [("a", "2255-06-05T23:47:34.740993Z")])  # past a double's exact integers


def test_replies_equal_a_real_redis_servers(serve_index, redis_server):
    """A seeded random sequence of the index's commands on both; every reply equal."""
    redis.Redis(port=serve_index.port).flushdb()
    mismatches, compared = differences(serve_index.port, redis_server.port, DIFFERENTIAL_OPERATIONS, seed=44)
    assert compared >= DIFFERENTIAL_OPERATIONS
    assert mismatches == []


def test_acknowledged_writes_survive_kill_9(tmp_path):
    """Adds, removes and re-adds (some groups committed, some only logged), then four writers adding
    until the server is killed with SIGKILL under them: after a restart every answered write is there,
    and of the rest at most the four in flight (appendfsync always: the log is synced before a reply)."""
    import threading

    server = ServeIndex(tmp_path).start()
    try:
        client = redis.Redis(port=server.port, socket_timeout=10)
        members = [uuid.uuid4().hex for _ in range(100)]
        expected: dict[str, dict[str, int]] = {}
        for step in range(400):
            group, member = f"g{step % 3}", members[step % len(members)]
            if step % 5 == 4:
                client.zrem(group, member)
                expected.setdefault(group, {}).pop(member, None)
            else:
                client.zadd(group, {member: 1_600_000_000_000_000 + step})
                expected.setdefault(group, {})[member] = 1_600_000_000_000_000 + step
            if step == 200:
                client.execute_command("ZCOMMIT", "g0")
        answered: list[tuple[str, int]] = []
        stop = threading.Event()

        def writer(number: int):
            own = redis.Redis(port=server.port, socket_timeout=10)
            while not stop.is_set():
                member, score = uuid.uuid4().hex, 1_700_000_000_000_000 + number
                try:
                    own.zadd("racing", {member: score})
                except redis.RedisError:
                    return  # killed under it: not answered
                answered.append((member, score))

        writers = [threading.Thread(target=writer, args=(number,)) for number in range(4)]
        for thread in writers:
            thread.start()
        deadline = time.monotonic() + 30
        while len(answered) < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        stop.set()
        for thread in writers:
            thread.join(30)
        acknowledged = dict(answered)
        assert len(acknowledged) >= 100
        server.start()
        client = redis.Redis(port=server.port)
        for group, entries in expected.items():
            present = {member.decode(): int(score) for member, score in client.zrange(group, 0, -1, withscores=True)}
            assert present == entries
        racing = {member.decode(): int(score) for member, score in client.zrange("racing", 0, -1, withscores=True)}
        assert {member: racing.get(member) for member in acknowledged} == acknowledged
        assert len(racing) - len(acknowledged) <= 4  # the writes in flight when it died, answered or not
    finally:
        server.kill()


def test_sigterm_stops_it_cleanly_and_keeps_staged_changes(tmp_path):
    server = ServeIndex(tmp_path).start()
    try:
        client = redis.Redis(port=server.port)
        client.zadd("g", {"a": 1, "b": 2})
        assert server.stop() == 0
        assert "stopped" in (tmp_path / "serve_index.log").read_text()
        server.start()
        assert redis.Redis(port=server.port).zrange("g", 0, -1, withscores=True) == [(b"a", 1.0), (b"b", 2.0)]
    finally:
        server.kill()


def test_one_server_a_folder_the_next_waits_for_the_last(tmp_path):
    """A deployment may start the new server before the old one has stopped (ECS overlaps them): the
    new one waits for the folder's lock (--lock-wait), then serves what the old one wrote."""
    import threading

    first = ServeIndex(tmp_path).start()
    try:
        redis.Redis(port=first.port).zadd("g", {"a": 1})
        with pytest.raises(RuntimeError, match="did not start"):
            ServeIndex(tmp_path, args=("--lock-wait", "1")).start()
        assert "another serve_index serves" in (tmp_path / "serve_index.log").read_text()
        second, started = ServeIndex(tmp_path, args=("--lock-wait", "60")), threading.Event()
        waiting = threading.Thread(target=lambda: (second.start(), started.set()))
        waiting.start()
        deadline = time.monotonic() + 30
        while "waiting up to 60 s" not in (tmp_path / "serve_index.log").read_text():
            assert time.monotonic() < deadline, "the second server never waited for the lock"
            time.sleep(0.1)
        assert not started.is_set()
        assert first.stop() == 0
        waiting.join(60)
        assert started.is_set()
        assert redis.Redis(port=second.port).zrange("g", 0, -1, withscores=True) == [(b"a", 1.0)]
    finally:
        first.kill()
        if "second" in locals():
            second.kill()


def redis_cli(port: int, *args: str, password: str | None = None) -> str:
    if not shutil.which("redis-cli"):
        service_missing("redis-cli is not installed (Debian: apt-get install redis-tools)")
    command = ["redis-cli", "-p", str(port), *(["--no-auth-warning", "-a", password] if password else []), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout


def test_redis_cli_works_against_it(serve_index):
    port = serve_index.port
    redis.Redis(port=port).flushdb()
    assert redis_cli(port, "PING") == "PONG\n"
    assert redis_cli(port, "ZADD", "KETTLE-2000", "1629896400123456", "a", "1629896400123457", "b") == "2\n"
    assert redis_cli(port, "ZCARD", "KETTLE-2000") == "2\n"
    assert redis_cli(port, "ZREVRANGE", "KETTLE-2000", "0", "0", "WITHSCORES") == "b\n1629896400123457\n"
    assert redis_cli(port, "ZSCORE", "KETTLE-2000", "a") == "1629896400123456\n"
    assert redis_cli(port, "ZCOMMIT", "KETTLE-2000") == "1\n"
    assert redis_cli(port, "--no-raw", "-3", "ZRANGE", "KETTLE-2000", "0", "-1", "WITHSCORES") == \
        "1) 1) \"a\"\n   2) (double) 1629896400123456\n2) 1) \"b\"\n   2) (double) 1629896400123457\n"
    assert redis_cli(port, "ZADD", "KETTLE-2000", "x", "a").startswith("ERR value is not a valid float")
    assert "connected_clients:" in redis_cli(port, "INFO")
    # Its interactive mode, on standard input: help from COMMAND DOCS, then commands one by one.
    session = subprocess.run(["redis-cli", "-p", str(port)], input="HELP ZCARD\nZCARD KETTLE-2000\nQUIT\n",
                             capture_output=True, text=True, timeout=30)
    assert session.returncode == 0 and "2" in session.stdout.splitlines()


def test_a_malformed_command_gets_an_error_and_the_connection_stays_usable(serve_index):
    client = RawClient(serve_index.port)
    try:
        assert client.call([b"ZADD", b"k", b"1"]) == ("error", "ERR wrong number of arguments for 'zadd' command")
        assert client.call([b"ZRANGE", b"k", b"0", b"1", b"BOGUS"]) == ("error", "ERR syntax error")
        assert client.call([b"ZADD", b"k", b"1.5", b"m"])[0] == "error"  # no sort key: refused
        assert client.call([b"ZADD", b"k", b"1", b"\xff"])[0] == "error"  # not UTF-8
        assert client.call([b"NOPE"]) == ("error", "ERR unknown command 'NOPE', with args beginning with: ")
        assert client.call([b"PING"]) == b"PONG"
    finally:
        client.close()


def test_a_request_past_the_limit_is_refused_and_the_connection_closed(tmp_path):
    server = ServeIndex(tmp_path, env={"PAGINATION_INDEX_RESP_MAX_REQUEST_BYTES": "100000"}).start()
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(b"*3\r\n$4\r\nECHO\r\n$200000\r\n" + b"x" * 150_000)
        reply = sock.recv(4096)
        assert reply.startswith(b"-ERR Protocol error: invalid bulk length")
        try:
            assert sock.recv(4096) == b""  # closed
        except ConnectionResetError:
            pass  # closed with the rest of the request unread
        assert redis.Redis(port=server.port).echo("y" * 50_000) == b"y" * 50_000  # smaller: served
    finally:
        server.kill()


def test_password_client_limit_and_tls(tmp_path):
    """requirepass-style AUTH (and HELLO AUTH), maxclients, and TLS with a certificate of the test's own."""
    if not shutil.which("openssl"):
        service_missing("openssl is not installed (Debian: apt-get install openssl)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    env = {"PAGINATION_INDEX_RESP_PASSWORD": "s3cret", "PAGINATION_INDEX_RESP_MAXCLIENTS": "3",
           "PAGINATION_INDEX_RESP_TLS_CERT_FILE": str(cert), "PAGINATION_INDEX_RESP_TLS_KEY_FILE": str(key)}
    server = ServeIndex(tmp_path, env=env, tls_ca=str(cert)).start()
    try:
        tls = dict(host="127.0.0.1", port=server.port, ssl=True, ssl_ca_certs=str(cert), socket_timeout=5)
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(**tls).zcard("g")  # NOAUTH
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(**tls, password="wrong").ping()
        assert redis.Redis(**tls, password="s3cret", protocol=3).zadd("g", {"a": 1}) == 1  # HELLO 3 AUTH
        with pytest.raises(redis.ConnectionError):
            redis.Redis(port=server.port, password="s3cret", socket_timeout=2).ping()  # plain text: refused
        index = RespIndex({"LOCATION": f"rediss://127.0.0.1:{server.port}/0", "PASSWORD": "s3cret",
                           "CONNECTION_POOL_KWARGS": {"ssl_ca_certs": str(cert)}})
        assert index.range("g", 0, 5) == [("a", "1970-01-01T00:00:00.000001Z")]
        index.close()
        # maxclients: a connection beyond it is refused with Redis's error (the test's earlier clients
        # may hold some of the 3 still); once they are closed, a connection is served again.
        held = []
        with pytest.raises(redis.ConnectionError, match="max number of clients reached"):
            for _ in range(4):
                held.append(redis.Redis(**tls, password="s3cret", single_connection_client=True))
                held[-1].ping()
        for client in held:
            client.close()
        wait_for(lambda: redis.Redis(**tls, password="s3cret", single_connection_client=True).ping())
    finally:
        server.kill()


def wait_for(call, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except (redis.ConnectionError, redis.TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_dead_server_is_index_unavailable(tmp_path):
    server = ServeIndex(tmp_path).start()
    index = RespIndex({"LOCATION": server.url, "SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 1})
    index.add_many("g", [("a", sk(1))])
    server.kill()
    with pytest.raises(IndexUnavailable):
        index.at("g", 0)
    server.start()
    assert index.at("g", 0) == ("a", sk(1))
    index.close()
    server.kill()
