"""Settings for the shop, read from the environment with safe local defaults.

Each environment variable is read once, here, and listed with its default in docs/reference.md
(tests/ops/test_settings.py holds the two equal). Sections: core, data stores, pagination index,
comment pages, caching, security, logging, operations.
"""
import hashlib
import json
import os
from pathlib import Path
from urllib.parse import quote, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from redis.backoff import NoBackoff
from redis.retry import Retry

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("SHOP_VAR_DIR", BASE_DIR / "var"))


def env_bool(name, default=False):
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name, default):
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_secret(name):
    """A secret from the environment: NAME itself (ECS injects a task's secrets so), or else the secret
    NAME_SECRET_ARN names, read from Secrets Manager once, at start-up. The stream Lambda has no ECS
    `Secrets`, and a value in its environment is readable by anyone allowed lambda:GetFunctionConfiguration
    (deploy/aws/data.yaml). The ARN may end in ":<json key>::", as an ECS `ValueFrom` does, to take one
    key of a JSON secret (RDS keeps {"username", "password"})."""
    value = os.environ.get(name, "")
    reference = os.environ.get(f"{name}_SECRET_ARN", "")
    if value or not reference:
        return value
    import boto3  # only where a secret is named by ARN

    parts = reference.split(":")
    arn, key = ":".join(parts[:7]), (parts[7] if len(parts) > 7 else "")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None  # as the index's clients
    text = boto3.client("secretsmanager", region_name=region).get_secret_value(SecretId=arn)["SecretString"]
    return json.loads(text)[key] if key else text


def with_password(url, password):
    """`url` with `password` in it: the password is a secret of its own (DATABASE_PASSWORD,
    REDIS_PASSWORD), so the URL holds none and can sit in plain configuration."""
    if not (url and password):
        return url
    parts = urlsplit(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}").geturl()


def ecs_task_addresses():
    """The task's own IPv4 addresses on ECS (its container metadata endpoint, which the ECS agent names
    in ECS_CONTAINER_METADATA_URI_V4), else none. An Application Load Balancer's health checks send the
    target's address as the Host header and cannot send another, so the task must allow its address
    or every health check is a DisallowedHost 400 (deploy/aws/site.yaml)."""
    uri = os.environ.get("ECS_CONTAINER_METADATA_URI_V4", "")
    if not uri:
        return []
    import urllib.request

    with urllib.request.urlopen(uri, timeout=2) as response:  # link-local, answered by the agent
        networks = json.loads(response.read()).get("Networks", [])
    return [address for network in networks for address in network.get("IPv4Addresses", [])]


def development_key(purpose: str) -> str:
    """A key derived from SECRET_KEY for one purpose: for DEBUG only, where no separate key is set."""
    return hashlib.sha256(f"{SECRET_KEY}\0{purpose}".encode()).hexdigest()


def next_database(url):
    """A Redis URL's next database number: redis://h:6379/0 -> redis://h:6379/1, and
    redis+sentinel://h:26379,h2:26379/SERVICE/0 -> redis+sentinel://h:26379,h2:26379/SERVICE/1."""
    parts = urlsplit(url)
    service, _, database = parts.path.strip("/").rpartition("/")
    database = database or "0"
    if not database.isdigit() or (service and not parts.scheme.endswith("+sentinel")):
        raise ImproperlyConfigured(f"Set PAGINATION_INDEX_REDIS_URL: no database number to follow in REDIS_URL={url!r}.")
    return parts._replace(path=f"/{service}/{int(database) + 1}" if service else f"/{int(database) + 1}").geturl()


def redis_cache(url, key_prefix):
    """CACHES entry for Django's cache on Redis at `url`: shop.cache.SharedRedisCache (django-redis,
    answering as an empty cache while Redis cannot be reached). A redis+sentinel://HOST:PORT,.../SERVICE/DB
    URL uses django-redis's own Sentinel support: its SentinelClient and SentinelConnectionFactory
    (given per cache, so no other Redis of the project goes through Sentinels), which ask the Sentinels
    for the primary on every new connection, so the cache follows a failover."""
    options = {
        # An unreachable Redis must cost a page little time (it is then a cache miss), not hang a worker.
        "SOCKET_CONNECT_TIMEOUT": 0.5,
        "SOCKET_TIMEOUT": 1,
        # One immediate retry: a pooled connection gone stale in a Redis restart reconnects at once
        # (redis-py's default would retry 3 times with backoff on every call to a dead host).
        "CONNECTION_POOL_KWARGS": {"retry": Retry(NoBackoff(), 1)},
        "FAIL_FAST_SECONDS": float(os.environ.get("CACHE_FAIL_FAST_SECONDS", "2")),
    }
    cache = {"BACKEND": "shop.cache.SharedRedisCache", "LOCATION": url, "KEY_PREFIX": key_prefix, "OPTIONS": options}
    parts = urlsplit(url)
    if not parts.scheme.endswith("+sentinel"):
        return cache
    credentials, _, hosts = parts.netloc.rpartition("@")
    sentinels = [(host, int(port or 26379)) for host, _, port in
                 (address.rpartition(":") if ":" in address else (address, "", "") for address in hosts.split(","))]
    service, _, database = parts.path.strip("/").partition("/")
    scheme = parts.scheme.removesuffix("+sentinel")
    options.update({
        "CLIENT_CLASS": "django_redis.client.SentinelClient",
        "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
        "SENTINELS": sentinels,
        # No retries of a Sentinel client's own: asking the next Sentinel is the retry (redis-py's
        # default held a page for seconds per Sentinel across a partition: bench.faults_net).
        "SENTINEL_KWARGS": {"socket_connect_timeout": 0.5, "socket_timeout": 1, "retry": Retry(NoBackoff(), 0)},
    })
    return {**cache, "LOCATION": f"{scheme}://{credentials + '@' if credentials else ''}{service}/{database or 0}"}


# --- Core -----------------------------------------------------------------------------------
DEBUG = env_bool("DJANGO_DEBUG")
SECRET_KEY = env_secret("DJANGO_SECRET_KEY") or ("insecure-local-development-key-change-me" if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is not set. With DEBUG off (no DJANGO_DEBUG=1) the site refuses to start without a "
        "secret key: set DJANGO_SECRET_KEY to a long random string, e.g. the output of "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`."
    )
# Earlier secret keys, still accepted for sessions and Django's signing (rotation:
# docs/runbooks/secret-rotation.md).
SECRET_KEY_FALLBACKS = env_list("DJANGO_SECRET_KEY_FALLBACKS", "")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver") + ecs_task_addresses()

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django.contrib.sitemaps",  # the sitemaps framework's templates (the domain is the request's host)
    "pagination_index",
    "metrics",  # before the apps whose requests it counts: it connects to the index's signals
    "shop",
    "comments",
    "ops",
    "moderation",
]

MIDDLEWARE = [
    "shop.middleware.RequestLogMiddleware",  # outermost: times and logs every response, sets X-Request-ID
    "shop.middleware.MicroCacheMiddleware",  # a public page asked for again within a second: no further work
    "shop.middleware.CookieResponsesArePrivateMiddleware",  # sees every cookie set inside: never public then
    "moderation.middleware.SurrogateKeyMiddleware",  # Cache-Tag / Surrogate-Key on product pages: CDN purges
    # gzip for clients that accept it (nginx in front passes it on: docs/nginx.md). Inside the
    # micro-cache, which keeps compressed and plain copies apart. BREACH: docs/architecture.md.
    "django.middleware.gzip.GZipMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "shop.middleware.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "shop.middleware.RequestTooLargeMiddleware",  # a body over the limit: the 413 page, DEBUG or not
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "shop.middleware.ServiceUnavailableMiddleware",  # innermost: a view's dependency down -> 503
]

ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"

# The site's own pages are Jinja2 templates (jinja2/, environment in shop/jinja2.py): a product page
# renders in about a third of the CPU Django's engine took (bench/notes/performance.md, "Templates: Jinja2").
# Django's engine stays second for the admin, the sitemaps' XML, robots.txt and form widgets.
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.jinja2.Jinja2",
        "DIRS": [BASE_DIR / "jinja2"],
        "APP_DIRS": False,
        "OPTIONS": {
            "environment": "shop.jinja2.environment",
            "autoescape": True,
            # As Django's engine writes them: an included file's last newline kept.
            "keep_trailing_newline": True,
            # Jinja2's backend has `request` and the CSRF helpers; flash messages come from here.
            "context_processors": ["django.contrib.messages.context_processors.messages"],
        },
    },
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Data stores ----------------------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL", "")
# In Lambda (which always sets AWS_LAMBDA_FUNCTION_NAME) the default would be a fresh, unmigrated SQLite
# file in /tmp: the stream handler would journal and fence there, unseen by the site. Refuse instead.
if not DATABASE_URL and os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
    raise ImproperlyConfigured(
        "DATABASE_URL is not set. The stream Lambda needs the site's PostgreSQL (rebuild fences, journal, "
        "checkpoints): set DATABASE_URL, and DATABASE_PASSWORD_SECRET_ARN for its password."
    )
DATABASES = {
    "default": dj_database_url.parse(
        with_password(DATABASE_URL, env_secret("DATABASE_PASSWORD"))
        or f"sqlite:///{VAR_DIR / 'db.sqlite3'}",  # empty: the default
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
    )
}
# Seconds to wait for a PostgreSQL connection (pages and /readyz's probe): a PostgreSQL that is down is a
# quick 503, not a hung page.
DATABASE_CONNECT_TIMEOUT = int(os.environ.get("DATABASE_CONNECT_TIMEOUT", "3"))
# The shard lease's length (PAGINATION_INDEX["SYNC"]["LEASE_SECONDS"] below): sync_index's sessions end
# themselves within half of it when partitioned from PostgreSQL (pagination_index.leases.session_settings).
SYNC_INDEX_LEASE_SECONDS = float(os.environ.get("SYNC_INDEX_LEASE_SECONDS", "30"))
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # libpq's TCP keepalives (off by default: a dead PostgreSQL host would hang a reader for the
    # kernel's two hours) and tcp_user_timeout: a client whose server vanished finds out within about
    # half a lease, as the server finds out about a vanished consumer.
    DATABASES["default"]["OPTIONS"] = {
        "connect_timeout": DATABASE_CONNECT_TIMEOUT,
        "keepalives": 1,
        "keepalives_idle": max(int(SYNC_INDEX_LEASE_SECONDS / 6), 1),
        "keepalives_interval": max(int(SYNC_INDEX_LEASE_SECONDS / 12), 1),
        "keepalives_count": 3,
        "tcp_user_timeout": max(int(SYNC_INDEX_LEASE_SECONDS * 500), 1000),
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets page reads go on while sync_index writes the index.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=10000;",
    }

# Sessions in the default database, through Django's db engine, except that a session the database
# cannot take at the end of a request loses that request's changes with a warning instead of
# turning a done request (a stored comment) into a 400 or 500 (shop/sessions.py).
SESSION_ENGINE = "shop.sessions"

# The comments table (docs/architecture.md, "Data model"): GSI byProduct (PK2, SK) serves product pages,
# byRating (PK2R, SK) filtered ones. Each GSI is a source of the pagination index (below).
COMMENTS_TABLE = os.environ.get("COMMENTS_TABLE", "comments")

# Redis: Django's cache with CACHE_BACKEND=redis (the index has its own: PAGINATION_INDEX_REDIS_URL).
# REDIS_PASSWORD (an ElastiCache AUTH token) goes into both Redis URLs when set.
REDIS_PASSWORD = env_secret("REDIS_PASSWORD")
REDIS_URL = with_password(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), REDIS_PASSWORD)

# --- Pagination index -----------------------------------------------------------------------
# The library's one settings dict (docs/library/configuration.md has every key and its default). The
# shop fills it from its environment variables (docs/reference.md).
PAGINATION_INDEX_BACKENDS = {
    "relational": "pagination_index.backends.relational.RelationalIndex",
    "redis": "pagination_index.backends.redis.RedisIndex",
    "dynamodb": "pagination_index.backends.dynamodb.DynamoDBIndex",
    "files": "pagination_index.backends.files.FileIndex",
    "resp": "pagination_index.backends.resp.RespIndex",
}
_index_backend = os.environ.get("PAGINATION_INDEX_BACKEND", "relational")
# Pages 1..FAST_PAGES share one Query result, and their counts, for this many seconds (0 disables).
COMMENTS_FAST_CACHE_SECONDS = float(os.environ.get("COMMENTS_FAST_CACHE_SECONDS", "2"))
COMMENTS_PAGE_SIZE = int(os.environ.get("COMMENTS_PAGE_SIZE", "20"))
COMMENTS_FAST_PAGES = int(os.environ.get("COMMENTS_FAST_PAGES", "10"))
_comment_source = {
    "TABLE": COMMENTS_TABLE,
    "SORT_KEY": "SK",
    # Declared, so pages never need DescribeTable: the table key is PK (the member) and SK.
    "GROUP_KEY_TYPE": "S",
    "SORT_KEY_TYPE": "S",
    "MEMBER_KEYS": ["PK"],
    # Groups are bare SKUs and "SKU/rating", as indexes built before sources had names hold them; the
    # two classes tell them apart (comments/table/source.py).
    "GROUP_PREFIX": "",
    "FAST_ITEMS": COMMENTS_FAST_PAGES * COMMENTS_PAGE_SIZE,
    "CACHE_SECONDS": COMMENTS_FAST_CACHE_SECONDS,
}
PAGINATION_INDEX = {
    "BACKEND": PAGINATION_INDEX_BACKENDS.get(_index_backend, _index_backend),
    "OPTIONS": {},
    "SOURCES": {
        "comments": {**_comment_source, "INDEX": "byProduct", "GROUP_KEY": "PK2",
                     "CLASS": "comments.table.source.ProductComments"},
        "comment_ratings": {**_comment_source, "INDEX": "byRating", "GROUP_KEY": "PK2R",
                            "CLASS": "comments.table.source.ProductRatingComments"},
    },
    # After an index call fails, pages fail fast (503) for this many seconds instead of each call
    # waiting out the store's timeouts again (0 disables).
    "FAIL_FAST_SECONDS": float(os.environ.get("PAGINATION_INDEX_FAIL_FAST_SECONDS", "2")),
    # Every AWS client (pagination_index/aws/): credentials always from boto3's default chain (keys
    # "local" only for an emulator's endpoint when the chain has none); the region and endpoint as boto3
    # finds them (AWS_REGION, AWS_ENDPOINT_URL...), unless DYNAMODB_ENDPOINT_URL points DynamoDB and its
    # streams elsewhere (make run: DynamoDB Local); the CA bundle from AWS_CA_BUNDLE or the profile,
    # proxies from HTTPS_PROXY/NO_PROXY, as botocore reads them; AWS_VERIFY_TLS=0 skips certificate
    # checks, for an emulator with a self-made certificate only. Page requests get DYNAMODB_MAX_ATTEMPTS
    # attempts per call; sync_index and the DynamoDB index's writes botocore's adaptive mode with
    # AWS_BACKGROUND_MAX_ATTEMPTS, bulk commands with AWS_BULK_MAX_ATTEMPTS.
    "AWS": {
        "ENDPOINT_URL": os.environ.get("DYNAMODB_ENDPOINT_URL") or None,
        "REGION": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None,
        "CONNECT_TIMEOUT": float(os.environ.get("DYNAMODB_CONNECT_TIMEOUT", "1")),
        "READ_TIMEOUT": float(os.environ.get("DYNAMODB_READ_TIMEOUT", "5")),
        "BULK_READ_TIMEOUT": float(os.environ.get("DYNAMODB_BULK_READ_TIMEOUT", "60")),
        "MAX_ATTEMPTS": int(os.environ.get("DYNAMODB_MAX_ATTEMPTS", "3")),
        "BACKGROUND_MAX_ATTEMPTS": int(os.environ.get("AWS_BACKGROUND_MAX_ATTEMPTS", "10")),
        "BULK_MAX_ATTEMPTS": int(os.environ.get("AWS_BULK_MAX_ATTEMPTS", "20")),
        "VERIFY_TLS": env_bool("AWS_VERIFY_TLS", True),
    },
    "SYNC": {
        # Seconds between polls when caught up, and how long a shard lease lasts unless renewed (how
        # soon a standby sync_index takes over).
        "POLL_SECONDS": float(os.environ.get("SYNC_INDEX_POLL_SECONDS", "1")),
        "LEASE_SECONDS": SYNC_INDEX_LEASE_SECONDS,
        # Threads reading stream shards in parallel (each shard paced to AWS's 5 GetRecords/s).
        "WORKERS": int(os.environ.get("SYNC_INDEX_WORKERS", "4")),
        # The consumer records its lag at most once per LAG_SAMPLE_SECONDS and keeps LAG_SAMPLE_KEEP_HOURS.
        "LAG_SAMPLE_SECONDS": float(os.environ.get("LAG_SAMPLE_SECONDS", "10")),
        "LAG_SAMPLE_KEEP_HOURS": float(os.environ.get("LAG_SAMPLE_KEEP_HOURS", "6")),
        # Redis index with replicas: a batch's checkpoint moves only once this many replicas have its
        # writes (WAIT), waiting at most WAIT_TIMEOUT_SECONDS (docs/reliability.md: the cost).
        "WAIT_REPLICAS": int(os.environ.get("SYNC_INDEX_WAIT_REPLICAS", "0")),
        "WAIT_TIMEOUT_SECONDS": float(os.environ.get("SYNC_INDEX_WAIT_TIMEOUT_SECONDS", "1")),
    },
    # rebuild_index / verify_index --repair: the wait between fencing a wave of groups and reading them,
    # for writes on their way to the index and for the GSIs' propagation behind the table.
    "REBUILD": {"SETTLE_SECONDS": float(os.environ.get("REBUILD_SETTLE_SECONDS", "1"))},
}
if PAGINATION_INDEX["BACKEND"] == PAGINATION_INDEX_BACKENDS["relational"]:
    # Counted blocks: entries per level-0 block and blocks per upper block, each kept within half
    # to twice the target.
    PAGINATION_INDEX["OPTIONS"] = {
        "BLOCK_SIZE": int(os.environ.get("PAGINATION_INDEX_BLOCK_SIZE", "1024")),
        "FANOUT": int(os.environ.get("PAGINATION_INDEX_FANOUT", "64")),
    }
# PAGINATION_INDEX_BACKEND=redis: one sorted set per group, in a Redis database of the index's own
# (docs/backends-redis.md): by default REDIS_URL's server with the next database number (cache on
# /0, index on /1), since a cache's clear() is FLUSHDB; the system check pagination_index.E009
# refuses any cache on the index's database. A redis+cluster:// URL, or
# PAGINATION_INDEX_REDIS_CLUSTER=1, means a Redis Cluster (a node's address; the client finds the
# rest). Short timeouts: a dead Redis must turn into a quick 503, not a hung page. One immediate
# retry: a pooled connection that went stale in a Redis restart reconnects at once (on a cluster,
# the retry re-reads the slot map after a failover).
PAGINATION_INDEX_REDIS_URL = with_password(os.environ.get("PAGINATION_INDEX_REDIS_URL", ""), REDIS_PASSWORD) or next_database(
    REDIS_URL)
PAGINATION_INDEX_REDIS = {  # RedisIndex OPTIONS
    "LOCATION": PAGINATION_INDEX_REDIS_URL,
    "CLUSTER": env_bool("PAGINATION_INDEX_REDIS_CLUSTER"),
    "KEY_PREFIX": os.environ.get("PAGINATION_INDEX_KEY_PREFIX", "pidx:"),
    "SOCKET_CONNECT_TIMEOUT": float(os.environ.get("PAGINATION_INDEX_REDIS_CONNECT_TIMEOUT", "0.5")),
    "SOCKET_TIMEOUT": float(os.environ.get("PAGINATION_INDEX_REDIS_TIMEOUT", "1")),
    "CONNECTION_POOL_KWARGS": {"retry": Retry(NoBackoff(), 1)},
}
if PAGINATION_INDEX["BACKEND"] == PAGINATION_INDEX_BACKENDS["redis"]:
    PAGINATION_INDEX["OPTIONS"] = dict(PAGINATION_INDEX_REDIS)
# PAGINATION_INDEX_BACKEND=dynamodb: the index in a DynamoDB table of its own (docs/backends-dynamodb.md),
# on the comments table's endpoint, named after it with "-pidx"; made by `create_tables`.
# PAGE_SIZE: entries per page item (an item holds at most 400 KB; 20 entries are about 1.2 KB).
# MAX_SHIFT: page items one insert/delete may shift (at most 90); past that the group is marked and
# sync_index's re-mark shifts them in the background.
PAGINATION_INDEX_DYNAMODB = {  # DynamoDBIndex OPTIONS
    "TABLE": os.environ.get("PAGINATION_INDEX_DYNAMODB_TABLE", f"{COMMENTS_TABLE}-pidx"),
    "PAGE_SIZE": int(os.environ.get("PAGINATION_INDEX_DYNAMODB_PAGE_SIZE", "20")),
    "MAX_SHIFT": int(os.environ.get("PAGINATION_INDEX_DYNAMODB_MAX_SHIFT", "20")),
}
if PAGINATION_INDEX["BACKEND"] == PAGINATION_INDEX_BACKENDS["dynamodb"]:
    PAGINATION_INDEX["OPTIONS"] = dict(PAGINATION_INDEX_DYNAMODB)
# PAGINATION_INDEX_BACKEND=files: sorted fixed-size records per group in files under PATH, with a
# write-ahead log folded into a new generation once it holds COMMIT_ENTRIES changes or is
# COMMIT_SECONDS old (docs/backends-files.md).
PAGINATION_INDEX_FILES = {  # FileIndex OPTIONS
    "PATH": os.environ.get("PAGINATION_INDEX_PATH") or str(VAR_DIR / "pagination-index"),
    "COMMIT_ENTRIES": int(os.environ.get("PAGINATION_INDEX_COMMIT_ENTRIES", "1000")),
    "COMMIT_SECONDS": float(os.environ.get("PAGINATION_INDEX_COMMIT_SECONDS", "60")),
    # With a bucket, generations live in S3 (the log stays local, on the host running sync_index).
    "S3_BUCKET": os.environ.get("PAGINATION_INDEX_S3_BUCKET", ""),
    "S3_PREFIX": os.environ.get("PAGINATION_INDEX_S3_PREFIX", "pagination-index/"),
    "S3_ENDPOINT_URL": os.environ.get("PAGINATION_INDEX_S3_ENDPOINT_URL", ""),
    "MANIFEST_SECONDS": float(os.environ.get("PAGINATION_INDEX_S3_MANIFEST_SECONDS", "1")),
}
if PAGINATION_INDEX["BACKEND"] == PAGINATION_INDEX_BACKENDS["files"]:
    PAGINATION_INDEX["OPTIONS"] = dict(PAGINATION_INDEX_FILES)
# PAGINATION_INDEX_BACKEND=resp: the files index above (PAGINATION_INDEX_FILES), served to every host
# over the Redis protocol by `manage.py serve_index` (docs/backends-resp.md), which owns the files;
# the site and sync_index reach it at PAGINATION_INDEX_RESP_URL with redis-py, the Redis backend's
# timeouts and retry, and its password (requirepass: empty, none).
PAGINATION_INDEX_RESP_URL = os.environ.get("PAGINATION_INDEX_RESP_URL", "redis://127.0.0.1:6380/0")
PAGINATION_INDEX_RESP_PASSWORD = os.environ.get("PAGINATION_INDEX_RESP_PASSWORD", "")
PAGINATION_INDEX_RESP = {  # RespIndex OPTIONS
    "LOCATION": PAGINATION_INDEX_RESP_URL,
    "PASSWORD": PAGINATION_INDEX_RESP_PASSWORD,
    "SOCKET_CONNECT_TIMEOUT": PAGINATION_INDEX_REDIS["SOCKET_CONNECT_TIMEOUT"],
    "SOCKET_TIMEOUT": PAGINATION_INDEX_REDIS["SOCKET_TIMEOUT"],
    "CONNECTION_POOL_KWARGS": {"retry": Retry(NoBackoff(), 1)},
    # Writes, commits and listings wait on the server's disk: their own, longer socket timeout.
    "WRITE_TIMEOUT": float(os.environ.get("PAGINATION_INDEX_RESP_WRITE_TIMEOUT", "60")),
}
if PAGINATION_INDEX["BACKEND"] == PAGINATION_INDEX_BACKENDS["resp"]:
    PAGINATION_INDEX["OPTIONS"] = dict(PAGINATION_INDEX_RESP)
# serve_index: where it listens (TLS with a certificate and key file), the most clients it takes, the
# largest request it reads (Redis: proto-max-bulk-len), and when a write's log append is synced:
# "always" before the reply, or "everysec" (Redis's appendfsync).
PAGINATION_INDEX["SERVE"] = {
    "OPTIONS": PAGINATION_INDEX_FILES,
    "PASSWORD": PAGINATION_INDEX_RESP_PASSWORD,
    "BIND": os.environ.get("PAGINATION_INDEX_RESP_BIND", "127.0.0.1"),
    "PORT": int(os.environ.get("PAGINATION_INDEX_RESP_PORT", "6380")),
    "MAXCLIENTS": int(os.environ.get("PAGINATION_INDEX_RESP_MAXCLIENTS", "10000")),
    "MAX_REQUEST_BYTES": int(os.environ.get("PAGINATION_INDEX_RESP_MAX_REQUEST_BYTES", str(8 << 20))),
    "APPENDFSYNC": os.environ.get("PAGINATION_INDEX_RESP_APPENDFSYNC", "always"),
    "TLS_CERT_FILE": os.environ.get("PAGINATION_INDEX_RESP_TLS_CERT_FILE", ""),
    "TLS_KEY_FILE": os.environ.get("PAGINATION_INDEX_RESP_TLS_KEY_FILE", ""),
}

# sync_index serves Prometheus metrics on this port (0: not at all); the web's are at /metrics.
SYNC_INDEX_METRICS_PORT = int(os.environ.get("SYNC_INDEX_METRICS_PORT", "0"))
# A CloudWatch namespace: sync_index writes its heartbeat and apply lag there as embedded-metric-format
# lines on stdout (metrics/cloudwatch.py); the ECS task's log driver carries them to CloudWatch Logs,
# which makes them metrics for the alarms (deploy/aws/alarms.yaml). Empty: none.
SYNC_INDEX_CLOUDWATCH_NAMESPACE = os.environ.get("SYNC_INDEX_CLOUDWATCH_NAMESPACE", "")
# Addresses allowed to read /metrics (Prometheus' hosts); anyone else gets a 404.
METRICS_ALLOWED_IPS = env_list("METRICS_ALLOWED_IPS", "127.0.0.1,::1")

# --- Comment pages, posting and the API -----------------------------------------------------
# What ?page=N means on a product's unfiltered pages: "newest" (page 1 = the newest comments, so
# every post shifts every page) or "stable" (archive pages counted from the oldest comment, so a
# post changes the landing page and the newest archive page only). docs/architecture.md, "Stable
# page numbers"; switching a live site changes what old ?page=N URLs show.
COMMENTS_PAGE_NUMBERING = os.environ.get("COMMENTS_PAGE_NUMBERING", "newest")
# At most this many accepted comment posts per client per minute (0 turns the limit off), counted in the
# default cache: per process with LocMemCache, shared when CACHE_BACKEND=redis.
COMMENTS_POSTS_PER_MINUTE = int(os.environ.get("COMMENTS_POSTS_PER_MINUTE", "5"))
# And at most this many on one product per minute from all clients together (0: no such cap).
COMMENTS_PRODUCT_POSTS_PER_MINUTE = int(os.environ.get("COMMENTS_PRODUCT_POSTS_PER_MINUTE", "60"))
# Posts refused as invalid (a 400 with the form's errors) are counted apart, against this more generous
# limit, so correcting a form never uses up the posting limit (0 turns it off).
COMMENTS_INVALID_POSTS_PER_MINUTE = int(os.environ.get("COMMENTS_INVALID_POSTS_PER_MINUTE", "30"))
# Behind proxies of the site's own: the header they append the client's address to (X-Forwarded-For),
# and how many of them append to it; the client is the address that many places from the right
# (shop/clients.py). Empty: REMOTE_ADDR. Rate limits, reporter hashes and admin logins count by it.
COMMENTS_CLIENT_IP_HEADER = os.environ.get("COMMENTS_CLIENT_IP_HEADER", "")
COMMENTS_CLIENT_IP_PROXIES = int(os.environ.get("COMMENTS_CLIENT_IP_PROXIES", "1"))
# Request bodies over this many bytes are refused with a 413 page. A full comment of 5,000 emoji
# is about 61 KB form-encoded.
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE", str(128 * 1024)))
# The key that signs "Load more" cursors, apart from SECRET_KEY (which every process holds, the stream
# Lambda included): whoever reads SECRET_KEY cannot forge a cursor. To rotate, set the new key and move
# the old one to COMMENTS_CURSOR_KEY_FALLBACKS (comma-separated), as SECRET_KEY_FALLBACKS: cursors it
# signed still open. The web refuses to start without it (shop/site_keys.py); DEBUG derives one.
COMMENTS_CURSOR_KEY = os.environ.get("COMMENTS_CURSOR_KEY") or (development_key("comments.cursor") if DEBUG else "")
COMMENTS_CURSOR_KEY_FALLBACKS = env_list("COMMENTS_CURSOR_KEY_FALLBACKS", "")
# API page size: default and upper bound of ?limit=.
COMMENTS_API_DEFAULT_LIMIT = 20
COMMENTS_API_MAX_LIMIT = 100
# URLs per sitemap file (the sitemaps protocol allows at most 50,000).
SITEMAP_URLS_PER_FILE = int(os.environ.get("SITEMAP_URLS_PER_FILE", "50000"))
# Sitemap files are kept this many seconds in Django's cache (each one reads the whole catalogue and an
# index entry per product); 0 builds every request.
SITEMAP_CACHE_SECONDS = int(os.environ.get("SITEMAP_CACHE_SECONDS", "60"))

# --- Caching --------------------------------------------------------------------------------
# Django's cache holds the fast windows, rendered pages and post counts: per process (locmem), or
# shared by every process with CACHE_BACKEND=redis.
# REDIS_URL may be redis+sentinel://HOST:PORT,HOST:PORT,HOST:PORT/SERVICE/DB (redis_cache above).
if os.environ.get("CACHE_BACKEND", "locmem") == "redis":
    _default_cache = redis_cache(REDIS_URL, os.environ.get("CACHE_KEY_PREFIX", "shop"))
else:
    _default_cache = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "shop"}
# Never on the Redis index's database (PAGINATION_INDEX_REDIS_URL): a cache's clear() is FLUSHDB.
CACHES = {"default": _default_cache}
# Product pages' rendered HTML is kept for this many seconds, keyed by a digest of everything it
# shows (never stale; 0 renders every request).
COMMENTS_RENDERED_CACHE_SECONDS = int(os.environ.get("COMMENTS_RENDERED_CACHE_SECONDS", "60"))
# Public 200s are kept per process for this many seconds and replayed to cookie-less GETs of the same
# URL (shop.middleware.MicroCacheMiddleware); 0 turns it off. At most this many URLs are kept.
RESPONSE_MICRO_CACHE_SECONDS = float(os.environ.get("RESPONSE_MICRO_CACHE_SECONDS", "1"))
RESPONSE_MICRO_CACHE_ENTRIES = int(os.environ.get("RESPONSE_MICRO_CACHE_ENTRIES", "256"))
# Product pages' Cache-Control max-age in seconds (public for cookie-less visitors, else private).
COMMENTS_PAGE_MAX_AGE = int(os.environ.get("COMMENTS_PAGE_MAX_AGE", "60"))
# With COMMENTS_PAGE_NUMBERING=stable: max-age of full archive pages, whose comments no post changes.
COMMENTS_ARCHIVE_MAX_AGE = int(os.environ.get("COMMENTS_ARCHIVE_MAX_AGE", "86400"))

# --- Static files ---------------------------------------------------------------------------
# Served by WhiteNoise from STATIC_ROOT (filled by `collectstatic`, run at image build) under
# content-hashed names, so they can be cached forever.
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", BASE_DIR / "staticfiles"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": os.environ.get(
            "DJANGO_STATICFILES_STORAGE",
            "django.contrib.staticfiles.storage.StaticFilesStorage" if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage",
        ),
    },
}

# --- Security -------------------------------------------------------------------------------
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")
CSRF_FAILURE_VIEW = "shop.errors.csrf_failure"
# DJANGO_HTTPS=1: the site is served over HTTPS, usually behind a proxy or load balancer that ends TLS
# and sets X-Forwarded-Proto (it must overwrite any such header from the client).
HTTPS = env_bool("DJANGO_HTTPS")
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    # Load balancer probes speak plain HTTP to the process: never redirect them.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD")
SESSION_COOKIE_HTTPONLY = True
# Staff passwords (createsuperuser, the admin's password forms): Django's four validators.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
     "OPTIONS": {"min_length": int(os.environ.get("DJANGO_PASSWORD_MIN_LENGTH", "12"))}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Wrong passwords a client may send the admin's login a minute before it is refused with a 429
# (shop/admin_login.py; 0: no limit).
ADMIN_LOGIN_FAILURES_PER_MINUTE = int(os.environ.get("ADMIN_LOGIN_FAILURES_PER_MINUTE", "5"))
# X-Content-Type-Options: nosniff, Referrer-Policy and Cross-Origin-Opener-Policy come from
# SecurityMiddleware; X-Frame-Options from XFrameOptionsMiddleware.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = os.environ.get("DJANGO_REFERRER_POLICY", "strict-origin-when-cross-origin")
X_FRAME_OPTIONS = "DENY"
# No inline scripts or styles anywhere. JSON-LD (<script type="application/ld+json">) is a data block,
# never executed, so script-src does not apply to it.
CONTENT_SECURITY_POLICY = os.environ.get(
    "DJANGO_CSP",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
)

# --- Logging --------------------------------------------------------------------------------
# One structured line per request (shop.middleware) and per stream batch (pagination_index.stream);
# JSON objects when LOG_FORMAT=json, else readable key=value lines, all on stderr through one handler.
# Every line logged during a request carries its request_id (the filter). gunicorn's own lines use the
# same formatter (gunicorn.conf.py, shop.gunicorn_logging).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text")
LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "shop.logs.RequestIdFilter"}},
    "formatters": {
        "plain": {"()": "shop.logs.KeyValueFormatter"},
        "json": {"()": "shop.logs.JSONFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
            "filters": ["request_id"],
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's default logging gives `django` a console handler of its own for DEBUG and
        # `django.server` another; naming `django` here drops both (and resets its children), so each
        # django.* line reaches the one root handler once, in this format, with or without DEBUG.
        # Its level follows LOG_LEVEL but stays above DEBUG (one line per SQL query).
        "django": {"handlers": [], "level": "INFO" if LOG_LEVEL == "DEBUG" else LOG_LEVEL, "propagate": True},
        "botocore": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
    },
}

# --- Operations -----------------------------------------------------------------------------
# A dependency that is down (DynamoDB, the index) is answered 503 with this Retry-After.
RETRY_AFTER_SECONDS = int(os.environ.get("RETRY_AFTER_SECONDS", "30"))
# /readyz asks its dependencies at most once per this many seconds in each process, and answers
# meanwhile from the last time (0: every request asks).
READINESS_CACHE_SECONDS = float(os.environ.get("READINESS_CACHE_SECONDS", "2"))
# Products a page of /ops/ lists (index counts only; a product's exact table count is asked for).
OPS_PRODUCTS_PER_PAGE = int(os.environ.get("OPS_PRODUCTS_PER_PAGE", "100"))
# Products a catalogue page lists.
CATALOGUE_PAGE_SIZE = int(os.environ.get("CATALOGUE_PAGE_SIZE", "50"))

# Moderation (docs/moderation.md). Reports a client may send a minute (0: no limit).
MODERATION_REPORTS_PER_MINUTE = int(os.environ.get("MODERATION_REPORTS_PER_MINUTE", "10"))
# The key of reporters' address hashes (an HMAC: one client, one hash; the address cannot be found by
# trying every IPv4 address without it), apart from SECRET_KEY like COMMENTS_CURSOR_KEY, and rotated
# the same way: with the old key in MODERATION_REPORTER_KEY_FALLBACKS, a client's open report made
# under it still counts as theirs.
MODERATION_REPORTER_KEY = os.environ.get("MODERATION_REPORTER_KEY") or (
    development_key("moderation.reporter") if DEBUG else "")
MODERATION_REPORTER_KEY_FALLBACKS = env_list("MODERATION_REPORTER_KEY_FALLBACKS", "")
# Dotted path of a callable purge(*, keys, paths) that purges a product's pages from a CDN after a
# moderation change ("" : none). moderation.purge.webhook POSTs them to MODERATION_PURGE_WEBHOOK_URL.
MODERATION_PURGE_HOOK = os.environ.get("MODERATION_PURGE_HOOK", "")
MODERATION_PURGE_WEBHOOK_URL = os.environ.get("MODERATION_PURGE_WEBHOOK_URL", "")
MODERATION_PURGE_TIMEOUT = float(os.environ.get("MODERATION_PURGE_TIMEOUT", "5"))
# The admin's erasure by author name reads the product's comments within one web request: at most
# this many (a larger product is erased with `manage.py erase_comments`, which has no limit).
MODERATION_ERASE_WEB_READ_LIMIT = int(os.environ.get("MODERATION_ERASE_WEB_READ_LIMIT", "20000"))
