"""GSI lag (stack/strict_endpoint/gsi_lag.py): a GSI Query sees the index as it stood L seconds ago."""
from __future__ import annotations

import time
import uuid

import pytest

from stack.strict_endpoint import StrictEndpoint
from tests.strict_endpoint.helpers import client, create_table

LAG = 2.0  # well above a request's latency on a loaded machine


@pytest.fixture(scope="module")
def endpoint(dynamodb_local, tmp_path_factory):
    folder = tmp_path_factory.mktemp("strict-gsi-lag")
    config = {"creating_seconds": 0,
              "gsi_view": {"class": "stack.strict_endpoint.gsi_lag.LaggingGsiView", "options": {"lag_seconds": LAG}}}
    with StrictEndpoint(dynamodb_local.endpoint_url, config=config, state_dir=folder,
                        log_path=folder / "endpoint.log") as running:
        yield running


@pytest.fixture(scope="module")
def ddb(endpoint):
    return client(endpoint)


@pytest.fixture(scope="module")
def table(ddb):
    name = f"lag-{uuid.uuid4().hex[:10]}"
    create_table(ddb, name, indexes={"byG": ("G", "SK", "ALL"), "byK": ("K", None, "KEYS_ONLY")})
    yield name
    ddb.delete_table(TableName=name)


def put(ddb, table, pk, sk, g, **extra):
    ddb.put_item(TableName=table, Item={"PK": {"S": pk}, "SK": {"S": sk}, "G": {"S": g},
                                        **{k: {"S": v} for k, v in extra.items()}})


def query(ddb, table, g, **kwargs):
    """Every page of the byG Query, newest first: [(SK, body or None)], pages."""
    params = {"TableName": table, "IndexName": "byG", "KeyConditionExpression": "G = :g",
              "ExpressionAttributeValues": {":g": {"S": g}}, "ScanIndexForward": False, **kwargs}
    found, pages = [], 0
    while True:
        answer = ddb.query(**params)
        pages += 1
        assert answer["Count"] == len(answer["Items"]) <= params.get("Limit", 10**9)
        found += [(item["SK"]["S"], item.get("body", {}).get("S")) for item in answer["Items"]]
        if "LastEvaluatedKey" not in answer:
            return found, pages
        params["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def test_new_items_appear_and_removed_items_linger_for_the_lag(ddb, table):
    put(ddb, table, "p1", "s1", "g1", body="first")
    assert query(ddb, table, "g1")[0] == []
    time.sleep(LAG + 0.1)
    assert query(ddb, table, "g1")[0] == [("s1", "first")]
    put(ddb, table, "p1", "s1", "g1", body="changed")
    ddb.delete_item(TableName=table, Key={"PK": {"S": "p1"}, "SK": {"S": "s1"}})
    put(ddb, table, "p2", "s2", "g2")
    assert query(ddb, table, "g1")[0] == [("s1", "first")]  # as it stood before both changes
    assert ddb.get_item(TableName=table, Key={"PK": {"S": "p1"}, "SK": {"S": "s1"}}).get("Item") is None
    time.sleep(LAG + 0.1)
    assert query(ddb, table, "g1")[0] == []
    assert query(ddb, table, "g2")[0] == [("s2", None)]


def test_pages_under_lag_keep_their_order_limit_and_bounds(ddb, table):
    for n in range(1, 8):
        put(ddb, table, f"q{n}", f"t{n}", "g3")
    time.sleep(LAG + 0.1)
    ddb.delete_item(TableName=table, Key={"PK": {"S": "q4"}, "SK": {"S": "t4"}})
    put(ddb, table, "q9", "t9", "g3")
    put(ddb, table, "q5", "t5", "g4")  # moved to another group
    expected = [f"t{n}" for n in range(7, 0, -1)]
    assert [sk for sk, _ in query(ddb, table, "g3", Limit=2)[0]] == expected
    assert [sk for sk, _ in query(ddb, table, "g3")[0]] == expected
    older = {":g": {"S": "g3"}, ":b": {"S": "t6"}}
    found, _ = query(ddb, table, "g3", KeyConditionExpression="G = :g AND SK < :b", ExpressionAttributeValues=older)
    assert [sk for sk, _ in found] == expected[2:]
    keys_only = ddb.query(TableName=table, IndexName="byG", KeyConditionExpression="G = :g",
                          ExpressionAttributeValues={":g": {"S": "g3"}}, ProjectionExpression="SK")["Items"]
    assert all(set(item) == {"SK"} for item in keys_only)
    time.sleep(LAG + 0.1)
    assert [sk for sk, _ in query(ddb, table, "g3", Limit=3)[0]] == ["t9", "t7", "t6", "t3", "t2", "t1"]


def test_lag_zero_is_dynamodb_locals_own_answer(endpoint, ddb, table):
    endpoint.configure_hook("gsi_view", lag_seconds=0)
    try:
        put(ddb, table, "r1", "u1", "g5")
        assert query(ddb, table, "g5")[0] == [("u1", None)]
    finally:
        endpoint.configure_hook("gsi_view", lag_seconds=LAG)
