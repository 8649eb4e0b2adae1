"""The meter against AWS's documented arithmetic ("DynamoDB item sizes and formats", "DynamoDB read
and write operations", "Capacity management for transactions"), on items of known sizes. The table
has GSIs byG (G, SK; ALL) and byK (K; KEYS_ONLY)."""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from stack.strict_endpoint.metering import item_size, number_size, read_units, write_units
from tests.strict_endpoint.helpers import sized_item, with_request_id


def units(strict) -> dict[str, tuple[float, float]]:
    """(read, write) units by table or index since the last reset, and the meter emptied again."""
    resources = strict.meter()["by_resource"]
    strict.reset_meter()
    return {name.rsplit("/", 1)[-1] if "/index/" in name else "table": (v["read"], v["write"])
            for name, v in resources.items()}


# --- sizes and units, from the documents' own examples ------------------------------------------
def test_item_size_by_aws_rules():
    assert item_size({"PK": {"S": "abc"}}) == 2 + 3
    assert item_size({"name": {"S": "é"}}) == 4 + 2  # UTF-8 bytes
    assert number_size("123.45") == 4  # 5 significant digits: 3 bytes, plus 1
    assert number_size("-0.0012000") == 2  # leading and trailing zeros trimmed: "12"
    assert number_size("1000") == 2
    assert item_size({"b": {"B": "AAECAw=="}}) == 1 + 4  # raw bytes, not base64
    assert item_size({"ok": {"BOOL": True}, "no": {"NULL": True}}) == (2 + 1) + (2 + 1)
    assert item_size({"l": {"L": [{"S": "ab"}, {"N": "1"}]}}) == 1 + 3 + (1 + 2) + (1 + 2)
    assert item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + (1 + 1 + 1)
    assert item_size({"e": {"M": {}}}) == 1 + 3
    assert item_size({"ss": {"SS": ["ab", "c"]}}) == 2 + 3


def test_unit_rounding_of_the_documents_examples():
    assert read_units(3500, consistent=True) == 1  # "reading a 3,500-byte item consumes ... a 4 KB item"
    assert read_units(8 * 1024, consistent=True) == 2  # 8 KB: 2 strongly consistent,
    assert read_units(8 * 1024) == 1  # 1 eventually consistent,
    assert read_units(8 * 1024, transactional=True) == 4  # 4 transactional
    assert write_units(500) == 1 and write_units(3500) == 4  # 1 KB write units
    assert write_units(1500, transactional=True) == 4


# --- through the endpoint ---------------------------------------------------------------------------
def test_get_item_eventual_and_strong_and_missing(strict, ddb, table, uid):
    ddb.put_item(TableName=table, Item=sized_item(uid, 3500))
    strict.reset_meter()
    key = {"PK": {"S": uid}, "SK": {"S": "s"}}
    ddb.get_item(TableName=table, Key=key)
    assert units(strict) == {"table": (0.5, 0)}
    ddb.get_item(TableName=table, Key=key, ConsistentRead=True, ProjectionExpression="PK")  # whole item counts
    assert units(strict) == {"table": (1, 0)}
    ddb.get_item(TableName=table, Key={"PK": {"S": "missing"}, "SK": {"S": "s"}}, ConsistentRead=True)
    assert units(strict) == {"table": (1, 0)}  # a missing item still costs one unit


def test_batch_get_rounds_each_item_on_its_own(strict, ddb, table, uid):
    ddb.put_item(TableName=table, Item=sized_item(f"{uid}-a", 1536))
    ddb.put_item(TableName=table, Item=sized_item(f"{uid}-b", 6656))
    strict.reset_meter()
    ddb.batch_get_item(RequestItems={table: {"ConsistentRead": True, "Keys": [
        {"PK": {"S": f"{uid}-a"}, "SK": {"S": "s"}}, {"PK": {"S": f"{uid}-b"}, "SK": {"S": "s"}}]}})
    assert units(strict) == {"table": (3, 0)}  # 1.5 KB + 6.5 KB = 4 KB + 8 KB: 3 units, not 2


def test_query_sums_the_items_evaluated_and_rounds_once(strict, ddb, table, uid):
    for number in range(11):  # 11 items of 400 bytes: 4,400 bytes evaluated
        ddb.put_item(TableName=table, Item=sized_item(uid, 400, sk=f"s{number:02}", G=f"g-{uid}"))
    strict.reset_meter()
    condition = {"KeyConditionExpression": "PK = :p", "ExpressionAttributeValues": {":p": {"S": uid}}}
    ddb.query(TableName=table, ConsistentRead=True, **condition)
    assert units(strict) == {"table": (2, 0)}
    ddb.query(TableName=table, **condition)
    assert units(strict) == {"table": (1, 0)}
    ddb.query(TableName=table, Limit=10, **condition)  # 4,000 bytes: one unit, halved
    assert units(strict) == {"table": (0.5, 0)}
    ddb.query(TableName=table, ConsistentRead=True, FilterExpression="begins_with(#pad, :none)",
              ProjectionExpression="PK", KeyConditionExpression="PK = :p", ExpressionAttributeNames={"#pad": "pad"},
              ExpressionAttributeValues={":p": {"S": uid}, ":none": {"S": "no item has this"}})
    assert units(strict) == {"table": (2, 0)}  # filters and projections do not reduce what is read
    ddb.query(TableName=table, IndexName="byG", KeyConditionExpression="G = :g",
              ExpressionAttributeValues={":g": {"S": f"g-{uid}"}})
    assert units(strict) == {"byG": (1, 0)}  # a GSI read: eventually consistent
    ddb.query(TableName=table, **{**condition, "ExpressionAttributeValues": {":p": {"S": "nobody"}}})
    assert units(strict) == {"table": (0.5, 0)}  # nothing found: still the minimum


def test_put_costs_the_larger_of_old_and_new_and_each_gsi_its_entry(strict, ddb, table, uid):
    ddb.put_item(TableName=table, Item=sized_item(uid, 3500))
    assert units(strict) == {"table": (0, 4)}  # no G, no K: no GSI entry
    ddb.put_item(TableName=table, Item=sized_item(uid, 500, G="g", K="k"))
    written = units(strict)
    assert written["table"] == (0, 4)  # the 3,500-byte item it replaced
    assert written["byG"] == (0, 1)  # entry added (ALL: 500 bytes)
    assert written["byK"] == (0, 1)  # entry added (keys only)


def test_update_charges_gsis_by_what_changes(strict, ddb, table, uid):
    ddb.put_item(TableName=table, Item=sized_item(uid, 1500, G="g1", K="k"))
    strict.reset_meter()
    key = {"PK": {"S": uid}, "SK": {"S": "s"}}
    ddb.update_item(TableName=table, Key=key, UpdateExpression="SET body = :b", ExpressionAttributeValues={":b": {"S": "x" * 100}})
    assert units(strict) == {"table": (0, 2), "byG": (0, 2)}  # byG (ALL) entry rewritten; byK untouched
    ddb.update_item(TableName=table, Key=key, UpdateExpression="SET G = :g", ExpressionAttributeValues={":g": {"S": "g2"}})
    assert units(strict) == {"table": (0, 2), "byG": (0, 4)}  # key changed: delete + put, 2 units each
    ddb.update_item(TableName=table, Key=key, UpdateExpression="REMOVE K")
    assert units(strict) == {"table": (0, 2), "byG": (0, 2), "byK": (0, 1)}  # byK entry removed


def test_delete_and_failed_conditions(strict, ddb, table, uid):
    ddb.put_item(TableName=table, Item=sized_item(uid, 2500, G="g"))
    strict.reset_meter()
    with pytest.raises(ClientError):
        ddb.put_item(TableName=table, Item=sized_item(uid, 100), ConditionExpression="attribute_not_exists(PK)")
    assert units(strict) == {"table": (0, 3)}  # the failed condition costs the old item's size
    ddb.delete_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}})
    assert units(strict) == {"table": (0, 3), "byG": (0, 3)}
    ddb.delete_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}})
    assert units(strict) == {"table": (0, 1)}  # nothing there: the minimum


def test_batch_write_prices_each_item(strict, ddb, table, uid):
    ddb.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": sized_item(f"{uid}-{n}", 1500)}}
                                               for n in range(3)]})
    assert units(strict) == {"table": (0, 6)}


def test_transactions_cost_double(strict, ddb, table, uid):
    ddb.put_item(TableName=table, Item=sized_item(f"{uid}-c", 500))
    ddb.put_item(TableName=table, Item=sized_item(f"{uid}-r", 3000))
    strict.reset_meter()
    ddb.transact_write_items(TransactItems=[
        {"Put": {"TableName": table, "Item": sized_item(f"{uid}-p", 1500)}},
        {"ConditionCheck": {"TableName": table, "Key": {"PK": {"S": f"{uid}-c"}, "SK": {"S": "s"}},
                            "ConditionExpression": "attribute_exists(PK)"}}])
    assert units(strict) == {"table": (0, 2 * 2 + 2 * 1)}
    ddb.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": {"PK": {"S": f"{uid}-{k}"}, "SK": {"S": "s"}}}}
                                          for k in ("r", "c")])
    assert units(strict) == {"table": (2 + 2, 0)}


def test_the_meter_is_kept_per_operation_key_and_request_id(strict, ddb, table, uid):
    with_request_id(ddb, f"page-{uid}")
    ddb.put_item(TableName=table, Item=sized_item(uid, 100))
    ddb.get_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}})
    meter = strict.meter()
    assert meter["by_request_id"][f"page-{uid}"] == {"read": 0.5, "write": 1, "requests": 2}
    assert meter["by_operation"]["PutItem"]["write"] == 1 and meter["by_operation"]["GetItem"]["read"] == 0.5
    assert meter["by_key_id"][strict.access_key_id] == {"read": 0.5, "write": 1, "requests": 2}
    assert meter["total"]["read"] == 0.5 and meter["total"]["write"] == 1


def test_return_consumed_capacity_reports_the_endpoints_figures(strict, ddb, table, uid):
    answer = ddb.put_item(TableName=table, Item=sized_item(uid, 1500, G="g"), ReturnConsumedCapacity="INDEXES")
    assert answer["ConsumedCapacity"] == {
        "TableName": table, "CapacityUnits": 4.0, "ReadCapacityUnits": 0.0, "WriteCapacityUnits": 4.0,
        "Table": {"CapacityUnits": 2.0, "ReadCapacityUnits": 0.0, "WriteCapacityUnits": 2.0},
        "GlobalSecondaryIndexes": {"byG": {"CapacityUnits": 2.0, "ReadCapacityUnits": 0.0, "WriteCapacityUnits": 2.0}}}
    answer = ddb.batch_get_item(RequestItems={table: {"Keys": [{"PK": {"S": uid}, "SK": {"S": "s"}}]}},
                                ReturnConsumedCapacity="TOTAL")
    assert answer["ConsumedCapacity"] == [{"TableName": table, "CapacityUnits": 0.5, "ReadCapacityUnits": 0.5,
                                           "WriteCapacityUnits": 0.0}]
