"""Rating groups ("<SKU>/<rating>", the byRating GSI's partitions) kept by sync_index and
rebuild_index, and an older table upgraded: create_tables adds byRating, backfill_rating_keys fills
PK2R (issue 9). All on DynamoDB Local's real table and stream."""
import dataclasses
import io
import uuid

import pytest
from django.core.management import call_command

from comments.store import item_from_comment
from comments.table.client import dynamodb
from comments.table.keys import rating_group, table_name
from comments.table.schema import delete_tables, table_definition
from pagination_index import get_index, sources
from pagination_index.sources import records_ops
from tests.config import source_of, table_settings
from pagination_index.backends.base import Add, Remove, newest_first
from pagination_index.models import RebuildCheckpoint
from tests import factories

SK1, SK2 = "2024-01-01T00:00:00.000001Z", "2024-01-02T00:00:00.000001Z"


def image(pk, sk, sku, rating, with_rating_key=True):
    item = {"PK": {"S": pk}, "SK": {"S": sk}, "PK2": {"S": sku}, "rating": {"N": str(rating)}}
    if with_rating_key:
        item["PK2R"] = {"S": rating_group(sku, rating)}
    return item


def record(old=None, new=None):
    return {"dynamodb": {**({"OldImage": old} if old else {}), **({"NewImage": new} if new else {})}}


def record_ops(record):
    """The ops of one record for both sources of the comments table (products, then ratings)."""
    return records_ops(sources.for_table(table_name()), [record])


def test_record_ops_for_both_groups():
    assert record_ops(record(new=image("c", SK1, "S", 4))) == [Add("S", "c", SK1), Add("S/4", "c", SK1)]
    # A REMOVE only removes an entry that still has the removed item's sort key (per-item order only).
    assert record_ops(record(old=image("c", SK1, "S", 4))) == [Remove("S", "c", SK1), Remove("S/4", "c", SK1)]
    # A new rating moves the comment between rating groups and leaves the product group alone.
    assert record_ops(record(old=image("c", SK1, "S", 4), new=image("c", SK1, "S", 2))) == [
        Remove("S/4", "c", SK1), Add("S/2", "c", SK1)]
    # A new SK moves it inside both groups (an upsert); an edit of the body changes nothing.
    assert record_ops(record(old=image("c", SK1, "S", 4), new=image("c", SK2, "S", 4))) == [
        Add("S", "c", SK2), Add("S/4", "c", SK2)]
    assert record_ops(record(old=image("c", SK1, "S", 4), new=image("c", SK1, "S", 4))) == []
    # The backfill of an old item: only its rating group is new.
    assert record_ops(record(old=image("c", SK1, "S", 4, with_rating_key=False), new=image("c", SK1, "S", 4))) == [
        Add("S/4", "c", SK1)]


def assert_rating_groups_equal_table(sku):
    index = get_index()
    for rating in range(1, 6):
        group = rating_group(sku, rating)
        expected = newest_first(source_of(group).group_entries(group))
        assert index.count(group) == len(expected), group
        assert index.range(group, 0, len(expected) + 5) == expected, group


def set_rating(comment, rating):
    dynamodb().update_item(
        TableName=table_name(), Key={"PK": {"S": comment.pk}, "SK": {"S": comment.sk}},
        UpdateExpression="SET rating = :r, PK2R = :g",
        ExpressionAttributeValues={":r": {"N": str(rating)}, ":g": {"S": rating_group(comment.sku, rating)}})


@pytest.mark.django_db
def test_sync_keeps_rating_groups_through_inserts_rating_changes_and_deletes(comments_table):
    comments = factories.seed("R", 80, seed=4, ties=[(10, 20)])
    call_command("sync_index", once=True, verbosity=0)
    assert_rating_groups_equal_table("R")
    assert get_index().count("R/3") == sum(1 for c in comments if c.rating == 3) > 0

    for comment in comments[:6]:
        set_rating(comment, 1 + comment.rating % 5)
    for comment in comments[6:9]:
        dynamodb().delete_item(TableName=table_name(), Key={"PK": {"S": comment.pk}, "SK": {"S": comment.sk}})
    call_command("sync_index", once=True, verbosity=0)
    assert_rating_groups_equal_table("R")
    assert get_index().count("R") == 77
    moved = comments[0]
    members = [m for m, _ in get_index().range(rating_group("R", 1 + moved.rating % 5), 0, 100)]
    assert moved.pk in members
    assert moved.pk not in [m for m, _ in get_index().range(rating_group("R", moved.rating), 0, 100)]


@pytest.mark.django_db
def test_rebuild_fills_and_empties_rating_groups(comments_table):
    comments = factories.seed("RB", 50, seed=6)
    index = get_index()
    index.add_many("RB/2", [("stale", SK1)])  # not in the table: a rebuild must drop it
    call_command("rebuild_index", group=["RB"], verbosity=0)
    assert_rating_groups_equal_table("RB")
    index.clear()
    call_command("rebuild_index", verbosity=0)
    assert_rating_groups_equal_table("RB")
    assert index.count("RB") == len(comments)


def old_table_definition():
    """The table as it was before issue 9: no byRating GSI, no PK2R attribute."""
    definition = table_definition()
    definition["GlobalSecondaryIndexes"] = definition["GlobalSecondaryIndexes"][:1]
    definition["AttributeDefinitions"] = [a for a in definition["AttributeDefinitions"] if a["AttributeName"] != "PK2R"]
    return definition


@pytest.fixture
def old_table(dynamodb_settings):
    table = f"comments-old-{uuid.uuid4().hex[:12]}"
    with table_settings(table):
        client = dynamodb()
        client.create_table(**old_table_definition())
        client.get_waiter("table_exists").wait(TableName=table_name(), WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        try:
            yield table
        finally:
            delete_tables()


@pytest.mark.django_db
def test_an_older_table_gets_the_gsi_and_its_items_their_rating_keys(old_table):
    comments = factories.make_comments("OLD", 70, seed=8)
    for comment in comments:
        item = item_from_comment(comment)
        del item["PK2R"]
        dynamodb().put_item(TableName=table_name(), Item=item)
    call_command("sync_index", once=True, verbosity=0)
    assert get_index().count("OLD") == 70 and get_index().count("OLD/5") == 0

    out = io.StringIO()
    call_command("create_tables", stdout=out)
    assert "GSI 'byRating' added" in out.getvalue()
    table = dynamodb().describe_table(TableName=table_name())["Table"]
    assert {g["IndexName"]: g["IndexStatus"] for g in table["GlobalSecondaryIndexes"]} == {
        "byProduct": "ACTIVE", "byRating": "ACTIVE"}
    out = io.StringIO()
    call_command("create_tables", stdout=out)  # idempotent
    assert "already exists" in out.getvalue() and "added" not in out.getvalue()

    out = io.StringIO()
    call_command("backfill_rating_keys", dry_run=True, stdout=out)
    assert "70 comments lack PK2R" in out.getvalue()
    # A comment re-rated meanwhile by the app (which writes PK2R itself) must keep its new key.
    set_rating(comments[0], 1 + comments[0].rating % 5)
    out = io.StringIO()
    call_command("backfill_rating_keys", stdout=out)
    assert "69 of 69 comments without PK2R updated" in out.getvalue()
    out = io.StringIO()
    call_command("backfill_rating_keys", stdout=out)
    assert "0 of 0" in out.getvalue()

    call_command("sync_index", once=True, verbosity=0)
    assert_rating_groups_equal_table("OLD")
    expected = [dataclasses.replace(comments[0], rating=1 + comments[0].rating % 5)] + comments[1:]
    for rating in range(1, 6):
        assert get_index().count(rating_group("OLD", rating)) == sum(1 for c in expected if c.rating == rating)


@pytest.mark.django_db
def test_a_stopped_backfill_resumes_per_segment(old_table):
    for comment in factories.make_comments("OLDR", 40, seed=9):
        item = item_from_comment(comment)
        del item["PK2R"]
        dynamodb().put_item(TableName=table_name(), Item=item)
    call_command("create_tables", stdout=io.StringIO())
    # As a run stopped after finishing segment 0 of 2 leaves it (segment 1 not begun).
    RebuildCheckpoint.objects.create(run="backfill_rating_keys:2", unit="0", position="")
    out = io.StringIO()
    call_command("backfill_rating_keys", segments=2, resume=True, stdout=out)
    resumed = int(out.getvalue().split()[0])
    assert 0 < resumed < 40  # segment 1's share only
    assert not RebuildCheckpoint.objects.exists()  # a finished run leaves no checkpoint
    out = io.StringIO()
    call_command("backfill_rating_keys", segments=2, stdout=out)
    assert f"{40 - resumed} of {40 - resumed} comments without PK2R updated" in out.getvalue()
