"""sync_index against DynamoDB Local's real stream: the index ends equal to the table."""
import dataclasses

import pytest
from django.core.management import CommandError, call_command

from comments.table.client import dynamodb
from comments.table.keys import table_name
from pagination_index import get_index
from pagination_index.stream import StreamConsumer, apply_records
from tests import factories
from tests.pagination_index.streams import assert_index_equals_table, checkpoints, delete, put, stream_arn
from tests.config import use_table


@pytest.mark.django_db(databases="__all__")
def test_inserts_deletes_sk_changes_and_moves_reach_the_index(comments_table, index_backend):
    a = factories.seed("A", 120, seed=1)
    factories.seed("B", 30, seed=2)
    call_command("sync_index", once=True, verbosity=0)
    assert_index_equals_table("A", "B")

    for comment in a[:10]:
        delete(comment)
    for comment in a[10:15]:  # SK is part of the table key: a new SK is a delete and a put
        delete(comment)
        put(dataclasses.replace(comment, sk="2030-01-01T00:00:00.000001Z"))
    for comment in a[15:20]:  # move to another product (MODIFY of PK2)
        dynamodb().update_item(
            TableName=table_name(), Key={"PK": {"S": comment.pk}, "SK": {"S": comment.sk}},
            UpdateExpression="SET PK2 = :b", ExpressionAttributeValues={":b": {"S": "B"}})
    for comment in a[20:25]:  # MODIFY that changes neither group nor sort key
        dynamodb().update_item(
            TableName=table_name(), Key={"PK": {"S": comment.pk}, "SK": {"S": comment.sk}},
            UpdateExpression="SET body = :x", ExpressionAttributeValues={":x": {"S": "edited"}})
    factories.seed("C", 7, seed=3)
    call_command("sync_index", once=True, verbosity=0)
    assert_index_equals_table("A", "B", "C")
    assert get_index().count("A") == 105 and get_index().count("B") == 35


class Crash(Exception):
    pass


class CrashAfterApply(StreamConsumer):
    """Applies the third batch to the index, then dies before its checkpoint is written."""

    batches = 0

    def _commit_batches(self, batches):
        self.batches += 1
        if self.batches == 3:
            apply_records(self.index, [record for batch in batches for record in batch.records])
            raise Crash
        return super()._commit_batches(batches)


@pytest.mark.django_db(databases="__all__")
def test_crash_between_apply_and_checkpoint_loses_nothing(comments_table, index_backend):
    comments = factories.seed("A", 200, seed=4)
    for comment in comments[:30]:
        delete(comment)
    with pytest.raises(Crash):
        CrashAfterApply(index=get_index(), stream_arn=stream_arn(), batch_size=50).run(once=True)
    checkpoint = checkpoints().get()
    assert checkpoint.sequence_number  # two batches were checkpointed, the third was not
    assert get_index().count("A") == 150  # ...but the third batch was applied
    call_command("sync_index", once=True, verbosity=0)
    assert_index_equals_table("A")
    call_command("sync_index", once=True, verbosity=0)  # running again changes nothing
    assert_index_equals_table("A")


@pytest.mark.django_db
def test_resume_applies_only_new_records(comments_table):
    factories.seed("A", 40, seed=5)
    call_command("sync_index", once=True, verbosity=0)
    first = checkpoints().get().sequence_number
    factories.seed("A", 5, seed=6)
    call_command("sync_index", once=True, verbosity=0)
    assert checkpoints().get().sequence_number > first
    assert_index_equals_table("A")


@pytest.mark.django_db
def test_rebuild_index_matches_the_table(comments_table):
    factories.seed("A", 80, seed=7, ties=[(10, 20)])
    factories.seed("B", 3, seed=8)
    get_index().add_many("STALE", [("x", "2020-01-01T00:00:00.000000Z")])
    call_command("rebuild_index", verbosity=0)
    assert_index_equals_table("A", "B")
    assert get_index().count("STALE") == 0


@pytest.mark.django_db
def test_sync_without_a_table_is_a_clear_error(dynamodb_settings, settings):
    use_table(settings, "no-such-table")
    with pytest.raises(CommandError, match="The table could not be read: DescribeTable: .*non-existent table"):
        call_command("sync_index", once=True, verbosity=0)
