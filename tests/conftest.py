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
    _add_postgres_alias(settings.DATABASES)


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
    settings.CACHES = {**settings.CACHES, "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": settings.REDIS_URL,
        "KEY_PREFIX": f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}",
    }}
    yield cache
    cache.delete_pattern("*")



# --- PostgreSQL and Redis ---------------------------------------------------------------------
# PostgreSQL runs beside the default database as the alias "postgres" (a test database of its own,
# named per run), so one `make test` proves the relational backend on SQLite and PostgreSQL.
# Tests that use it are marked django_db(databases="__all__") and ask for `postgres_database`.
POSTGRES_ALIAS = "postgres"
TEST_POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
TEST_REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
_postgres_missing: str | None = None


def _add_postgres_alias(databases: dict) -> None:
    """Configure the "postgres" alias when the server answers; else remember why not."""
    global _postgres_missing
    import dj_database_url
    import psycopg
    from django.db import connections

    try:
        psycopg.connect(TEST_POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        _postgres_missing = f"PostgreSQL at {TEST_POSTGRES_URL} (TEST_POSTGRES_URL): {exc}".strip()
        return
    database = dj_database_url.parse(TEST_POSTGRES_URL)
    database["TEST"] = {"NAME": f"test_shop_{os.getpid()}_{uuid.uuid4().hex[:6]}"}
    databases[POSTGRES_ALIAS] = database
    connections.configure_settings(databases)  # fills the new alias's defaults


@pytest.fixture
def postgres_database(django_db_setup):
    """The alias of the per-run PostgreSQL test database (skip, or fail under CI, without one)."""
    if _postgres_missing:
        service_missing(_postgres_missing)
    return POSTGRES_ALIAS


@pytest.fixture(scope="session")
def redis_url():
    import redis

    client = redis.Redis.from_url(TEST_REDIS_URL, socket_connect_timeout=1, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing(f"Redis at {TEST_REDIS_URL} (REDIS_URL): {exc}")
    finally:
        client.close()
    return TEST_REDIS_URL


@pytest.fixture
def redis_index_options(redis_url):
    """RedisIndex OPTIONS with a key prefix of this test's own; its keys are deleted afterwards."""
    from pagination_index.backends.redis import RedisIndex

    options = {"CACHE": "index", "KEY_PREFIX": f"test-pidx:{os.getpid()}:{uuid.uuid4().hex[:10]}:"}
    yield options
    RedisIndex(options).clear()


INDEX_BACKENDS = ["relational-sqlite", "relational-postgres", "redis"]


@pytest.fixture(params=INDEX_BACKENDS)
def index_backend(request, settings):
    """Runs a test once per index backend, with settings.PAGINATION_INDEX pointing at it. Tests that
    use it need django_db(databases="__all__") for the PostgreSQL run."""
    name = request.param
    if name == "relational-sqlite":
        options = {}
    elif name == "relational-postgres":
        options = {"DATABASE": request.getfixturevalue("postgres_database")}
    else:
        options = request.getfixturevalue("redis_index_options")
    backend = settings.PAGINATION_INDEX_BACKENDS[name.split("-")[0]]
    settings.PAGINATION_INDEX = {"BACKEND": backend, "OPTIONS": options}
    return name
