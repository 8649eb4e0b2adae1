"""The two tables of other shapes than the shop's that the library's tests page (no imports: the quick
start's scenario.py loads it beside itself inside a fresh venv, test_query.py from the test suite)."""

STREAM = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}


def definitions(events: str, app: str) -> list[dict]:
    """CreateTable requests: `events`, a GSI (byOwner) with a number sort key; `app`, a single table
    whose partitions mix item types (sort keys such as POST#...)."""
    return [
        dict(TableName=events, BillingMode="PAY_PER_REQUEST", StreamSpecification=STREAM,
             AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"},
                                   {"AttributeName": "owner", "AttributeType": "S"},
                                   {"AttributeName": "ts", "AttributeType": "N"}],
             KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
             GlobalSecondaryIndexes=[{"IndexName": "byOwner", "Projection": {"ProjectionType": "ALL"},
                                      "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"},
                                                    {"AttributeName": "ts", "KeyType": "RANGE"}]}]),
        dict(TableName=app, BillingMode="PAY_PER_REQUEST", StreamSpecification=STREAM,
             AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                   {"AttributeName": "SK", "AttributeType": "S"}],
             KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}]),
    ]
