"""Reads for health checks and the /ops/ status page."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection

from comments.table.client import dynamodb_probe
from comments.table.keys import PRODUCTS, table_name
from pagination_index import get_index, index, sources
from pagination_index.models import LagSample, ShardCheckpoint
from shop.models import Product

logger = logging.getLogger(__name__)

READINESS_GROUP = "__readyz__"  # an index group no product uses: count() of it is a cheap round trip


# OPTIONS that Django's PostgreSQL backend reads itself and libpq would refuse.
DJANGO_ONLY_OPTIONS = frozenset({"isolation_level", "server_side_binding", "pool", "assume_role", "cursor_factory"})


def probe_database(database: dict, *, connect_timeout: int) -> None:
    """SELECT 1 on the database of `database` (a DATABASES entry). PostgreSQL gets a connection of the
    probe's own, opened with `connect_timeout`: neither a pooled connection left hanging by a vanished
    server nor one that accepts and never answers can hold /readyz. Other databases (SQLite, a file)
    are asked through Django's connection."""
    if database["ENGINE"] != "django.db.backends.postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return
    options = {key: value for key, value in database.get("OPTIONS", {}).items() if key not in DJANGO_ONLY_OPTIONS}
    params = {"dbname": database.get("NAME"), "user": database.get("USER"), "password": database.get("PASSWORD"),
              "host": database.get("HOST"), "port": database.get("PORT")}
    params = {key: value for key, value in {**params, **options}.items() if value not in (None, "")}
    params["connect_timeout"] = connect_timeout
    with psycopg.connect(**params, autocommit=True) as probe:
        probe.execute("SELECT 1")


def _check_database() -> None:
    probe_database(settings.DATABASES[DEFAULT_DB_ALIAS], connect_timeout=settings.DATABASE_CONNECT_TIMEOUT)


def _check_dynamodb() -> None:
    dynamodb_probe().describe_table(TableName=table_name())


def _check_index() -> None:
    get_index().count(READINESS_GROUP)  # the store itself, never the pages' fail-fast answer


READINESS_CHECKS = {"database": _check_database, "dynamodb": _check_dynamodb, "index": _check_index}


def readiness() -> dict[str, str]:
    """Each dependency of a page, "ok" or what failed (the exception's type: details go to the log)."""
    results = {}
    for name, check in READINESS_CHECKS.items():
        try:
            check()
        except Exception as exc:  # any failure means not ready; /readyz must answer, never raise
            logger.warning("readiness check %s failed", name, exc_info=True)
            results[name] = f"failed: {type(exc).__name__}"
        else:
            results[name] = "ok"
    return results


@dataclass(frozen=True)
class ProductCounts:
    sku: str
    name: str
    table: int | None  # None when it could not be read
    index: int | None

    @property
    def drift(self) -> int | None:
        """Index minus table: positive when the index holds comments the table no longer has."""
        if self.table is None or self.index is None:
            return None
        return self.index - self.table


def product_counts(products: list[Product], *, exact: str | None = None) -> tuple[list[ProductCounts], list[str]]:
    """Index counts for a page of products (one read), and the table's exact count for the one
    product `exact` names: that is a COUNT Query over its whole GSI partition (DynamoDB reads every
    item: minutes for a product with millions of comments), so only ever asked for one product at a
    time. Returns the rows and the errors met reading them."""
    errors: list[str] = []
    try:
        index_counts = index.count_many([product.sku for product in products])
    except Exception as exc:
        errors.append(f"index: {type(exc).__name__}: {exc}")
        index_counts = {}
    rows = []
    for product in products:
        table_count = None
        if product.sku == exact:
            try:
                table_count = sources[PRODUCTS].group_count(product.sku)
            except Exception as exc:
                errors.append(f"DynamoDB: {type(exc).__name__}: {exc}")
        rows.append(ProductCounts(product.sku, product.name, table_count, index_counts.get(product.sku)))
    return rows, errors


def stream_checkpoints() -> list[ShardCheckpoint]:
    return list(ShardCheckpoint.objects.order_by("-updated_at"))


def lag_samples(*, since: datetime) -> list[LagSample]:
    return list(LagSample.objects.filter(at__gte=since).order_by("at"))


def latest_lag_sample() -> LagSample | None:
    return LagSample.objects.order_by("-at").first()


def lag_window(hours: float = 1.0) -> tuple[datetime, datetime]:
    now = datetime.now(timezone.utc)
    return now - timedelta(hours=hours), now
