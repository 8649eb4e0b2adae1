"""Shared fixtures: a real DynamoDB Local (in memory, free port), a fresh comments table per test
or module, and seeding helpers. Under CI=true a missing service fails the run instead of skipping."""
from __future__ import annotations

import os
import shutil
import uuid

import pytest
from django.test import override_settings

import tests.signals  # noqa: F401  (override_settings of the caches and databases resets the index)
from comments.table.schema import create_tables, delete_tables
from pagination_index import reset as reset_index
from stack.dynamodb_local import DynamoDBLocal, DynamoDBLocalError
from tests.config import aws_settings, index_config, set_cache_seconds, table_settings

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# Every AWS action the suite calls, checked against the deploy template's roles (tests/deploy/).
pytest_plugins = ["tests.deploy.aws_actions"]


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
def dynamodb_settings(request, dynamodb_local):
    """PAGINATION_INDEX["AWS"] on the session's DynamoDB Local; with STRICT_DYNAMODB=1 in the
    environment, on the strict endpoint in front of it (with its credentials and CA in the environment)
    instead. Yields the AWS settings dict (its ENDPOINT_URL)."""
    from django.conf import settings

    if not STRICT_SUITE:
        with aws_settings(ENDPOINT_URL=dynamodb_local.endpoint_url):
            yield settings.PAGINATION_INDEX["AWS"]
        return
    endpoint = request.getfixturevalue("strict_endpoint")
    with pytest.MonkeyPatch.context() as patch:
        _strict_environment(patch, endpoint)
        with aws_settings(ENDPOINT_URL=endpoint.url):
            yield settings.PAGINATION_INDEX["AWS"]


# --- The strict DynamoDB endpoint (stack/strict_endpoint/, docs/testing.md) ---------------------------
STRICT_SUITE = os.environ.get("STRICT_DYNAMODB", "").lower() in {"1", "true", "yes"}
# Seconds a table created through the endpoint stays CREATING in tests: long enough that every
# create_tables() meets the CREATING state, short enough not to slow the suite (AWS: often longer).
STRICT_CREATING_SECONDS = 0.5


@pytest.fixture(scope="session")
def strict_endpoint(dynamodb_local, tmp_path_factory):
    """The strict endpoint in front of the session's DynamoDB Local: TLS (`.ca_bundle`), SigV4 checked
    against the credentials it knows (`.access_key_id`/`.secret_access_key`, principal "default"), and
    an admin API (`.admin_url`; StrictEndpoint's methods) for faults, meter, request log and policies."""
    from stack.strict_endpoint import StrictEndpoint

    folder = tmp_path_factory.mktemp("strict-endpoint")
    endpoint = StrictEndpoint(dynamodb_local.endpoint_url, config={"creating_seconds": STRICT_CREATING_SECONDS},
                              state_dir=folder, log_path=folder / "endpoint.log").start()
    yield endpoint
    endpoint.stop()


def _strict_environment(patch: pytest.MonkeyPatch, endpoint) -> None:
    """The environment of a process that uses real-shaped credentials the endpoint knows, and trusts
    its CA; nothing else that botocore's credential chain would pick first."""
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        patch.delenv(name, raising=False)
    for name, value in endpoint.env().items():
        patch.setenv(name, value)


@pytest.fixture
def strict_dynamodb_settings(strict_endpoint, monkeypatch):
    """Like dynamodb_settings, for one test: PAGINATION_INDEX["AWS"]["ENDPOINT_URL"] is the strict
    endpoint, AWS_CA_BUNDLE its CA and the environment holds its default credentials (AKIA..., 40-character
    secret). The endpoint starts the test as configured at start-up (no faults or policies; meter and
    request log empty). Request it before `comments_table` (or with `pytest.mark.usefixtures`) so the
    table is made through it."""
    from django.conf import settings

    strict_endpoint.reset()
    _strict_environment(monkeypatch, strict_endpoint)
    with aws_settings(ENDPOINT_URL=strict_endpoint.url):
        yield settings.PAGINATION_INDEX["AWS"]


# The emulated stream and lagging GSIs (issue 28): options every test starts from.
AWS_STREAM_DEFAULTS = {"shards": 1, "rollover_seconds": 4 * 3600, "empty_page_rate": 0, "retention_seconds": 86400,
                       "iterator_seconds": 900, "describe_per_second": 10, "get_records_per_second": 5,
                       "readers_per_shard": 2}


@pytest.fixture(scope="session")
def aws_stream_endpoint(dynamodb_local, tmp_path_factory):
    """A strict endpoint whose stream behaves like AWS's (stack/strict_endpoint/streams.py) and whose
    GSIs can lag (gsi_lag.py); `configure_hook("streams", ...)` / `("gsi_view", lag_seconds=L)`."""
    from stack.strict_endpoint import StrictEndpoint

    folder = tmp_path_factory.mktemp("aws-stream-endpoint")
    config = {"creating_seconds": 0,
              "streams": {"class": "stack.strict_endpoint.streams.EmulatedStreams", "options": {"seed": 28}},
              "gsi_view": {"class": "stack.strict_endpoint.gsi_lag.LaggingGsiView", "options": {}}}
    endpoint = StrictEndpoint(dynamodb_local.endpoint_url, config=config, state_dir=folder,
                              log_path=folder / "endpoint.log").start()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def aws_stream_settings(aws_stream_endpoint, monkeypatch):
    """Like strict_dynamodb_settings, on `aws_stream_endpoint`, its stream and GSI lag at their defaults
    (one shard that never rolls over, no empty pages, no lag). Request it before `comments_table`."""
    from django.conf import settings

    aws_stream_endpoint.reset()
    aws_stream_endpoint.configure_hook("streams", **AWS_STREAM_DEFAULTS)
    aws_stream_endpoint.configure_hook("gsi_view", lag_seconds=0)
    _strict_environment(monkeypatch, aws_stream_endpoint)
    with aws_settings(ENDPOINT_URL=aws_stream_endpoint.url):
        yield aws_stream_endpoint


def _table(dynamodb_settings):
    """A table of its own on whatever endpoint the settings name now (the strict one when a test
    asked for strict_dynamodb_settings first)."""
    table = f"comments-{uuid.uuid4().hex[:12]}"
    with table_settings(table):
        create_tables()
        try:
            yield table
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


@pytest.fixture
def rendered_templates():
    """The names of the site's templates rendered while the test runs, in order: what Django's test
    client records as `response.templates` for its own engine only (shop.jinja2.template_rendered)."""
    from shop.jinja2 import template_rendered

    names: list[str] = []

    def record(sender, template, context, **kwargs):
        names.append(template)

    template_rendered.connect(record)
    yield names
    template_rendered.disconnect(record)


@pytest.fixture(autouse=True)
def _fresh_index_handler():
    """Each test gets the backend its settings name, never one cached by an earlier test."""
    reset_index()
    yield
    reset_index()


@pytest.fixture(autouse=True)
def _empty_caches(settings):
    """Each test starts with the cache configuration users run (COMMENTS_FAST_CACHE_SECONDS and the
    rendered pages on), empty: what one test read must not serve the next. A test that writes and
    reads straight back asks for `cold_reads`. A store that comes back is used at once
    (tests/shop/test_unavailable.py tests failing fast)."""
    from django.core.cache import cache

    settings.PAGINATION_INDEX = index_config(FAIL_FAST_SECONDS=0)
    cache.clear()  # the windows each process unpickled are versioned by generations kept there: they go too


@pytest.fixture
def cold_reads(settings):
    """Nothing shared between requests for a few seconds (the sources' CACHE_SECONDS=0): for tests
    that write to DynamoDB or the index directly and read the page straight back."""
    set_cache_seconds(settings, 0)


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


def _own_prefix_options(location: str):
    """RedisIndex OPTIONS (as settings make them) at `location`, with a key prefix of this test's own;
    its keys are deleted afterwards."""
    from django.conf import settings

    from pagination_index.backends.redis import RedisIndex

    options = dict(settings.PAGINATION_INDEX_REDIS, LOCATION=location,
                   KEY_PREFIX=f"test-pidx:{os.getpid()}:{uuid.uuid4().hex[:10]}:")
    yield options
    index = RedisIndex(options)
    index.clear()
    index.close()


@pytest.fixture
def redis_index_options(redis_url):
    """On the machine's Redis, in the index's own database (PAGINATION_INDEX_REDIS_URL's default)."""
    from django.conf import settings

    yield from _own_prefix_options(settings.PAGINATION_INDEX_REDIS["LOCATION"])


@pytest.fixture
def redis_server(tmp_path):
    """A redis-server of the test's own on a free port, which the test may stop, start or flush."""
    from tests.services import RedisServer

    if not shutil.which("redis-server"):
        service_missing("redis-server is not installed (Debian: apt-get install redis-server)")
    server = RedisServer(tmp_path).start()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """A Redis Cluster of the run's own (3 primaries, 3 replicas) from Debian's redis-server."""
    from tests.services import RedisClusterServers

    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        service_missing("redis-server and redis-cli are not installed (Debian: apt-get install redis-server)")
    servers = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster")).start()
    yield servers
    servers.stop()


@pytest.fixture
def redis_sentinels(tmp_path):
    """A primary, a replica and three Sentinels of the test's own (redis-server --sentinel), which the
    test may kill, pause and fail over."""
    from tests.services import RedisSentinelServers

    if not shutil.which("redis-server"):
        service_missing("redis-server is not installed (Debian: apt-get install redis-server)")
    servers = RedisSentinelServers(tmp_path).start()
    yield servers
    servers.stop()


@pytest.fixture
def redis_cluster_index_options(redis_cluster):
    yield from _own_prefix_options(redis_cluster.url)


@pytest.fixture
def dynamodb_index_options(dynamodb_settings):
    """A fresh index table of its own on DynamoDB Local, deleted afterwards."""
    from pagination_index.backends.dynamodb import DynamoDBIndex

    options = {"TABLE": f"pidx-{uuid.uuid4().hex[:12]}", "PAGE_SIZE": 3}
    index = DynamoDBIndex(options)
    index.create_table()
    yield options
    index.delete_table()
    index.close()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """An S3-compatible server of the run's own (moto's standalone server, from requirements-dev.txt)."""
    from tests.services import S3Server

    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        service_missing(f"moto[server] is not installed (pip install -r requirements-dev.txt): {exc}")
    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.kill()


@pytest.fixture
def files_s3_options(s3_server, tmp_path):
    """The files backend on S3: a bucket of the test's own; logs and locks in a local folder."""
    import boto3

    bucket = f"pidx-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server.url, region_name="us-east-1", aws_access_key_id="local",
                 aws_secret_access_key="local").create_bucket(Bucket=bucket)
    return {"PATH": str(tmp_path / "files-journal"), "S3_BUCKET": bucket, "S3_PREFIX": "index/",
            "S3_ENDPOINT_URL": s3_server.url, "COMMIT_ENTRIES": 7, "MANIFEST_SECONDS": 60}


@pytest.fixture(scope="session")
def serve_index(tmp_path_factory):
    """`manage.py serve_index` of the run's own, on a free port (tests/services.py: ServeIndex)."""
    from tests.services import ServeIndex

    server = ServeIndex(tmp_path_factory.mktemp("serve-index")).start()
    yield server
    server.kill()


@pytest.fixture
def resp_index_options(serve_index):
    """RespIndex OPTIONS on the run's serve_index, emptied after the test (FLUSHDB: it serves the tests only)."""
    from django.conf import settings

    from pagination_index.backends.resp import RespIndex

    options = dict(settings.PAGINATION_INDEX_RESP, LOCATION=serve_index.url)
    yield options
    index = RespIndex(options)
    index.clear()
    index.close()


INDEX_BACKENDS = ["relational-sqlite", "relational-postgres", "redis", "redis-cluster", "dynamodb", "files", "resp"]


@pytest.fixture(params=INDEX_BACKENDS)
def index_backend(request, settings):
    """Runs a test once per index backend, with settings.PAGINATION_INDEX pointing at it. Tests that
    use it need django_db(databases="__all__") for the PostgreSQL run."""
    name = request.param
    if name == "relational-sqlite":
        options = {}
    elif name == "relational-postgres":
        options = {"DATABASE": request.getfixturevalue("postgres_database")}
    elif name == "redis-cluster":
        options = request.getfixturevalue("redis_cluster_index_options")
    elif name == "dynamodb":
        options = request.getfixturevalue("dynamodb_index_options")
    elif name == "files":
        options = {"PATH": str(request.getfixturevalue("tmp_path") / "files-index"), "COMMIT_ENTRIES": 50}
    elif name == "resp":
        options = request.getfixturevalue("resp_index_options")
    else:
        options = request.getfixturevalue("redis_index_options")
    backend = settings.PAGINATION_INDEX_BACKENDS[name.split("-")[0]]
    settings.PAGINATION_INDEX = index_config(BACKEND=backend, OPTIONS=options)
    return name
