"""Shared fixtures: a real DynamoDB Local (in memory, free port), a fresh comments table per test
or module, and seeding helpers. Under CI=true a missing service fails the run instead of skipping."""
from __future__ import annotations

import os
import uuid

import pytest
from django.test import override_settings

from comments.schema import create_tables, delete_tables
from pagination_index import reset_index
from stack.dynamodb_local import DynamoDBLocal, DynamoDBLocalError

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def service_missing(reason: str):
    """Fail under CI (services are promised there), skip with the reason elsewhere."""
    if IN_CI:
        pytest.fail(f"required service missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def dynamodb_local():
    try:
        server = DynamoDBLocal().start()
    except DynamoDBLocalError as exc:
        service_missing(f"DynamoDB Local: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def dynamodb_settings(dynamodb_local):
    from django.conf import settings

    config = dict(settings.DYNAMODB, ENDPOINT_URL=dynamodb_local.endpoint_url)
    with override_settings(DYNAMODB=config):
        yield config


def _table(dynamodb_settings):
    config = dict(dynamodb_settings, TABLE=f"comments-{uuid.uuid4().hex[:12]}")
    with override_settings(DYNAMODB=config):
        create_tables()
        try:
            yield config["TABLE"]
        finally:
            delete_tables()


@pytest.fixture
def comments_table(dynamodb_settings):
    """A fresh, empty comments table (with its own stream) for one test."""
    yield from _table(dynamodb_settings)


@pytest.fixture(scope="module")
def module_table(dynamodb_settings):
    """A comments table shared by a module's tests (for data that is slow to write)."""
    yield from _table(dynamodb_settings)


@pytest.fixture(autouse=True)
def _fresh_index_handler():
    """Each test gets the backend its settings name, never one cached by an earlier test."""
    reset_index()
    yield
    reset_index()


@pytest.fixture(autouse=True)
def _no_fast_cache(settings):
    """Tests write to DynamoDB and read straight back: no cached fast-path windows between them."""
    settings.COMMENTS_FAST_CACHE_SECONDS = 0


@pytest.fixture(scope="session")
def django_db_modify_db_settings(tmp_path_factory):
    """SQLite test databases live in a file in WAL mode, as in `make run`, so a reader thread sees
    committed snapshots while a writer works (the in-memory default would lock it out)."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


@pytest.fixture
def redis_cache(settings):
    """Django's default cache on the real Redis (django-redis), under a key prefix of this run's own;
    its keys are deleted afterwards (never FLUSHDB: the server is shared)."""
    import redis
    from django.core.cache import cache

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        service_missing(f"Redis at {settings.REDIS_URL}: {exc}")
    settings.CACHES = {"default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": settings.REDIS_URL,
        "KEY_PREFIX": f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}",
    }}
    yield cache
    cache.delete_pattern("*")
