"""The comments table: key schema, the byProduct GSI and the stream (DESIGN.md, "Data model")."""
from __future__ import annotations

from botocore.exceptions import ClientError

from pagination_index import aws


def table_definition() -> dict:
    return {
        "TableName": aws.table_name(),
        "KeySchema": [
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
            {"AttributeName": "PK2", "AttributeType": "S"},
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": aws.product_index_name(),
                "KeySchema": [
                    {"AttributeName": "PK2", "KeyType": "HASH"},
                    {"AttributeName": "SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }


def create_tables() -> bool:
    """Create the comments table if it is missing and wait until it is active; True if created."""
    client = aws.dynamodb()
    try:
        client.create_table(**table_definition())
        created = True
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
        created = False
    client.get_waiter("table_exists").wait(TableName=aws.table_name(), WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    return created


def delete_tables() -> None:
    client = aws.dynamodb()
    try:
        client.delete_table(TableName=aws.table_name())
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
