"""The project's own DynamoDB paths through the strict endpoint: numbered pages (fast and index paths,
comments written with BatchWriteItem), signed only with the credentials configured; and the DynamoDB
index backend, on the same credentials (issue 27, item 1)."""
from __future__ import annotations

import uuid

import pytest
from django.core.management import call_command

from tests import factories
from tests.pages import parse

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("strict_dynamodb_settings")]
SKU = "STRICT-1"


def test_numbered_pages_through_the_strict_endpoint(client, comments_table, strict_endpoint):
    comments = factories.seed(SKU, 250, seed=3)
    product = factories.product(SKU)
    call_command("rebuild_index", group=[SKU], verbosity=0)
    for number, served_by in ((1, "fast"), (12, "index")):
        response = client.get(product.get_absolute_url() + (f"?page={number}" if number > 1 else ""))
        assert response.status_code == 200
        assert response.context_data["page_obj"].served_by == served_by
        page = parse(response.content.decode())
        assert [pk for pk, _ in page["comments"]] == [c.pk for c in comments[(number - 1) * 20:number * 20]]
    attempts = strict_endpoint.requests()
    assert {entry["operation"] for entry in attempts} >= {"CreateTable", "BatchWriteItem", "Query"}
    assert {entry["key_id"] for entry in attempts} == {strict_endpoint.access_key_id}
    refused = {"MissingAuthenticationTokenException", "UnrecognizedClientException", "ExpiredTokenException",
               "InvalidSignatureException", "IncompleteSignatureException", "AccessDeniedException"}
    assert [entry for entry in attempts if entry["error"] in refused or entry["status"] >= 500] == []


def test_a_post_through_the_strict_endpoint_is_stored_and_metered(comments_table, strict_endpoint):
    from django.test import Client

    factories.product("STRICT-2")
    strict_endpoint.reset_meter()
    response = Client(headers={"Origin": "http://testserver"}).post(
        "/products/STRICT-2/comments/", {"author": "Ann", "rating": "4", "body": "Through TLS."})
    assert response.status_code == 303
    meter = strict_endpoint.meter()
    assert meter["total"]["write"] >= 3  # the item, and its entries in byProduct and byRating
    assert set(meter["by_resource"]) >= {comments_table, f"{comments_table}/index/byProduct",
                                         f"{comments_table}/index/byRating"}
    assert set(meter["by_key_id"]) == {strict_endpoint.access_key_id}


def test_the_dynamodb_index_backend_uses_the_configured_credentials(strict_dynamodb_settings, strict_endpoint):
    from pagination_index.backends.dynamodb import DynamoDBIndex

    index = DynamoDBIndex({"ENDPOINT_URL": strict_dynamodb_settings["ENDPOINT_URL"],
                           "TABLE": f"pidx-{uuid.uuid4().hex[:12]}", "PAGE_SIZE": 3})
    index.create_table()
    try:
        index.add_many("G", [(f"m{i}", f"2020-01-01T00:00:0{i}.000000Z") for i in range(5)])
        assert index.count("G") == 5
        assert index.count_many(["G", "H"]) == {"G": 5, "H": 0}
        assert {entry["key_id"] for entry in strict_endpoint.requests()} == {strict_endpoint.access_key_id}
    finally:
        index.delete_table()
        index.close()
