"""The benchmarks' shop: DynamoDB Local with the demo catalogue, the flagship product holding `size`
comments, kept under bench/.data/shop-<size>/ (git-ignored) so that re-runs skip the seeding.

DynamoDB Local runs on a copy of its data file in /dev/shm: on disk, its SQLite file syncs every
write, and seeding crawls at a few dozen items/s on a busy machine. The file is copied back after
seeding and copied in again at every run (a second for 100,000 comments).

Redis is a redis-server of the run's own on a free port: the machine's shared Redis sees other
people's FLUSHDBs, which emptied a Redis index in the middle of a load test.

    dataset = Dataset(100_000)      # before django.setup(): points the settings at the data folder
    with dataset:                   # starts DynamoDB Local; seeds and indexes it the first time
        ...
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from bench.common import add_database_alias
from stack.dynamodb_local import DynamoDBLocal, free_port
from tests.services import RedisServer

DATA = Path(__file__).resolve().parent / ".data"
FLAGSHIP = "KETTLE-2000"
# Above this many comments the dataset's index is written from the seeding, not read back (seed).
INDEX_FROM_SEEDING = 100_000
POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")


class Dataset:
    def __init__(self, size: int):
        self.size = size
        self.folder = DATA / f"shop-{size}"
        self.port = free_port()
        self.saved = self.folder / "dynamodb"
        self.work = Path(tempfile.mkdtemp(prefix="bench-dynamodb-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
        self.database = DynamoDBLocal(self.port, db_path=self.work, log_path=self.folder / "dynamodb.log")
        self.redis = RedisServer(self.work)
        self.env = {
            "DJANGO_SETTINGS_MODULE": "shop.settings",
            "SHOP_VAR_DIR": str(self.folder),
            "DYNAMODB_ENDPOINT_URL": self.database.endpoint_url,
            "REDIS_URL": f"redis://127.0.0.1:{self.redis.port}/0",
            "PAGINATION_INDEX_BACKEND": "relational",
            "LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),  # INFO: one line per request in the gunicorn logs
            # As in production: DEBUG off (so a key is needed: this one is for benchmarks only) and
            # static files from collectstatic's manifest, as WhiteNoise serves them.
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "bench-only-not-secret"),
            "COMMENTS_CURSOR_KEY": os.environ.get("COMMENTS_CURSOR_KEY", "bench-only-cursor-key-not-secret-0123456789"),
            "MODERATION_REPORTER_KEY": os.environ.get("MODERATION_REPORTER_KEY",
                                                      "bench-only-reporter-key-not-secret-0123456789"),
            "DJANGO_STATIC_ROOT": str(DATA / "static"),
        }
        os.environ.update(self.env)

    @property
    def stamp(self) -> Path:
        return self.folder / "seeded.json"

    def __enter__(self) -> "Dataset":
        self.folder.mkdir(parents=True, exist_ok=True)
        seeded = self.stamp.exists()
        if seeded:
            shutil.copytree(self.saved, self.work, dirs_exist_ok=True)
        self.database.start()
        self.redis.start()
        import django

        django.setup()
        from django.core.management import call_command

        call_command("collectstatic", interactive=False, verbosity=0)
        if seeded:  # a dataset saved before newer migrations
            call_command("migrate", interactive=False, verbosity=0)
        else:
            self.seed()
        return self

    def __exit__(self, *exc) -> None:
        self.database.stop()
        self.redis.kill()
        shutil.rmtree(self.work, ignore_errors=True)

    def seed(self) -> None:
        """Products, comments (BatchWriteItem, about 1,000 items/s on DynamoDB Local) and the
        relational index in the folder's SQLite database."""
        from django.core.management import call_command

        started = time.monotonic()
        call_command("migrate", interactive=False, verbosity=0)
        call_command("create_tables")
        if self.size > INDEX_FROM_SEEDING:
            # DynamoDB Local reads a partition this deep back slowly (each page costs more the deeper
            # its ExclusiveStartKey; AWS's does not): the index is written from the comments seeded.
            call_command("seed_demo", big=self.size, threads=4, index=True)
        else:
            call_command("seed_demo", big=self.size, threads=4)
            # The products are known: naming them spares rebuild_index its discovery Scan.
            from shop.models import Product

            call_command("rebuild_index", *[arg for sku in Product.objects.values_list("sku", flat=True)
                                            for arg in ("--group", sku)], verbosity=0)
        self.database.stop()  # flushes its file
        shutil.rmtree(self.saved, ignore_errors=True)
        shutil.copytree(self.work, self.saved)
        self.database.start()
        self.stamp.write_text(json.dumps({"flagship_comments": self.size,
                                          "seconds": round(time.monotonic() - started, 1)}) + "\n")

    def products(self) -> dict[str, int]:
        """SKU -> comment count, from the relational index."""
        from pagination_index import index
        from shop.models import Product

        skus = list(Product.objects.order_by("sku").values_list("sku", flat=True))
        return index.count_many(skus)


@contextmanager
def redis_index(prefix: str | None = None):
    """The Redis backend, filled from the table under a key prefix of this run's own; deleted after.
    Yields the settings and environment that select it."""
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    import tests.signals  # noqa: F401  (override_settings resets the loaded index)
    from tests.config import index_config

    from pagination_index import get_index

    prefix = prefix or f"bench-pidx:{os.getpid()}:{uuid.uuid4().hex[:6]}:"
    config = index_config(BACKEND="pagination_index.backends.redis.RedisIndex",
                          OPTIONS=dict(settings.PAGINATION_INDEX_REDIS, KEY_PREFIX=prefix))
    with override_settings(PAGINATION_INDEX=config):
        try:
            call_command("rebuild_index", verbosity=0)
            yield {"PAGINATION_INDEX_BACKEND": "redis", "PAGINATION_INDEX_KEY_PREFIX": prefix}
        finally:
            get_index().clear()


@contextmanager
def postgres_index():
    """The relational backend on a PostgreSQL database of this run's own (created, filled, dropped)."""
    import dj_database_url
    import psycopg
    from django.core.management import call_command
    from django.db import connections
    from django.test import override_settings

    import tests.signals  # noqa: F401  (override_settings resets the loaded index)
    from tests.config import index_config

    name = f"bench_pages_{os.getpid()}"
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        version = admin.execute("SHOW server_version").fetchone()[0]
    alias = "bench_postgres"
    add_database_alias(alias, {**dj_database_url.parse(POSTGRES_URL, conn_max_age=60), "NAME": name})
    config = index_config(BACKEND="pagination_index.backends.relational.RelationalIndex",
                          OPTIONS={"DATABASE": alias})
    try:
        call_command("migrate", database=alias, verbosity=0)
        with override_settings(PAGINATION_INDEX=config):
            call_command("rebuild_index", verbosity=0)
            with connections[alias].cursor() as cursor:
                cursor.execute("VACUUM ANALYZE pagination_index_indexentry")
            yield version
    finally:
        connections[alias].close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
