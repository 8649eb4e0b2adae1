"""create_tables turns on deletion protection and point-in-time recovery (through the strict endpoint,
which answers the PITR calls DynamoDB Local lacks); delete_tables turns protection off on purpose."""
from __future__ import annotations

import uuid

import pytest
from botocore.exceptions import ClientError
from django.core.management import call_command
from django.test import override_settings

from comments.table.client import dynamodb
from comments.table.schema import delete_tables
from tests.config import table_settings


@pytest.mark.django_db
def test_create_tables_protects_the_table_and_turns_on_pitr(strict_dynamodb_settings):
    config = dict(strict_dynamodb_settings, TABLE=f"comments-{uuid.uuid4().hex[:12]}")
    with table_settings(config["TABLE"]):
        call_command("create_tables", verbosity=0)
        try:
            client = dynamodb()
            assert client.describe_table(TableName=config["TABLE"])["Table"]["DeletionProtectionEnabled"] is True
            backups = client.describe_continuous_backups(TableName=config["TABLE"])["ContinuousBackupsDescription"]
            assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
            with pytest.raises(ClientError, match="protected against deletion"):
                client.delete_table(TableName=config["TABLE"])
            client.update_table(TableName=config["TABLE"], DeletionProtectionEnabled=False)
            call_command("create_tables", verbosity=0)  # an existing table gets its protection back
            assert client.describe_table(TableName=config["TABLE"])["Table"]["DeletionProtectionEnabled"] is True
        finally:
            delete_tables()
        with pytest.raises(ClientError, match="ResourceNotFoundException|not found"):
            client.describe_table(TableName=config["TABLE"])


@pytest.mark.django_db
def test_create_tables_turns_the_stream_on_for_a_table_without_one(strict_dynamodb_settings):
    """A point-in-time restore makes a table with no stream; create_tables on it turns the stream on
    (the index follows the stream: without one every later write would be missing from it)."""
    from comments.table.schema import table_definition

    config = dict(strict_dynamodb_settings, TABLE=f"comments-{uuid.uuid4().hex[:12]}")
    with table_settings(config["TABLE"]):
        client = dynamodb()
        restored = {key: value for key, value in table_definition().items()
                    if key not in ("StreamSpecification", "DeletionProtectionEnabled")}
        client.create_table(**restored)
        client.get_waiter("table_exists").wait(TableName=config["TABLE"], WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        try:
            assert not client.describe_table(TableName=config["TABLE"])["Table"].get("StreamSpecification")
            call_command("create_tables", verbosity=0)
            table = client.describe_table(TableName=config["TABLE"])["Table"]
            assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
            assert table["LatestStreamArn"]
            call_command("create_tables", verbosity=0)  # once on, left as it is
            assert client.describe_table(TableName=config["TABLE"])["Table"]["LatestStreamArn"] == table["LatestStreamArn"]
        finally:
            delete_tables()
