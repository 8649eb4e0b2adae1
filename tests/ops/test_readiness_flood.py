"""/readyz under a flood (M4): per process it asks its dependencies at most once per
READINESS_CACHE_SECONDS, whatever the number of requests (PostgreSQL connections counted by the server
itself, DescribeTables at the strict endpoint), and a throttled DescribeTable is not "not ready"."""
import threading
import time

import psycopg
import pytest
from django.db import connections
from django.test import Client

from ops import selectors
from tests.conftest import TEST_POSTGRES_URL

pytestmark = [pytest.mark.usefixtures("strict_dynamodb_settings"), pytest.mark.django_db(databases="__all__")]


@pytest.fixture
def fresh_memo(monkeypatch):
    """A process's memo as it is at start-up (tests run in one process)."""
    monkeypatch.setattr(selectors, "memoised_readiness", selectors.Memoised(selectors.readiness))


def sessions(database: str) -> int:
    """Connections PostgreSQL has accepted to `database` since it was created (this one included)."""
    with psycopg.connect(TEST_POSTGRES_URL, autocommit=True) as admin:
        return admin.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s", [database]).fetchone()[0]


def describe_tables(endpoint) -> int:
    return sum(1 for entry in endpoint.requests() if entry["operation"] == "DescribeTable")


def test_a_flood_of_readyz_opens_one_connection_and_asks_dynamodb_once(comments_table, strict_endpoint, settings,
                                                                      postgres_database, fresh_memo):
    settings.READINESS_CACHE_SECONDS = 30  # the whole flood inside one memo period
    database = connections[postgres_database].settings_dict
    settings.DATABASES = {**settings.DATABASES, "default": database}  # read by the probe only
    strict_endpoint.clear_requests()
    before = sessions(database["NAME"])
    statuses = []

    def flood():
        browser = Client()
        statuses.extend(browser.get("/readyz").status_code for _ in range(50))

    threads = [threading.Thread(target=flood) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200] * 200
    assert describe_tables(strict_endpoint) == 1
    assert sessions(database["NAME"]) - before == 1  # the probe's own connection, once


def test_a_throttled_describe_table_is_still_ready(client, comments_table, strict_endpoint, fresh_memo):
    """DescribeTable has a rate of its own, shared by every instance's probe: if throttling made them
    all not ready at once, the load balancer would drain every target."""
    strict_endpoint.set_faults([{"kind": "ThrottlingException", "rate": 1.0, "operations": ["DescribeTable"]}])
    strict_endpoint.clear_requests()
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"]["dynamodb"] == "ok"
    assert describe_tables(strict_endpoint) >= 1 and all(
        entry["error"] == "ThrottlingException" for entry in strict_endpoint.requests()
        if entry["operation"] == "DescribeTable")
    strict_endpoint.set_faults([{"kind": "InternalServerError", "rate": 1.0, "operations": ["DescribeTable"]}])
    failing = client.get("/readyz")
    assert failing.status_code == 503 and failing.json()["checks"]["dynamodb"].startswith("failed")


def test_the_memo_ends(client, comments_table, strict_endpoint, settings, fresh_memo):
    settings.READINESS_CACHE_SECONDS = 0.3
    strict_endpoint.clear_requests()
    assert client.get("/readyz").status_code == 200
    strict_endpoint.set_faults([{"kind": "InternalServerError", "rate": 1.0, "operations": ["DescribeTable"]}])
    assert client.get("/readyz").status_code == 200  # the answer of 0.3 s ago
    time.sleep(0.4)
    assert client.get("/readyz").status_code == 503
