"""The optional extras on DynamoDB Local: pagination_index.contrib.drf.IndexPagination in a DRF
ListAPIView (pages equal to a full Query's slices, the count the index's, 404 for pages that do not
exist, 503 with Retry-After while the index is down, and never a 404 for a page past a count the index
could not vouch for), and the `{% pager %}` template tag's HTML (links, elision, the request's other
query parameters kept, hostile values escaped)."""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import uuid
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.paginator import EmptyPage, Paginator
from django.http import Http404
from django.template import engines
from django.test import RequestFactory
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIRequestFactory

from comments.table.client import dynamodb
from pagination_index import IndexUnavailable, query
from pagination_index.contrib.drf import IndexPagination
from pagination_index.paginator import IndexPaginator
from tests.config import index_config
from tests.library.tables import definitions
from tests.ops.test_html_validity import vnu  # noqa: F401 (a fixture: the Nu HTML Checker)

ROOT = Path(__file__).resolve().parents[2]
PER_PAGE = 10
# An index nothing answers (the DynamoDB backend on a port nobody listens on): truly down.
DOWN = {"BACKEND": "pagination_index.backends.dynamodb.DynamoDBIndex",
        "OPTIONS": {"ENDPOINT_URL": "http://127.0.0.1:9", "TABLE": "down", "CONNECT_TIMEOUT": 0.2, "MAX_ATTEMPTS": 1}}


@pytest.fixture
def events(dynamodb_settings, settings):
    """A GSI with a number sort key (many equal timestamps), declared as the source "events" on the
    relational backend, alice's 143 events in it."""
    table = f"lib_events-{uuid.uuid4().hex[:8]}"
    client = dynamodb()
    client.create_table(**definitions(table, "unused")[0])
    client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    settings.PAGINATION_INDEX = index_config(SOURCES={
        "events": {"TABLE": table, "INDEX": "byOwner", "GROUP_KEY": "owner", "SORT_KEY": "ts"}})
    rng = random.Random(41)
    for n in range(143):
        put_event(table, f"e{n:04d}", "alice", 1_700_000_000_000 + rng.randrange(40) * 1000)
    yield table
    client.delete_table(TableName=table)


def put_event(table, event_id, owner, ts):
    dynamodb().put_item(TableName=table, Item={"id": {"S": event_id}, "owner": {"S": owner}, "ts": {"N": str(ts)}})


def full_query(table, owner):
    """The group's ids by one full Query, in the documented order (sort key, then member), newest first."""
    pages = dynamodb().get_paginator("query").paginate(
        TableName=table, IndexName="byOwner", KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"}, ExpressionAttributeValues={":o": {"S": owner}})
    items = [item for page in pages for item in page["Items"]]
    return [item["id"]["S"] for item in sorted(items, key=lambda item: (Decimal(item["ts"]["N"]), item["id"]["S"]),
                                               reverse=True)]


def set_source(settings, **changes):
    config = index_config()
    config["SOURCES"]["events"].update(changes)
    settings.PAGINATION_INDEX = config


# --- DRF -------------------------------------------------------------------------------------------
class EventSerializer(serializers.Serializer):
    id = serializers.CharField()
    ts = serializers.IntegerField()


class Pagination(IndexPagination):
    page_size = PER_PAGE
    page_size_query_param = "size"
    retry_after = 7


class EventList(ListAPIView):
    serializer_class = EventSerializer
    pagination_class = Pagination
    renderer_classes = [JSONRenderer]
    authentication_classes = []
    permission_classes = [AllowAny]

    def get_queryset(self):
        return query("events", self.kwargs["owner"])


def get(params=None, owner="alice"):
    response = EventList.as_view()(APIRequestFactory().get(f"/events/{owner}/", params or {}), owner=owner)
    response.render()
    return response, json.loads(response.content)


@pytest.mark.django_db
def test_drf_pages_a_group_through_the_index(events):
    call_command("rebuild_index", verbosity=0)
    truth = full_query(events, "alice")
    pages = -(-len(truth) // PER_PAGE)
    assert pages == 15
    for params, number in (({}, 1), ({"page": 2}, 2), ({"page": 12, "rating": "5"}, 12), ({"page": pages}, pages),
                           ({"page": "last"}, pages)):
        response, body = get(params)
        assert response.status_code == 200, body
        assert [event["id"] for event in body["results"]] == truth[(number - 1) * PER_PAGE:number * PER_PAGE], params
        assert (body["count"], body["count_is_estimate"]) == (len(truth), False)
        assert list(body) == ["count", "count_is_estimate", "next", "previous", "results"]
    _, deep = get({"page": 12, "rating": "5"})  # DRF's links keep the request's other parameters
    assert deep["next"] == "http://testserver/events/alice/?page=13&rating=5"
    assert deep["previous"] == "http://testserver/events/alice/?page=11&rating=5"
    _, second = get({"page": 2})
    assert second["previous"] == "http://testserver/events/alice/"
    # A client's page size is capped at max_page_size.
    _, big = get({"size": 1000})
    assert [event["id"] for event in big["results"]] == truth[:Pagination.max_page_size]
    schema = Pagination().get_paginated_response_schema({"type": "array"})
    assert list(schema["properties"]) == ["count", "count_is_estimate", "next", "previous", "results"]

    # The count is the index's, not a scan of the table: an item the index has not had yet is not counted.
    put_event(events, "late", "alice", 1_800_000_000_000)
    _, first = get()
    assert first["count"] == len(truth)
    call_command("sync_index", once=True, verbosity=0)
    _, first = get()
    assert first["count"] == len(truth) + 1 and first["results"][0]["id"] == "late"


@pytest.mark.django_db
@pytest.mark.parametrize("page", [16, 1000, 0, -1, "x", "2.5", ""])
def test_drf_answers_404_for_a_page_that_does_not_exist(events, page):
    call_command("rebuild_index", verbosity=0)
    response, body = get({"page": page})
    if page == "":  # DRF reads an empty ?page= as page 1
        assert response.status_code == 200
        return
    assert (response.status_code, body) == (404, {"detail": "Invalid page."})


@pytest.mark.django_db
def test_drf_answers_503_with_retry_after_while_the_index_is_down(events, settings, caplog):
    call_command("rebuild_index", verbosity=0)
    truth = full_query(events, "alice")
    settings.PAGINATION_INDEX = index_config(**DOWN)
    for page in (1, 2, 12):
        response, body = get({"page": page})
        assert (response.status_code, response["Retry-After"]) == (503, "7")
        assert body == {"detail": "The index is unavailable; try again shortly."}  # nothing of what failed
    assert "index unavailable for /events/alice/?page=12" in caplog.text  # that is for the log

    # With FAST_ITEMS, the first pages come from DynamoDB without the index, the count a lower bound.
    set_source(settings, FAST_ITEMS=50)
    response, body = get({"page": 5})
    assert response.status_code == 200
    assert [event["id"] for event in body["results"]] == truth[40:50]
    assert (body["count"], body["count_is_estimate"]) == (50, True)
    # Past what the windows show a page may exist: 503, not a 404 a crawler would de-index.
    for page in (6, 12, 1000):
        response, body = get({"page": page})
        assert (response.status_code, response["Retry-After"]) == (503, "7"), page
    for page in (0, "x"):
        assert get({"page": page})[0].status_code == 404
    # Django's own Paginator would say the page is missing; IndexPaginator says the index is down.
    with pytest.raises(EmptyPage):
        Paginator(query("events", "alice"), PER_PAGE).page(6)
    with pytest.raises(IndexUnavailable):
        IndexPaginator(query("events", "alice"), PER_PAGE).page(6)
    assert len(IndexPaginator(query("events", "alice"), PER_PAGE).page(5)) == PER_PAGE


@pytest.mark.django_db
def test_a_short_group_is_exact_while_the_index_is_down(events, settings):
    """A group whole within its fast window: its count is exact, and a page past it a 404."""
    for n in range(7):
        put_event(events, f"c{n}", "carol", n)
    settings.PAGINATION_INDEX = index_config(**DOWN)
    set_source(settings, FAST_ITEMS=50)
    response, body = get(owner="carol")
    assert (response.status_code, body["count"], body["count_is_estimate"]) == (200, 7, False)
    assert get({"page": 2}, owner="carol")[0].status_code == 404


def test_without_drf_the_import_names_the_extra():
    code = ("import sys; sys.modules['rest_framework'] = None\n"  # as if DRF were not installed
            "import django; django.setup()\nimport pagination_index.contrib.drf")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"})
    assert done.returncode == 1
    assert done.stderr.strip().endswith("ImportError: pagination_index.contrib.drf needs Django REST framework: "
                                        "pip install 'django-pagination-index[drf]'"), done.stderr


# --- the pager tag -----------------------------------------------------------------------------------
class Links(HTMLParser):
    """The pager's items: (tag, attributes, text) of each link and span, attribute values unescaped."""

    def __init__(self):
        super().__init__()
        self.items: list[tuple[str, dict, str]] = []
        self._open = None

    def handle_starttag(self, tag, attrs):
        if tag in {"a", "span"}:
            self._open = (tag, dict(attrs), [])

    def handle_data(self, data):
        if self._open:
            self._open[2].append(data)

    def handle_endtag(self, tag):
        if self._open and tag == self._open[0]:
            self.items.append((tag, self._open[1], "".join(self._open[2]).strip()))
            self._open = None


def render(page, path="/events/alice/", params=None, tag="{% pager page %}", with_request=True):
    template = engines["django"].from_string("{% load pagination_index %}" + tag)
    request = RequestFactory().get(path, params or {})
    return template.render({"page": page}, request if with_request else None)


def parsed(html):
    links = Links()
    links.feed(html)
    return links.items


def test_the_pager_links_every_page_of_the_elided_range_keeping_other_parameters():
    page = Paginator(range(500), 10).page(25)
    html = render(page, params={"rating": ["4", "5"], "page": "25"})
    items = parsed(html)
    shown = [text for _, _, text in items]
    assert shown == ["Previous", "1", "2", "…", "22", "23", "24", "25", "26", "27", "28", "…", "49", "50", "Next"]
    hrefs = {text: attrs.get("href") for tag, attrs, text in items if tag == "a"}
    assert hrefs["1"] == "/events/alice/?rating=4&rating=5"  # page 1: one URL, no ?page=1
    assert hrefs["24"] == "/events/alice/?rating=4&rating=5&page=24"
    assert "?rating=4&amp;rating=5&amp;page=24" in html  # the & escaped in the attribute
    rels = [(attrs["rel"], attrs["href"], text) for _, attrs, text in items if "rel" in attrs]
    assert rels == [("prev", hrefs["24"], "Previous"), ("next", hrefs["26"], "Next")]
    assert [text for _, attrs, text in items if attrs.get("aria-current") == "page"] == ["25"]
    assert html.count('class="ellipsis"') == 2
    assert '<nav class="pager" aria-label="Pages">' in html


def test_the_pager_at_the_ends_with_options_and_without_a_request():
    first = parsed(render(Paginator(range(500), 10).page(1), tag="{% pager page on_each_side=1 on_ends=1 %}"))
    assert [text for _, _, text in first] == ["1", "2", "…", "50", "Next"]
    last = parsed(render(Paginator(range(500), 10).page(50), params={"p": "50"},
                         tag='{% pager page param="p" on_each_side=1 on_ends=1 %}'))
    assert [text for _, _, text in last] == ["Previous", "1", "…", "49", "50"]
    assert last[0][1]["href"] == "/events/alice/?p=49"
    bare = parsed(render(Paginator(range(30), 10).page(2), with_request=False))
    assert [(text, attrs["href"]) for _, attrs, text in bare] == [
        ("Previous", "?page=1"), ("1", "?page=1"), ("2", "?page=2"), ("3", "?page=3"), ("Next", "?page=3")]
    assert render(Paginator(range(5), 10).page(1)).strip() == ""  # one page: no pager


def test_the_pager_escapes_hostile_parameters_and_paths():
    hostile = '"><script>alert(1)</script>'
    page = Paginator(range(100), 10).page(3)
    html = render(page, path="/e/%22%3E%3Cb%3E/", params={"q": hostile, hostile: "x", "page": "3"})
    assert "<script" not in html and "<b>" not in html
    items = parsed(html)
    href = next(attrs["href"] for _, attrs, text in items if text == "4")
    assert href == ("/e/%22%3E%3Cb%3E/?q=%22%3E%3Cscript%3Ealert%281%29%3C%2Fscript%3E"
                    "&%22%3E%3Cscript%3Ealert%281%29%3C%2Fscript%3E=x&page=4")
    assert [tag for tag, _, _ in items] == ["a"] * 12  # 10 pages, no elision, Previous and Next


def test_the_pagers_html_is_valid(vnu, tmp_path):
    """The Nu HTML Checker (tests/ops/test_html_validity.py's, with its canary) over pagers in a page."""
    hostile = '"><script>alert(1)</script>'
    pagers = {
        "middle": render(Paginator(range(500), 10).page(25), params={"rating": ["4", "5"], "page": "25"}),
        "first": render(Paginator(range(500), 10).page(1)),
        "hostile": render(Paginator(range(100), 10).page(3), path="/e/%22%3E/", params={"q": hostile, hostile: "x"}),
        "bare": render(Paginator(range(30), 10).page(2), with_request=False),
    }
    files = []
    for name, pager in pagers.items():
        path = tmp_path / f"{name}.html"
        path.write_text(f'<!doctype html><html lang="en"><head><title>{name}</title></head><body>{pager}</body></html>')
        files.append(str(path))
    canary = tmp_path / "canary.html"
    canary.write_text('<!doctype html><html lang="en"><title>Canary</title><p><li>not in a list</li></p></html>')
    result = subprocess.run([*vnu, "--format", "json", "--errors-only", *files, str(canary)],
                            capture_output=True, text=True, timeout=600)
    messages = json.loads(result.stderr or result.stdout)["messages"]
    where = [message.get("url", "?").rsplit("/", 1)[-1] for message in messages]
    assert "canary.html" in where, result.stderr
    errors = [f"{page}: {message.get('message')}" for page, message in zip(where, messages) if page != "canary.html"]
    assert not errors, errors


@pytest.mark.django_db
def test_the_pager_over_a_query_of_the_index(events):
    call_command("rebuild_index", verbosity=0)
    page = IndexPaginator(query("events", "alice"), PER_PAGE).page(12)
    items = parsed(render(page, params={"page": "12", "rating": "5"}))
    assert [text for _, _, text in items] == [
        "Previous", "1", "2", "…", "9", "10", "11", "12", "13", "14", "15", "Next"]
    assert next(attrs["href"] for _, attrs, text in items if text == "15") == "/events/alice/?page=15&rating=5"


# --- the docs' code (docs/library/extras.md) ---------------------------------------------------------
EXTRAS = ROOT / "docs/library/extras.md"


def doc_blocks() -> dict[str, str]:
    """extras.md's code blocks marked `<!-- test: name -->`, by name."""
    return dict(re.findall(r"<!-- test: (\w+) -->\s*```\w+\n(.*?)```", EXTRAS.read_text(), re.S))


@pytest.mark.django_db
def test_the_docs_code_serves_pages(events, settings, tmp_path):
    call_command("rebuild_index", verbosity=0)
    truth = full_query(events, "alice")
    blocks = doc_blocks()
    assert set(blocks) == {"drf", "view", "template"}
    namespace = {}
    exec(blocks["drf"], namespace)  # noqa: S102 - the docs' code, run as a reader would run it
    view = namespace["EventList"].as_view()
    response = view(APIRequestFactory().get("/events/alice/", {"page": 2, "page_size": 500}), owner="alice")
    response.render()
    body = json.loads(response.content)
    assert [event["id"] for event in body["results"]] == truth[100:143] and body["count"] == 143
    assert view(APIRequestFactory().get("/events/alice/", {"page": 99}), owner="alice").status_code == 404

    (tmp_path / "events.html").write_text(blocks["template"])
    settings.TEMPLATES = [{**engine, "DIRS": [*engine["DIRS"], tmp_path]} if "DjangoTemplates" in engine["BACKEND"]
                          else engine for engine in settings.TEMPLATES]
    exec(blocks["view"], namespace)  # noqa: S102
    request = RequestFactory().get("/events/alice/", {"rating": "5", "page": "3"})
    html = namespace["events_page"](request, "alice").content.decode()
    assert re.findall(r"<li>(\w+)</li>", html) == truth[50:75]
    assert len(re.findall(r"<li>", html)) == 25 + 8  # the events, then the pager: 6 pages, Previous, Next
    # The pager the docs show: page 3 of 15, through the docs' template.
    page = IndexPaginator(query("events", "alice"), PER_PAGE).page(3)
    html = render(page, params={"rating": "5", "page": "3"}, tag=blocks["template"].split("\n", 1)[1])
    shown = re.search(r"On page 3 of 15, at `/events/alice/\?rating=5&page=3`:\s*```html\n(.*?)```",
                      EXTRAS.read_text(), re.S)
    lines = [line.strip() for line in shown.group(1).splitlines() if not line.strip().startswith("...")]
    assert lines and all(line in html for line in lines), [line for line in lines if line not in html]
    assert [text for _, _, text in parsed(html.split("</ol>")[1])] == [
        "Previous", "1", "2", "3", "4", "5", "6", "…", "14", "15", "Next"]
    with pytest.raises(Http404):
        namespace["events_page"](RequestFactory().get("/events/alice/", {"page": "16"}), "alice")
