"""DynamoDB's key size limits, which DynamoDB Local does not enforce.

A partition key value is at most 2,048 bytes and a sort key value at most 1,024 (AWS's developer
guide, "Constraints in Amazon DynamoDB", Partition keys and sort keys). AWS refuses a request naming a
longer one with a ValidationException before reading or writing anything, for reads (GetItem,
BatchGetItem, the partition of a Query) as for writes; DynamoDB Local answers a 5,000-byte key as
"not found" instead, which hid a 503 the site would have given on AWS. The messages are AWS's, as
its SDKs report them (the missing space in "of2048" is AWS's).
"""
from __future__ import annotations

from stack.strict_endpoint.errors import AwsError
from stack.strict_endpoint.metering import query_partition, value_size
from stack.strict_endpoint.tables import Tables

PARTITION_KEY_BYTES = 2048
SORT_KEY_BYTES = 1024
PARTITION_KEY_MESSAGE = ("One or more parameter values were invalid: Size of hashkey has exceeded the maximum "
                         "size limit of2048 bytes")
SORT_KEY_MESSAGE = ("One or more parameter values were invalid: Aggregated size of all range keys has exceeded "
                    "the size limit of 1024 bytes")


def check_key(names: tuple[str, ...], key: dict | None) -> None:
    """`key`'s values against the limits, `names` being the hash key then the range key (if any)."""
    if not key:
        return
    if names and names[0] in key and value_size(key[names[0]]) > PARTITION_KEY_BYTES:
        raise AwsError("ValidationException", PARTITION_KEY_MESSAGE)
    if len(names) > 1 and names[1] in key and value_size(key[names[1]]) > SORT_KEY_BYTES:
        raise AwsError("ValidationException", SORT_KEY_MESSAGE)


async def check_key_sizes(tables: Tables, operation: str, params: dict) -> None:
    """The ValidationException AWS answers when a key the request names is over the limits."""
    async def table_key(table: str, key: dict | None) -> None:
        schema = await tables.schema(table)
        if schema is not None:
            check_key(schema.keys, key)

    if operation in ("GetItem", "DeleteItem", "UpdateItem"):
        await table_key(params.get("TableName", ""), params.get("Key"))
    elif operation == "PutItem":
        await table_key(params.get("TableName", ""), params.get("Item"))
    elif operation == "Query":
        schema = await tables.schema(params.get("TableName", ""))
        if schema is not None:
            index = schema.indexes.get(params.get("IndexName"))
            names = index.keys if index else schema.keys
            check_key(names[:1], query_partition(params, names[0]))
    elif operation == "BatchGetItem":
        for table, request in params.get("RequestItems", {}).items():
            for key in request.get("Keys", []):
                await table_key(table, key)
    elif operation == "BatchWriteItem":
        for table, requests in params.get("RequestItems", {}).items():
            for request in requests:
                await table_key(table, request.get("PutRequest", {}).get("Item")
                                or request.get("DeleteRequest", {}).get("Key"))
    elif operation in ("TransactGetItems", "TransactWriteItems"):
        for entry in params.get("TransactItems", []):
            for body in entry.values():
                await table_key(body.get("TableName", ""), body.get("Key") or body.get("Item"))
