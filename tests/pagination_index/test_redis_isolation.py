"""Nothing but the index can erase the index: a Redis cache's clear() is FLUSHDB, so the index has a
database of its own (PAGINATION_INDEX_REDIS_URL) and a system check refuses any cache on it. Proven
on a redis-server of the test's own, since clear() really flushes."""

import pytest
from django.core.cache import caches
from django.core.management import call_command

from pagination_index import get_index
from pagination_index.checks import check_index_apart_from_caches
from tests.ops.test_settings import manage
from pagination_index.testing import sk
from tests.config import index_config


def use_redis(settings, port, *, index_database=1):
    """Two caches (django-redis's and Django's own RedisCache) on databases 0 and 2, the index on
    `index_database`, all on one server."""
    settings.CACHES = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": f"redis://127.0.0.1:{port}/0"},
        "sessions": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                     "LOCATION": f"redis://127.0.0.1:{port}/2"},
    }
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"], "OPTIONS": dict(
        settings.PAGINATION_INDEX_REDIS, LOCATION=f"redis://127.0.0.1:{port}/{index_database}")})


def test_the_index_survives_every_cache_clear_on_the_same_server(settings, redis_server):
    use_redis(settings, redis_server.port)
    assert check_index_apart_from_caches(None) == []
    get_index().add_many("SKU-1", [("a", sk(1)), ("b", sk(2))])
    for alias in settings.CACHES:
        caches[alias].set("k", "v")
        caches[alias].clear()
        assert caches[alias].get("k") is None  # the clear() was real
    assert get_index().range("SKU-1", 0, 10) == [("b", sk(2)), ("a", sk(1))]


def test_a_cache_on_the_index_database_is_refused(settings, redis_server):
    use_redis(settings, redis_server.port, index_database=2)
    errors = check_index_apart_from_caches(None)
    assert [(error.id, "'sessions'" in error.msg) for error in errors] == [("pagination_index.E009", True)]
    with pytest.raises(Exception, match="pagination_index.E009"):
        call_command("check")


@pytest.mark.parametrize("cache_url, index_url, refused", [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", True),
    ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379/0", True),  # /0 is the default database
    ("redis://LOCALHOST/3", "redis://localhost:6379/3", True),
    ("redis://127.0.0.1:6379/0?db=4", "redis://127.0.0.1:6379/4", True),
    ("redis://127.0.0.1:6379/0", "redis+cluster://127.0.0.1:6379", True),  # a cluster node's only database
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1", False),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6380/0", False),
    ("redis://10.0.0.1:6379/0", "redis://10.0.0.2:6379/0", False),
])
def test_the_check_compares_databases_not_spellings(settings, cache_url, index_url, refused):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": f"{cache_url},redis://replica"}}
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"],
                                 "OPTIONS": dict(settings.PAGINATION_INDEX_REDIS, LOCATION=index_url)})
    assert bool(check_index_apart_from_caches(None)) is refused


def test_a_server_refuses_to_start_with_its_cache_on_the_index_database():
    env = {"DJANGO_SECRET_KEY": "x" * 50, "CACHE_BACKEND": "redis", "REDIS_URL": "redis://127.0.0.1:6379/0",
           "PAGINATION_INDEX_BACKEND": "redis", "PAGINATION_INDEX_REDIS_URL": "redis://127.0.0.1:6379"}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "pagination_index.E009" in result.stderr


def test_by_default_the_index_takes_the_next_database_after_the_cache():
    result = manage("shell", "-c", "from django.conf import settings; print(settings.PAGINATION_INDEX_REDIS_URL)",
                    env={"DJANGO_SECRET_KEY": "x" * 50, "REDIS_URL": "redis://cache.example:6379/3"})
    assert result.stdout.strip().splitlines()[-1] == "redis://cache.example:6379/4", result.stderr
