"""The comments table: key schema, the byProduct and byRating GSIs and the stream
(docs/architecture.md, "Data model")."""
from __future__ import annotations

import logging
import time

from botocore.exceptions import ClientError
from django.core.exceptions import ImproperlyConfigured

from comments.table.client import dynamodb
from pagination_index import aws
from comments.table.keys import GROUP, MEMBER, RATING_GROUP, SORT_KEY, product_index_name, rating_index_name, table_name

# DescribeTable between looks at a GSI being created (AWS refreshes its backfill figures slowly).
GSI_POLL_SECONDS = 2.0
PITR_WAIT_SECONDS = 120
logger = logging.getLogger(__name__)


def _gsi(name: str, partition_key: str) -> dict:
    return {
        "IndexName": name,
        "KeySchema": [
            {"AttributeName": partition_key, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "ALL"},
    }


def attribute_definitions() -> list[dict]:
    return [{"AttributeName": name, "AttributeType": "S"} for name in (MEMBER, SORT_KEY, GROUP, RATING_GROUP)]


def rating_index() -> dict:
    return _gsi(rating_index_name(), RATING_GROUP)


def table_definition() -> dict:
    return {
        "TableName": table_name(),
        "KeySchema": [
            {"AttributeName": MEMBER, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": attribute_definitions(),
        "GlobalSecondaryIndexes": [_gsi(product_index_name(), GROUP), rating_index()],
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        # The comments are the only copy of the data (the index is rebuilt from them): no accidental
        # DeleteTable, and point-in-time recovery (enable_point_in_time_recovery) against bad writes.
        "DeletionProtectionEnabled": True,
    }


def create_tables() -> bool:
    """Create the comments table if it is missing, wait until it is active and turn point-in-time
    recovery on; True if created. A table made before the byRating GSI existed gets it from
    add_rating_index()."""
    client = dynamodb()
    try:
        client.create_table(**table_definition())
        created = True
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
        created = False
    client.get_waiter("table_exists").wait(TableName=table_name(), WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    if not created:
        described = client.describe_table(TableName=table_name())["Table"]
        if not described.get("DeletionProtectionEnabled"):
            client.update_table(TableName=table_name(), DeletionProtectionEnabled=True)  # a table made before it was
        enable_stream(described)
    enable_point_in_time_recovery()
    return created


def enable_stream(table: dict) -> None:
    """Turn the stream on for an existing table that has none: a point-in-time restore makes a table
    without one (DynamoDB API Reference, RestoreTableToPointInTime: "Stream settings" are among what
    "you must manually set up" on the restored table). The index follows the stream, so a
    table without one would leave it stale. A stream of another view type cannot be changed in place
    (UpdateTable: disable it, then enable the new type), which this refuses to do on its own."""
    wanted = table_definition()["StreamSpecification"]
    current = table.get("StreamSpecification") or {}
    if current.get("StreamEnabled"):
        if current.get("StreamViewType") != wanted["StreamViewType"]:
            raise ImproperlyConfigured(
                f"{table_name()} has a {current.get('StreamViewType')} stream; the index needs "
                f"{wanted['StreamViewType']}: turn the stream off and run create_tables again")
        return
    client = dynamodb()
    client.update_table(TableName=table_name(), StreamSpecification=wanted)
    client.get_waiter("table_exists").wait(TableName=table_name(), WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    logger.warning("%s had no stream (a restored table?): stream turned on; point the consumers (sync_index, the "
                   "Lambda mapping) at its new ARN and rebuild the index (rebuild_index)", table_name())


def enable_point_in_time_recovery() -> None:
    """UpdateContinuousBackups, retried while AWS still answers ContinuousBackupsUnavailableException,
    as it does for a while after a table is created. DynamoDB Local has no PITR (it answers
    UnknownOperationException): on a local endpoint that is logged and skipped."""
    client = dynamodb()
    deadline = time.monotonic() + PITR_WAIT_SECONDS
    while True:
        try:
            client.update_continuous_backups(TableName=table_name(),
                                             PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
            return
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            endpoint = aws.endpoint_url("dynamodb")
            if code == "UnknownOperationException" and endpoint:
                logger.warning("%s has no point-in-time recovery (DynamoDB Local); not enabled", endpoint)
                return
            if code != "ContinuousBackupsUnavailableException" or time.monotonic() > deadline:
                raise
        time.sleep(2)


def _index_descriptions() -> dict[str, dict]:
    table = dynamodb().describe_table(TableName=table_name())["Table"]
    return {gsi["IndexName"]: gsi for gsi in table.get("GlobalSecondaryIndexes", [])}


def _index_statuses() -> dict[str, str]:
    return {name: gsi.get("IndexStatus", "ACTIVE") for name, gsi in _index_descriptions().items()}


def add_rating_index(*, on_wait=None) -> bool:
    """UpdateTable to create the byRating GSI if the table lacks it, then wait until it is ACTIVE
    (DynamoDB backfills it from PK2R; old items get PK2R from `manage.py backfill_rating_keys`),
    however long that takes (wait_for_index). True if it had to be created."""
    name = rating_index_name()
    added = False
    if name not in _index_statuses():
        try:
            dynamodb().update_table(
                TableName=table_name(),
                AttributeDefinitions=attribute_definitions(),
                GlobalSecondaryIndexUpdates=[{"Create": rating_index()}],
            )
            added = True
        except ClientError:
            if name not in _index_statuses():
                raise
            # someone else added it meanwhile: wait for theirs
    wait_for_index(name, on_wait=on_wait)
    return added


def wait_for_index(name: str, *, on_wait=None, poll_seconds: float = GSI_POLL_SECONDS) -> None:
    """Wait, without a deadline, until the GSI is ACTIVE: on a large table AWS backfills a new GSI
    for hours. on_wait(status) is called after each DescribeTable with the GSI's description
    (IndexStatus, Backfilling, ItemCount, IndexSizeBytes) so a command can show the progress."""
    while True:
        description = _index_descriptions().get(name, {})
        if description.get("IndexStatus", "ACTIVE") == "ACTIVE" and description:
            return
        if on_wait:
            on_wait(description)
        time.sleep(poll_seconds)


def delete_tables() -> None:
    """Delete the comments table on purpose: its deletion protection is turned off first."""
    client = dynamodb()
    try:
        client.update_table(TableName=table_name(), DeletionProtectionEnabled=False)
        client.delete_table(TableName=table_name())
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
