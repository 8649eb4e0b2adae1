"""The tests' own servers start even when a port picked for them is taken before they bind it (the
ports come from the range every outgoing connection on the machine draws from)."""
import socket

import pytest
import redis

from stack.dynamodb_local import free_ports
from tests.services import RedisClusterServers, RedisServer


@pytest.fixture
def taken_port():
    """A port bound by another socket, as an outgoing connection holds one (not listening)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]


def test_free_ports_are_distinct():
    assert len(set(free_ports(40))) == 40


def test_a_redis_server_whose_port_was_taken_starts_on_another(tmp_path, taken_port):
    server = RedisServer(tmp_path)
    server.port = taken_port
    server.start()
    try:
        assert server.port != taken_port
        assert redis.Redis(port=server.port).ping()
    finally:
        server.kill()


def test_a_restarted_redis_server_keeps_its_port_or_says_why(tmp_path, taken_port):
    server = RedisServer(tmp_path).start()
    server.kill()
    server.port = taken_port  # as if another process took its port while it was down
    with pytest.raises(RuntimeError, match="Address already in use"):
        server.start()
    assert server.port == taken_port


def test_a_cluster_node_whose_bus_port_was_taken_starts_on_others(tmp_path, taken_port):
    cluster = RedisClusterServers(tmp_path, masters=3, replicas=0)
    first = cluster.ports[0]
    cluster.bus_ports[first] = taken_port
    cluster.start()
    try:
        assert first not in cluster.ports and taken_port not in cluster.bus_ports.values()
        assert redis.RedisCluster(host="127.0.0.1", port=cluster.ports[0]).set("k", "v")
    finally:
        cluster.stop()
