"""The index as pages read it (FailFastIndex) in front of a Redis that stops answering: SIGSTOP, so the
kernel still accepts connections and nothing replies, as across a partition that drops packets. After
a failure calls fail at once for FAIL_FAST_SECONDS; then one call asks Redis again while every other
still fails at once. Before, every thread that asked when the window ended waited out the timeouts
(bench.faults_net: a web host cut from Redis held its requests)."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from pagination_index import IndexUnavailable, index, indexes
from pagination_index.backends.redis import RedisIndex
from tests.config import index_config

WINDOW = 0.3


@pytest.fixture
def frozen_redis_index(settings, redis_server):
    options = dict(settings.PAGINATION_INDEX_REDIS, LOCATION=f"redis://127.0.0.1:{redis_server.port}/1")
    settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["redis"], OPTIONS=options,
                                             FAIL_FAST_SECONDS=WINDOW)
    assert index.count("a") == 0  # a pooled connection, before the freeze
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        yield indexes["pages"]
    finally:
        redis_server.process.send_signal(signal.SIGCONT)


def test_after_the_window_one_call_asks_and_the_others_fail_at_once(frozen_redis_index):
    assert isinstance(frozen_redis_index.wrapped, RedisIndex)
    with pytest.raises(IndexUnavailable):
        index.count("a")  # waits out the socket timeout: the window opens
    with pytest.raises(IndexUnavailable, match="failing fast"):
        index.count("a")
    time.sleep(WINDOW + 0.1)
    probe_failed = []

    def probe():
        try:
            index.count("a")
        except IndexUnavailable as exc:
            probe_failed.append(exc)

    prober = threading.Thread(target=probe)
    prober.start()
    deadline = time.monotonic() + 5
    while not frozen_redis_index.breaker.probing:
        assert time.monotonic() < deadline, "no call went to ask Redis after the window"
        time.sleep(0.01)
    for _ in range(20):  # other threads' calls meanwhile: at once, while the probe still waits
        with pytest.raises(IndexUnavailable, match="failing fast"):
            index.count("a")
    assert prober.is_alive()
    prober.join(30)
    assert probe_failed and "failing fast" not in str(probe_failed[0])  # it asked Redis, and Redis was away


def test_a_probe_that_is_answered_closes_the_window(frozen_redis_index, redis_server):
    with pytest.raises(IndexUnavailable):
        index.count("a")
    redis_server.process.send_signal(signal.SIGCONT)
    time.sleep(WINDOW + 0.1)
    assert index.count("a") == 0  # the probe
    assert frozen_redis_index.breaker.failed_at is None
    assert [index.count("a") for _ in range(3)] == [0, 0, 0]
