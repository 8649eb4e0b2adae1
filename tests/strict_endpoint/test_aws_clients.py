"""The client layer (aws/) through the strict endpoint (issue 27): every call signed with the configured
credentials, page requests within DYNAMODB_MAX_ATTEMPTS in all (counted at the endpoint by the page's
X-Request-Tag), a throttling storm answered 503 with Retry-After within the read timeout, a
ValidationException not retried, unprocessed batch items sent again after a backoff, temporary
credentials rotating under pages, and the DynamoDB index reading cancellation reasons."""
from __future__ import annotations

import time
import uuid

import pytest
from django.conf import settings
from django.test import override_settings

from comments.store import put_comments
from comments.table.client import dynamodb_reads
from pagination_index.backends.base import IndexUnavailable
from pagination_index.backends.dynamodb import DynamoDBIndex, InvalidIndexWrite
from tests import factories
from tests.factories import make_comments
from tests.config import aws_settings

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("strict_dynamodb_settings", "cold_reads")]


def page(client, sku: str, request_id: str):
    started = time.monotonic()
    response = client.get(f"/products/{sku}/", headers={"X-Request-ID": request_id})
    return response, time.monotonic() - started


def test_a_throttling_storm_is_a_quick_503_within_the_attempt_budget(client, comments_table, strict_endpoint):
    sku = "AWS-THROTTLED"
    factories.seed(sku, 5, seed=1)
    factories.product(sku)
    strict_endpoint.set_faults([{"kind": "ThrottlingException", "rate": 1.0, "operations": ["Query"]}])
    request_id = f"storm-{uuid.uuid4().hex[:8]}"
    response, elapsed = page(client, sku, request_id)
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    assert elapsed < settings.PAGINATION_INDEX["AWS"]["READ_TIMEOUT"]
    attempts = strict_endpoint.attempts_summary()["by_request_id"][request_id]
    assert attempts["attempts"] == settings.PAGINATION_INDEX["AWS"]["MAX_ATTEMPTS"]
    assert set(attempts["errors"]) == {"ThrottlingException"}
    strict_endpoint.set_faults([])
    response, _ = page(client, sku, f"calm-{uuid.uuid4().hex[:8]}")
    assert response.status_code == 200


def test_throttles_are_retried_after_a_backoff_within_the_same_page_request(client, comments_table, strict_endpoint):
    """With half of the Queries throttled: no page request makes more than DYNAMODB_MAX_ATTEMPTS
    attempts; a page whose attempts were not all throttled is a 200, and some needed a retry for it."""
    sku = "AWS-SOMETIMES"
    factories.seed(sku, 5, seed=2)
    factories.product(sku)
    strict_endpoint.set_faults([{"kind": "ProvisionedThroughputExceededException", "rate": 0.5,
                                 "operations": ["Query"]}], seed=1)
    ids = [f"some-{n}-{uuid.uuid4().hex[:6]}" for n in range(10)]
    statuses = {request_id: page(client, sku, request_id)[0].status_code for request_id in ids}
    summary = strict_endpoint.attempts_summary()["by_request_id"]
    for request_id, status in statuses.items():
        attempts = summary[request_id]
        assert attempts["attempts"] <= settings.PAGINATION_INDEX["AWS"]["MAX_ATTEMPTS"]
        if status == 503:
            assert attempts["attempts"] == settings.PAGINATION_INDEX["AWS"]["MAX_ATTEMPTS"] and None not in attempts["errors"]
        else:
            assert status == 200 and attempts["errors"][-1] is None
    assert any(summary[request_id]["attempts"] > 1 and statuses[request_id] == 200 for request_id in ids), (statuses, summary)


def test_the_queries_of_one_page_request_share_its_retries(client, comments_table, strict_endpoint):
    """A rating filter reads two partitions at once; in a storm they re-send MAX_ATTEMPTS - 1 times
    between them, not each: a page's retries cost DynamoDB no more than one Query's."""
    sku = "AWS-FILTERED"
    factories.seed(sku, 40, seed=3)
    factories.product(sku)
    strict_endpoint.set_faults([{"kind": "ThrottlingException", "rate": 1.0, "operations": ["Query"]}])
    request_id = f"filter-{uuid.uuid4().hex[:8]}"
    response = client.get(f"/products/{sku}/?rating=2&rating=3", headers={"X-Request-ID": request_id})
    assert response.status_code == 503
    # The 503 goes out as soon as one partition read gives up; the other may still be re-sending.
    seen, deadline = None, time.monotonic() + 10
    while time.monotonic() < deadline:
        attempts = strict_endpoint.attempts_summary()["by_request_id"][request_id]
        if attempts == seen:
            break
        seen = attempts
        time.sleep(1.0)  # longer than the page path's backoff cap (0.5 s)
    assert attempts["invocations"] >= 2
    assert attempts["attempts"] - attempts["invocations"] == settings.PAGINATION_INDEX["AWS"]["MAX_ATTEMPTS"] - 1
    retried = [entry["attempt"] for entry in strict_endpoint.requests() if entry["request_id"] == request_id]
    assert None not in retried and max(retried) <= settings.PAGINATION_INDEX["AWS"]["MAX_ATTEMPTS"]


def test_a_validation_exception_is_raised_once_not_retried(comments_table, strict_endpoint):
    strict_endpoint.clear_requests()
    with pytest.raises(dynamodb_reads().client.exceptions.ClientError) as caught:
        dynamodb_reads().query(TableName=comments_table, KeyConditionExpression="nonsense = :x",
                               ExpressionAttributeValues={":x": {"S": "y"}})
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert [entry["operation"] for entry in strict_endpoint.requests()] == ["Query"]


def test_unprocessed_items_are_sent_again_after_a_backoff(comments_table, strict_endpoint):
    # Seed 0: the first batch's draw hits (the endpoint's decisions are deterministic for a seed).
    strict_endpoint.set_faults([{"kind": "UnprocessedItems", "rate": 0.5, "fraction": 0.5,
                                 "operations": ["BatchWriteItem"]}], seed=0)
    comments = make_comments("AWS-BATCH", 50)
    assert put_comments(comments) == 50
    writes = [entry for entry in strict_endpoint.requests() if entry["operation"] == "BatchWriteItem"]
    assert len(writes) >= 3  # two batches of 25, and what was left of them again
    strict_endpoint.set_faults([])
    found = dynamodb_reads().query(TableName=comments_table, IndexName="byProduct",
                                   KeyConditionExpression="PK2 = :g", ExpressionAttributeValues={":g": {"S": "AWS-BATCH"}})
    assert len(found["Items"]) == 50


def test_pages_keep_working_while_temporary_credentials_rotate(client, comments_table, strict_endpoint, monkeypatch):
    """Container credentials that live 2 s and rotate every 0.5 s (AWS: hours; botocore refreshes them
    before they expire either way): no page fails, and they are signed with the rotating keys."""
    sku = "AWS-ROTATING"
    factories.seed(sku, 5, seed=4)
    factories.product(sku)
    url = strict_endpoint.temporary_credentials("web-rotating", lifetime=2.0, rotate_every=0.5)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url)
    with aws_settings():  # the clients are built again, on the new chain
        strict_endpoint.clear_requests()
        statuses = []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            statuses.append(page(client, sku, uuid.uuid4().hex)[0].status_code)
            time.sleep(0.1)
        keys = {entry["key_id"] for entry in strict_endpoint.requests()}
    assert set(statuses) == {200}
    assert len(keys) >= 3 and all(key.startswith("ASIA") for key in keys)


# --- the DynamoDB index backend ---------------------------------------------------------------------
@pytest.fixture
def index(strict_dynamodb_settings):
    made = DynamoDBIndex({"ENDPOINT_URL": strict_dynamodb_settings["ENDPOINT_URL"],
                          "TABLE": f"pidx-{uuid.uuid4().hex[:12]}", "PAGE_SIZE": 3})
    made.create_storage()
    yield made
    made.delete_table()
    made.close()


def transactions(strict_endpoint) -> list[dict]:
    return [entry for entry in strict_endpoint.requests() if entry["operation"] == "TransactWriteItems"]


@pytest.mark.parametrize("reason, error", [("ThrottlingError", IndexUnavailable), ("ValidationError", InvalidIndexWrite)])
def test_a_cancelled_transaction_is_read_by_its_reason(index, strict_endpoint, reason, error):
    """Issue 27.3: a throttle is the store being unavailable, a validation error is refused as such
    (not an outage for sync_index to wait out); neither is retried as a lost race."""
    strict_endpoint.clear_requests()
    strict_endpoint.set_faults([{"kind": "TransactionCanceled", "rate": 1.0, "reason": reason}])
    with pytest.raises(error):
        index.add_many("G", [("a", "2020-01-01T00:00:00.000000Z")])
    assert len(transactions(strict_endpoint)) == 1


def test_a_lost_race_is_retried_with_backoff(index, strict_endpoint):
    strict_endpoint.clear_requests()
    strict_endpoint.set_faults([{"kind": "TransactionCanceled", "rate": 0.5, "reason": "TransactionConflict"}], seed=5)
    for n in range(6):
        index.add_many("G", [(f"m{n}", f"2020-01-01T00:00:0{n}.000000Z")])
    strict_endpoint.set_faults([])
    assert index.count("G") == 6
    assert len(transactions(strict_endpoint)) > 6  # the seed cancels some: they were tried again


def test_counts_are_read_by_batch_get_item_eventually_consistent(index, strict_endpoint):
    """Issue 27.4: no TransactGetItems (2 units an item, cancelled by any write in flight)."""
    index.add_many("G", [("a", "2020-01-01T00:00:00.000000Z")])
    strict_endpoint.clear_requests()
    strict_endpoint.reset_meter()
    assert index.count_many(["G", "H"]) == {"G": 1, "H": 0}
    assert [entry["operation"] for entry in strict_endpoint.requests()] == ["BatchGetItem"]
    assert strict_endpoint.meter()["total"]["read"] <= 1.0  # half a unit a key (TransactGetItems: 2 an item)


def test_the_index_table_is_made_by_create_storage_only(strict_dynamodb_settings, strict_endpoint):
    """Issue 27.7: writing to a missing index table is IndexUnavailable, never a CreateTable."""
    missing = DynamoDBIndex({"ENDPOINT_URL": strict_dynamodb_settings["ENDPOINT_URL"],
                             "TABLE": f"pidx-missing-{uuid.uuid4().hex[:8]}"})
    strict_endpoint.clear_requests()
    with pytest.raises(IndexUnavailable):
        missing.add_many("G", [("a", "2020-01-01T00:00:00.000000Z")])
    assert "CreateTable" not in {entry["operation"] for entry in strict_endpoint.requests()}
    assert missing.count("G") == 0  # reads of a table not made yet: empty
