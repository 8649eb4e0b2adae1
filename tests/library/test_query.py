"""pagination_index.query() against Django's Paginator over a full Query, in the test process, on
DynamoDB Local: a GSI with a number sort key (runs of equal keys) and a single-table partition filtered
by begins_with, newest and oldest first, on the relational backend (SQLite and PostgreSQL) and the
DynamoDB backend; every Paginator behaviour Django documents; after rebuild_index and after changes
applied by sync_index --once. (tests/library/test_quickstart.py runs the same in a fresh venv.)"""
from __future__ import annotations

import random
import uuid
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator

from comments.table.client import dynamodb
from pagination_index import query
from pagination_index.sources import TableSource
from tests.config import index_config
from tests.library.tables import definitions

@pytest.fixture
def tables(dynamodb_settings):
    """Two tables of other shapes than the shop's, named for this test."""
    suffix = uuid.uuid4().hex[:8]
    events, app = f"lib_events-{suffix}", f"lib_app-{suffix}"
    client = dynamodb()
    for request in definitions(events, app):
        client.create_table(**request)
    for table in (events, app):
        client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    yield events, app
    for table in (events, app):
        client.delete_table(TableName=table)


BACKENDS = {"relational-sqlite": {}, "relational-postgres": "postgres", "dynamodb": "dynamodb"}


@pytest.fixture(params=list(BACKENDS))
def library(request, tables, settings):
    """The two tables declared as sources (nothing else: the shop's own sources are not declared), on
    one backend."""
    events, app = tables
    backend, options = "pagination_index.backends.relational.RelationalIndex", {}
    if request.param == "relational-postgres":
        options = {"DATABASE": request.getfixturevalue("postgres_database")}
    elif request.param == "dynamodb":
        backend = "pagination_index.backends.dynamodb.DynamoDBIndex"
        options = request.getfixturevalue("dynamodb_index_options")
    settings.PAGINATION_INDEX = index_config(BACKEND=backend, OPTIONS=options, SOURCES={
        "events": {"TABLE": events, "INDEX": "byOwner", "GROUP_KEY": "owner", "SORT_KEY": "ts"},
        "posts": {"TABLE": app, "GROUP_KEY": "PK", "SORT_KEY": "SK", "SORT_KEY_BEGINS_WITH": "POST#"},
    })
    return events, app


def put_event(table, event_id, owner, ts):
    dynamodb().put_item(TableName=table, Item={"id": {"S": event_id}, "owner": {"S": owner}, "ts": {"N": str(ts)},
                                               "title": {"S": f"event {event_id}"}})


def put_app(table, pk, sk):
    dynamodb().put_item(TableName=table, Item={"PK": {"S": pk}, "SK": {"S": sk}, "title": {"S": sk}})


def seed(events, app, rng):
    for n in range(143):  # few distinct timestamps: runs of ties across page boundaries
        put_event(events, f"e{n:04d}", "alice", 1_700_000_000_000 + rng.randrange(40) * 1000)
    for n in range(6):
        put_event(events, f"b{n:04d}", "bob", -n)  # negative numbers sort below zero
    put_app(app, "USER#alice", "PROFILE")
    for n in range(61):
        put_app(app, "USER#alice", f"POST#2024-{1 + n % 12:02d}-{1 + n % 28:02d}#{n:03d}")
    for n in range(23):
        put_app(app, "USER#alice", f"LIKE#{n:03d}")


def truth(events, app, source, group):
    """A full Query of the group, in the documented order (sort key, then member), newest first."""
    if source == "events":
        kwargs = {"TableName": events, "IndexName": "byOwner", "KeyConditionExpression": "#o = :g",
                  "ExpressionAttributeNames": {"#o": "owner"}, "ExpressionAttributeValues": {":g": {"S": group}}}
        key, name = (lambda item: (Decimal(item["ts"]["N"]), item["id"]["S"])), "id"
    else:
        kwargs = {"TableName": app, "KeyConditionExpression": "PK = :g AND begins_with(SK, :p)",
                  "ExpressionAttributeValues": {":g": {"S": group}, ":p": {"S": "POST#"}}}
        key, name = (lambda item: item["SK"]["S"]), "SK"
    items = [item for page in dynamodb().get_paginator("query").paginate(**kwargs) for item in page["Items"]]
    return [item[name]["S"] for item in sorted(items, key=key, reverse=True)]


def ids(source, items):
    return [item["id" if source == "events" else "SK"] for item in items]


def assert_pages_equal(events, app, groups):
    for source, group in groups:
        expected_newest = truth(events, app, source, group)
        for newest_first in (True, False):
            expected = expected_newest if newest_first else expected_newest[::-1]
            for per_page, orphans in ((20, 0), (9, 4)):
                ours = Paginator(query(source, group, newest_first=newest_first), per_page, orphans=orphans)
                reference = Paginator(expected, per_page, orphans=orphans)
                assert (ours.count, ours.num_pages, list(ours.page_range)) == (
                    reference.count, reference.num_pages, list(reference.page_range)), (source, group)
                for number in reference.page_range:
                    page, want = ours.page(number), reference.page(number)
                    assert ids(source, page.object_list) == want.object_list, (source, group, newest_first, number)
                    assert (page.start_index(), page.end_index(), page.has_next(), page.has_previous()) == (
                        want.start_index(), want.end_index(), want.has_next(), want.has_previous())
                    assert (page.next_page_number() if page.has_next() else None) == (
                        want.next_page_number() if want.has_next() else None)
                middle = reference.num_pages // 2 + 1
                assert list(ours.get_elided_page_range(middle, on_each_side=1, on_ends=1)) == list(
                    reference.get_elided_page_range(middle, on_each_side=1, on_ends=1))
                assert ids(source, ours.get_page("x").object_list) == reference.get_page("x").object_list
                assert ids(source, ours.get_page(10**6).object_list) == reference.get_page(10**6).object_list
                for bad, error in ((0, EmptyPage), (-1, EmptyPage), (reference.num_pages + 1, EmptyPage),
                                   ("2.5", PageNotAnInteger), (None, PageNotAnInteger)):
                    with pytest.raises(error):
                        ours.page(bad)


@pytest.mark.django_db(transaction=True, databases="__all__")  # sync_index runs a consumer thread per table
def test_paginator_pages_equal_a_full_query_after_rebuild_and_after_sync(library):
    events, app = library
    rng = random.Random(8)
    seed(events, app, rng)
    call_command("rebuild_index", verbosity=0)
    groups = [("events", "alice"), ("events", "bob"), ("posts", "USER#alice")]
    assert_pages_equal(events, app, groups)

    for n in range(25):  # puts, deletes, moves between groups, changed sort keys
        put_event(events, f"n{n:04d}", "alice", 1_700_000_000_000 + rng.randrange(60) * 1000)
    for n in range(0, 40, 4):
        dynamodb().delete_item(TableName=events, Key={"id": {"S": f"e{n:04d}"}})
    for n in range(40, 48):
        dynamodb().update_item(TableName=events, Key={"id": {"S": f"e{n:04d}"}}, UpdateExpression="SET #o = :o",
                               ExpressionAttributeNames={"#o": "owner"}, ExpressionAttributeValues={":o": {"S": "bob"}})
    for n in range(48, 55):
        dynamodb().update_item(TableName=events, Key={"id": {"S": f"e{n:04d}"}}, UpdateExpression="SET ts = :t",
                               ExpressionAttributeValues={":t": {"N": str(1_500_000_000_000 + n)}})
    for n in range(0, 61, 6):
        dynamodb().delete_item(TableName=app, Key={"PK": {"S": "USER#alice"},
                                                   "SK": {"S": f"POST#2024-{1 + n % 12:02d}-{1 + n % 28:02d}#{n:03d}"}})
    put_app(app, "USER#alice", "POST#2030-01-01#new")
    put_app(app, "USER#alice", "LIKE#new")
    put_app(app, "USER#carol", "POST#2024-05-05#000")
    call_command("sync_index", once=True, verbosity=0)
    assert_pages_equal(events, app, groups + [("posts", "USER#carol"), ("events", "nobody")])
    call_command("verify_index", verbosity=0, recheck_seconds=0)


@pytest.mark.django_db(databases="__all__")
def test_an_empty_group_and_allow_empty_first_page(library):
    assert Paginator(query("events", "nobody"), 10).page(1).object_list == []
    with pytest.raises(EmptyPage):
        Paginator(query("events", "nobody"), 10, allow_empty_first_page=False).page(1)


@pytest.mark.django_db(databases="__all__")
def test_indexing_negative_and_out_of_range(library):
    events, app = library
    for n in range(5):
        put_event(events, f"x{n}", "dora", n)
    call_command("rebuild_index", verbosity=0, source=["events"], group=["dora"])
    items = query("events", "dora")
    assert [item["id"] for item in items] == ["x4", "x3", "x2", "x1", "x0"]  # iteration reads them all
    assert items[0]["ts"] == Decimal(4) and items[-1]["id"] == "x0" and items[-2]["id"] == "x1"
    assert [item["id"] for item in items[-2:]] == ["x1", "x0"]
    with pytest.raises(IndexError):
        items[5]
    with pytest.raises(ValueError):
        items[0:4:2]


def test_the_sources_read_the_key_schema_from_describe_table(library):
    events, _ = library
    source = TableSource("probe", {"TABLE": events, "INDEX": "byOwner", "GROUP_KEY": "owner", "SORT_KEY": "ts"})
    assert (source.group_type, source.sort_type, source.member_keys) == ("S", "N", ["id"])
