"""The Redis index and Django's cache on a Sentinel-managed primary (issue 43): a primary, a replica and
three Sentinels of the test's own; the primary is killed and the Sentinels promote the replica."""
from __future__ import annotations

import time

import pytest
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from pagination_index.backends.base import IndexUnavailable
from pagination_index.backends.redis import RedisIndex, redis_database, sentinel_location
from shop.settings import next_database, redis_cache


def test_sentinel_urls():
    location = sentinel_location("redis+sentinel://:s%40cret@10.0.0.1:26379,10.0.0.2,10.0.0.3:5000/shop-index/3")
    assert location.sentinels == [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("10.0.0.3", 5000)]
    assert (location.service, location.db, location.password, location.ssl) == ("shop-index", 3, "s@cret", False)
    assert sentinel_location("rediss+sentinel://h:1/svc").db == 0
    assert sentinel_location("redis://h:6379/0") is None
    with pytest.raises(ImproperlyConfigured):
        sentinel_location("redis+sentinel://h:1/")
    # The index's database is named as django-redis's SentinelClient names the cache's, so the
    # system check that keeps caches off the index's database compares them.
    assert redis_database("redis+sentinel://h:1,h:2/svc/1") == redis_database("redis://svc/1")
    assert next_database("redis+sentinel://h:1,h:2/svc/0") == "redis+sentinel://h:1,h:2/svc/1"
    assert next_database("redis://h:6379/0") == "redis://h:6379/1"
    cache = redis_cache("redis+sentinel://h:1,g/svc/0", "shop")
    assert cache["LOCATION"] == "redis://svc/0"
    assert cache["OPTIONS"]["SENTINELS"] == [("h", 1), ("g", 26379)]


def eventually(call, seconds: float = 30):
    """call() until it stops raising IndexUnavailable (the moments a failover takes), at most `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except IndexUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_index_follows_a_failover(settings, redis_sentinels):
    options = dict(settings.PAGINATION_INDEX_REDIS, LOCATION=redis_sentinels.url(1))
    index = RedisIndex(options)
    try:
        entries = [(f"{n:032x}", f"2026-11-28T06:00:00.{n:06d}Z") for n in range(200)]
        index.add_many("SKU-1", entries)
        old = redis_sentinels.primary_port()
        replica = next(port for port in redis_sentinels.data_ports if port != old)
        deadline = time.monotonic() + 10
        while redis_sentinels.node(replica, db=1).zcard(index.key("SKU-1")) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        redis_sentinels.kill(old)
        new = redis_sentinels.wait_for_failover(old)
        assert new == replica
        assert eventually(lambda: index.count("SKU-1")) == 200
        index.add_many("SKU-1", [("f" * 32, "2026-11-28T07:00:00.000000Z")])
        assert index.at("SKU-1", 0) == ("f" * 32, "2026-11-28T07:00:00.000000Z")
        assert redis_sentinels.node(new, db=1).zcard(index.key("SKU-1")) == 201
    finally:
        index.close()


def test_the_cache_follows_a_failover(redis_sentinels):
    config = redis_cache(redis_sentinels.url(0), "sentinel-test")
    with override_settings(CACHES={"default": config}):
        cache = caches["default"]
        assert cache.set("greeting", "hello", 60)
        old = redis_sentinels.primary_port()
        replica = next(port for port in redis_sentinels.data_ports if port != old)
        deadline = time.monotonic() + 10
        while not redis_sentinels.node(replica).keys("*greeting") and time.monotonic() < deadline:
            time.sleep(0.05)
        redis_sentinels.kill(old)
        redis_sentinels.wait_for_failover(old)
        # Until Sentinel names the promoted replica, the cache answers as an empty one (shop.cache:
        # misses, dropped writes), never an error; then it reads what the replica had and writes again.
        deadline = time.monotonic() + 30
        while not (cache.get("greeting") == "hello" and cache.set("after", "failover", 60)):
            assert time.monotonic() < deadline, "the cache did not follow the failover"
            time.sleep(0.2)
        assert cache.get("after") == "failover"
        cache.close()
