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
def test_create_tables_turns_on_the_stream_of_a_restored_table(strict_dynamodb_settings):
    """A point-in-time restore makes a table with no stream (RestoreTableToPointInTime reference):
    create_tables on it (docs/runbooks/restore.md) turns one on, NEW_AND_OLD_IMAGES, or the index
    could never follow the restored table."""
    from comments.table.schema import table_definition

    config = dict(strict_dynamodb_settings, TABLE=f"comments-{uuid.uuid4().hex[:12]}")
    with table_settings(config["TABLE"]):
        restored = {key: value for key, value in table_definition().items() if key != "StreamSpecification"}
        client = dynamodb()
        client.create_table(**restored)  # what a restore leaves: the keys and GSIs, no stream
        try:
            assert "LatestStreamArn" not in client.describe_table(TableName=config["TABLE"])["Table"]
            call_command("create_tables", verbosity=0)
            table = client.describe_table(TableName=config["TABLE"])["Table"]
            assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
            assert table["LatestStreamArn"]
            call_command("create_tables", verbosity=0)  # and leaves an existing stream alone
            assert client.describe_table(TableName=config["TABLE"])["Table"]["LatestStreamArn"] == table["LatestStreamArn"]
        finally:
            delete_tables()
