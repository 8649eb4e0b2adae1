"""Key size limits (L3): AWS refuses a partition key value over 2,048 bytes and a sort key value over
1,024 with a ValidationException, reads included; DynamoDB Local answers a read of one as "not found"
and stores one. The endpoint answers as AWS does."""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from stack.strict_endpoint.limits import PARTITION_KEY_MESSAGE, SORT_KEY_MESSAGE


def refused(call) -> tuple[str, str]:
    with pytest.raises(ClientError) as raised:
        call()
    return raised.value.response["Error"]["Code"], raised.value.response["Error"]["Message"]


def test_keys_over_the_limits_are_refused_as_aws_refuses_them(strict, ddb, table, uid):
    long_pk, long_sk = uid + "p" * (2049 - len(uid)), "s" * 1025
    at_limit_pk, at_limit_sk = uid + "é" * ((2048 - len(uid)) // 2), "s" * 1024  # bytes, not characters
    assert len(at_limit_pk.encode()) <= 2048 < len((at_limit_pk + "éé").encode())
    hashkey = ("ValidationException", PARTITION_KEY_MESSAGE)
    rangekey = ("ValidationException", SORT_KEY_MESSAGE)
    key = {"PK": {"S": long_pk}, "SK": {"S": "s"}}
    assert refused(lambda: ddb.get_item(TableName=table, Key=key)) == hashkey
    assert refused(lambda: ddb.query(TableName=table, KeyConditionExpression="PK = :p",
                                     ExpressionAttributeValues={":p": {"S": long_pk}})) == hashkey
    assert refused(lambda: ddb.query(TableName=table, IndexName="byG", KeyConditionExpression="G = :g",
                                     ExpressionAttributeValues={":g": {"S": long_pk}})) == hashkey
    assert refused(lambda: ddb.put_item(TableName=table, Item=key)) == hashkey
    assert refused(lambda: ddb.delete_item(TableName=table, Key=key)) == hashkey
    assert refused(lambda: ddb.batch_get_item(RequestItems={table: {"Keys": [key]}})) == hashkey
    assert refused(lambda: ddb.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": key}}]})) == hashkey
    assert refused(lambda: ddb.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": key}}])) == hashkey
    sort = {"PK": {"S": uid}, "SK": {"S": long_sk}}
    assert refused(lambda: ddb.get_item(TableName=table, Key=sort)) == rangekey
    assert refused(lambda: ddb.put_item(TableName=table, Item=sort)) == rangekey
    # At the limits: answered (a key that is not there is simply not found).
    assert "Item" not in ddb.get_item(TableName=table, Key={"PK": {"S": at_limit_pk}, "SK": {"S": at_limit_sk}})
    ddb.put_item(TableName=table, Item={"PK": {"S": at_limit_pk}, "SK": {"S": at_limit_sk}})
    assert ddb.query(TableName=table, KeyConditionExpression="PK = :p",
                     ExpressionAttributeValues={":p": {"S": at_limit_pk}})["Count"] == 1
    assert [entry["error"] for entry in strict.requests() if entry["operation"] == "GetItem"] == [
        "ValidationException", "ValidationException", None]
