"""Per-partition throttling, and tables and GSIs that stay CREATING for a while, as on AWS."""
from __future__ import annotations

import time
import uuid

import pytest
from botocore.exceptions import ClientError

from tests.strict_endpoint.helpers import create_table, error_code, sized_item


def _hammer(call, times: int) -> list[str]:
    outcomes = []
    for _ in range(times):
        try:
            call()
            outcomes.append("ok")
        except ClientError as exc:
            outcomes.append(exc.response["Error"]["Code"])
            reasons = exc.response.get("ThrottlingReasons", [])
            outcomes[-1] += ":" + ",".join(r["reason"] for r in reasons)
    return outcomes


def test_a_hot_partition_key_is_throttled_and_others_are_not(strict, ddb, table, uid):
    strict.configure(throttle={"write_units": 4, "burst_seconds": 1})
    hot = _hammer(lambda: ddb.put_item(TableName=table, Item=sized_item(uid, 100)), 12)
    assert hot[:3] == ["ok"] * 3
    assert "ProvisionedThroughputExceededException:TableWriteKeyRangeThroughputExceeded" in hot
    assert _hammer(lambda: ddb.put_item(TableName=table, Item=sized_item(f"{uid}-cold", 100)), 1) == ["ok"]
    time.sleep(1.1)  # the bucket refills at 4 units a second
    assert _hammer(lambda: ddb.put_item(TableName=table, Item=sized_item(uid, 100)), 1) == ["ok"]


def test_a_hot_gsi_partition_throttles_the_writes_that_feed_it(strict, ddb, table, uid):
    strict.configure(throttle={"write_units": 3, "burst_seconds": 1})
    counter = iter(range(100))
    outcomes = _hammer(lambda: ddb.put_item(TableName=table, Item=sized_item(f"{uid}-{next(counter)}", 100, G=f"hot-{uid}")), 10)
    assert "ProvisionedThroughputExceededException:IndexWriteKeyRangeThroughputExceeded" in outcomes


def test_reads_are_throttled_past_the_read_limit(strict, ddb, table, uid):
    ddb.put_item(TableName=table, Item=sized_item(uid, 100))
    strict.configure(throttle={"read_units": 2, "burst_seconds": 1})
    outcomes = _hammer(lambda: ddb.get_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}},
                                            ConsistentRead=True), 8)
    assert outcomes[0] == "ok"
    assert "ProvisionedThroughputExceededException:TableReadKeyRangeThroughputExceeded" in outcomes
    strict.configure(throttle={"enabled": False})
    assert set(_hammer(lambda: ddb.get_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}}), 8)) == {"ok"}


def test_a_new_table_stays_creating_and_refuses_data_calls_meanwhile(strict, ddb):
    strict.configure(creating_seconds=1.5)
    name = f"strict-{uuid.uuid4().hex[:10]}"
    answer = create_table(ddb, name, wait=False)
    try:
        assert answer["TableDescription"]["TableStatus"] == "CREATING"
        assert ddb.describe_table(TableName=name)["Table"]["TableStatus"] == "CREATING"
        with pytest.raises(ClientError) as excinfo:
            ddb.put_item(TableName=name, Item=sized_item("a", 50))
        assert error_code(excinfo) == "ResourceNotFoundException"
        with pytest.raises(ClientError) as excinfo:
            ddb.delete_table(TableName=name)
        assert error_code(excinfo) == "ResourceInUseException"
        ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.5, "MaxAttempts": 20})
        ddb.put_item(TableName=name, Item=sized_item("a", 50))
    finally:
        ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.5, "MaxAttempts": 20})
        ddb.delete_table(TableName=name)


def test_a_gsi_added_by_update_table_is_backfilling_for_a_while(strict, ddb):
    name = f"strict-{uuid.uuid4().hex[:10]}"
    create_table(ddb, name)
    strict.configure(creating_seconds=1.5)
    try:
        ddb.update_table(TableName=name, AttributeDefinitions=[{"AttributeName": "R", "AttributeType": "S"}],
                         GlobalSecondaryIndexUpdates=[{"Create": {
                             "IndexName": "byR", "KeySchema": [{"AttributeName": "R", "KeyType": "HASH"}],
                             "Projection": {"ProjectionType": "ALL"}}}])
        description = ddb.describe_table(TableName=name)["Table"]
        assert description["TableStatus"] == "UPDATING"
        [index] = description["GlobalSecondaryIndexes"]
        assert (index["IndexStatus"], index["Backfilling"]) == ("CREATING", True)
        query = {"TableName": name, "IndexName": "byR", "KeyConditionExpression": "R = :r",
                 "ExpressionAttributeValues": {":r": {"S": "x"}}}
        with pytest.raises(ClientError) as excinfo:
            ddb.query(**query)
        assert error_code(excinfo) == "ValidationException"
        assert "backfilling global secondary index" in excinfo.value.response["Error"]["Message"]
        time.sleep(1.6)
        assert ddb.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"][0]["IndexStatus"] == "ACTIVE"
        assert ddb.query(**query)["Count"] == 0
    finally:
        ddb.delete_table(TableName=name)
