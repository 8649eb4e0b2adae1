"""The quick start's acceptance scenario, run inside the venv of tests/library/test_quickstart.py with
the startproject's settings (DJANGO_SETTINGS_MODULE) and DynamoDB Local (AWS_ENDPOINT_URL): two tables
of other shapes, pages of Django's Paginator and DRF's PageNumberPagination against full Queries,
newest and oldest first, after rebuild_index and again after changes applied by sync_index --once;
the extras as installed from the wheel (IndexPagination, the `{% pager %}` tag and its template);
verify_index clean. Prints one JSON line of what it checked; any mismatch is an AssertionError."""
from __future__ import annotations

import json
import os
import random
import sys
from decimal import Decimal

import django

django.setup()

import boto3  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator  # noqa: E402
from django.template import engines  # noqa: E402
from django.test import RequestFactory  # noqa: E402
from rest_framework.exceptions import NotFound  # noqa: E402
from rest_framework.pagination import PageNumberPagination  # noqa: E402
from rest_framework.request import Request  # noqa: E402

from pagination_index import query  # noqa: E402
from pagination_index.contrib.drf import IndexPagination  # noqa: E402
from pagination_index.paginator import IndexPaginator  # noqa: E402
from tables import definitions  # noqa: E402  (beside this script: sys.path[0])

blocks = json.loads(os.environ["QUICKSTART_BLOCKS"])
client = boto3.client("dynamodb")
rng = random.Random(41)
checked = {"pages": 0, "drf_pages": 0}


def create_tables():
    for request in definitions("lib_events", "lib_app"):
        client.create_table(**request)
    for table in ("lib_events", "lib_app"):
        client.get_waiter("table_exists").wait(TableName=table)


def put_event(event_id, owner, ts, title):
    client.put_item(TableName="lib_events", Item={"id": {"S": event_id}, "owner": {"S": owner},
                                                   "ts": {"N": str(ts)}, "title": {"S": title}})


def put_app(pk, sk, **attributes):
    item = {"PK": {"S": pk}, "SK": {"S": sk}, **{name: {"S": value} for name, value in attributes.items()}}
    client.put_item(TableName="lib_app", Item=item)


def seed():
    for n in range(187):  # alice: timestamps from a few values, so runs of ties cross page boundaries
        put_event(f"e{n:04d}", "alice", 1_700_000_000_000 + rng.randrange(60) * 1000, f"alice {n}")
    for n in range(9):
        put_event(f"b{n:04d}", "bob", 1_700_000_000_000 - n * 10, f"bob {n}")
    put_app("USER#alice", "PROFILE", name="Alice")
    for n in range(57):
        put_app("USER#alice", f"POST#2024-{1 + n % 12:02d}-{1 + n % 28:02d}#{n:03d}", title=f"post {n}")
    for n in range(31):  # items of another type in the same partitions: never in the posts' pages
        put_app("USER#alice", f"LIKE#{n:03d}", title=f"like {n}")
    put_app("USER#bob", "POST#2024-01-01#000", title="bob's first")
    put_app("USER#bob", "QUOTE#1", title="not a post")


def full_query(source, group):
    """The group's items as one full Query gives them, in the documented order: by sort key, ties by
    member (the table key), newest first."""
    if source == "events":
        kwargs = {"TableName": "lib_events", "IndexName": "byOwner", "KeyConditionExpression": "#g = :g",
                  "ExpressionAttributeNames": {"#g": "owner"}, "ExpressionAttributeValues": {":g": {"S": group}}}
        key = lambda item: (Decimal(item["ts"]["N"]), item["id"]["S"])  # noqa: E731
    else:
        kwargs = {"TableName": "lib_app", "KeyConditionExpression": "PK = :g AND begins_with(SK, :p)",
                  "ExpressionAttributeValues": {":g": {"S": group}, ":p": {"S": "POST#"}}}
        key = lambda item: item["SK"]["S"]  # noqa: E731
    items = [item for page in client.get_paginator("query").paginate(**kwargs) for item in page["Items"]]
    return [identity(source, item) for item in sorted(items, key=key, reverse=True)]


def identity(source, item):
    """What tells items apart in a comparison, from the wire form or boto3's Python values."""
    if source == "events":
        value = item["id"]
    else:
        value = item["SK"]
    return value["S"] if isinstance(value, dict) else value


def check_pages(source, group):
    truth = full_query(source, group)
    for newest_first in (True, False):
        expected = truth if newest_first else truth[::-1]
        for per_page, orphans in ((25, 0), (7, 3), (100, 0)):
            paginator = Paginator(query(source, group, newest_first=newest_first), per_page, orphans=orphans)
            reference = Paginator(expected, per_page, orphans=orphans)
            assert paginator.count == len(expected), (source, group, paginator.count, len(expected))
            assert paginator.num_pages == reference.num_pages and list(paginator.page_range) == list(reference.page_range)
            for number in reference.page_range:
                page, want = paginator.page(number), reference.page(number)
                got = [identity(source, item) for item in page]
                assert got == list(want.object_list), (source, group, newest_first, per_page, number)
                assert (page.start_index(), page.end_index()) == (want.start_index(), want.end_index())
                assert (page.has_next(), page.has_previous()) == (want.has_next(), want.has_previous())
                checked["pages"] += 1
            for bad, error in ((0, EmptyPage), (reference.num_pages + 1, EmptyPage), ("x", PageNotAnInteger),
                               (2.5, PageNotAnInteger)):
                try:
                    paginator.page(bad)
                except error:
                    pass
                else:
                    raise AssertionError(f"page {bad!r} did not raise {error.__name__}")
            middle = max(1, reference.num_pages // 2)
            assert (list(paginator.get_elided_page_range(middle))
                    == list(reference.get_elided_page_range(middle)))
        drf = PageNumberPagination()
        drf.page_size = 20
        for number in range(1, -(-len(expected) // 20) + 1):
            request = Request(RequestFactory().get("/", {"page": number}, HTTP_HOST="localhost"))
            items = drf.paginate_queryset(query(source, group, newest_first=newest_first), request)
            assert [identity(source, item) for item in items] == expected[(number - 1) * 20: number * 20]
            assert drf.get_paginated_response(items).data["count"] == len(expected)
            checked["drf_pages"] += 1


def check_all(groups):
    for source, group in groups:
        check_pages(source, group)


GROUPS = [("events", "alice"), ("events", "bob"), ("events", "nobody"), ("posts", "USER#alice"),
          ("posts", "USER#bob")]


def changes():
    """Puts, deletes, a move between groups and sort-key changes, for sync_index to apply."""
    for n in range(40):
        put_event(f"n{n:04d}", "alice", 1_700_000_000_000 + rng.randrange(90) * 1000, f"new {n}")
    for n in range(0, 30, 3):
        client.delete_item(TableName="lib_events", Key={"id": {"S": f"e{n:04d}"}})
    for n in range(30, 40):  # moved to bob
        client.update_item(TableName="lib_events", Key={"id": {"S": f"e{n:04d}"}}, UpdateExpression="SET #o = :o",
                           ExpressionAttributeNames={"#o": "owner"}, ExpressionAttributeValues={":o": {"S": "bob"}})
    for n in range(40, 50):  # a new timestamp: the same item, another place in its group
        client.update_item(TableName="lib_events", Key={"id": {"S": f"e{n:04d}"}}, UpdateExpression="SET ts = :t",
                           ExpressionAttributeValues={":t": {"N": str(1_600_000_000_000 + n)}})
    for n in range(0, 57, 5):
        client.delete_item(TableName="lib_app", Key={"PK": {"S": "USER#alice"},
                                                      "SK": {"S": f"POST#2024-{1 + n % 12:02d}-{1 + n % 28:02d}#{n:03d}"}})
    for n in range(100, 120):
        put_app("USER#alice", f"POST#2025-06-{1 + n % 28:02d}#{n:03d}", title=f"post {n}")
    put_app("USER#alice", "LIKE#999", title="not a post")
    put_app("USER#carol", "POST#2024-02-02#000", title="carol's first")


def run_blocks():
    """The quick start's own code, as the docs show it."""
    namespace = {}
    exec(blocks["paginator"], namespace)  # noqa: S102 - the docs' code, run as a reader would run it
    assert len(namespace["page"].object_list) == 25 and namespace["first_posts"].number == 1
    exec(blocks["drf"], namespace)  # noqa: S102
    response = namespace["event_list"](Request(RequestFactory().get("/", {"page": 2}, HTTP_HOST="localhost")), "alice")
    assert response.data["count"] == query("events", "alice").count() and len(response.data["results"]) == 25


def check_extras():
    """The extras from the installed wheel: the DRF class pages as DRF's own does (404 past the end),
    and the pager tag loads with its template from the app (startproject's APP_DIRS)."""
    truth = full_query("events", "alice")
    drf = IndexPagination()
    drf.page_size = 20
    request = Request(RequestFactory().get("/events/alice/", {"page": 3, "q": "x"}, HTTP_HOST="localhost"))
    items = drf.paginate_queryset(query("events", "alice"), request)
    assert [identity("events", item) for item in items] == truth[40:60]
    body = drf.get_paginated_response(items).data
    assert (body["count"], body["count_is_estimate"]) == (len(truth), False)
    assert body["next"] == "http://localhost/events/alice/?page=4&q=x"
    try:
        drf.paginate_queryset(query("events", "alice"), Request(RequestFactory().get("/", {"page": 10**6})))
    except NotFound:
        pass
    else:
        raise AssertionError("a page past the end was served")
    page = IndexPaginator(query("events", "alice"), 20).page(3)
    html = engines["django"].from_string("{% load pagination_index %}{% pager page %}").render(
        {"page": page}, RequestFactory().get("/events/alice/", {"page": 3, "q": "<x>"}))
    assert 'href="/events/alice/?page=4&amp;q=%3Cx%3E" rel="next"' in html and 'aria-current="page">3<' in html, html
    checked["extras"] = True


create_tables()
seed()
call_command("rebuild_index", verbosity=0)
check_all(GROUPS)
run_blocks()
check_extras()
changes()
call_command("sync_index", once=True, verbosity=0)
check_all(GROUPS + [("posts", "USER#carol")])
call_command("verify_index", verbosity=0, recheck_seconds=0)
json.dump(checked, sys.stdout)
