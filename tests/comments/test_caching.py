"""Conditional GET on product pages: strong ETag, Last-Modified, 304 without rendering, and no
public caching of anything personal."""
from datetime import datetime, timezone

import pytest
from django.contrib.messages import constants
from django.contrib.messages.storage.cookie import CookieStorage
from django.contrib.sessions.backends.db import SessionStore
from django.core.management import call_command
from django.http import HttpResponse
from django.test import Client, RequestFactory

from comments import caching
from comments.store import Comment, parse_sk, put_comments
from shop.models import Product
from tests import factories

URL = "/products/CACHE-1/"


@pytest.fixture(scope="module")
def cached_comments(module_table):
    return factories.seed("CACHE-1", 250, seed=4)


@pytest.fixture
def cached_product(db, cached_comments):
    product = factories.product("CACHE-1", "Cached cups")
    Product.objects.filter(pk=product.pk).update(updated_at=datetime(2019, 1, 1, tzinfo=timezone.utc))
    product.refresh_from_db()
    call_command("rebuild_index", group=["CACHE-1"], verbosity=0)
    return product, cached_comments


def test_validators_and_cache_control(client, cached_product, settings):
    """Every page is the same for every visitor: public. Page 1 too: its comment form carries no
    per-visitor token (the POST's Origin is checked instead)."""
    settings.COMMENTS_PAGE_MAX_AGE = 90
    _, comments = cached_product
    for url, cache_control in ((URL + "?page=2", "public, max-age=90"), (URL + "?page=12", "public, max-age=90"),
                               (URL, "public, max-age=90")):
        response = client.get(url)
        assert response.status_code == 200
        assert response["ETag"].startswith('"') and not response["ETag"].startswith("W/")
        assert response["Cache-Control"] == cache_control, url
        assert response["Last-Modified"] == parse_sk(comments[0].sk).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert "Cookie" not in client.get(URL).get("Vary", "")
    assert client.get(URL)["ETag"] != client.get(URL + "?page=12")["ETag"]


@pytest.mark.parametrize("url", [URL, URL + "?page=12"])
def test_two_visitors_get_the_same_public_page(cached_product, url):
    """Page 1 (with the comment form) and deep pages: one ETag and one body for everybody, no cookie
    handed out, so nginx, a CDN or any shared cache may keep them."""
    first, second = Client(), Client()
    second.cookies["csrftoken"] = "a" * 32
    second.cookies["_ga"] = "GA1.1.123"
    one, other = first.get(url), second.get(url)
    assert one["ETag"] == other["ETag"] and one.content == other.content
    for response in (one, other):
        assert response["Cache-Control"] == "public, max-age=60"
        assert not response.cookies


@pytest.mark.parametrize("url", [URL, URL + "?page=12"])
def test_if_none_match_gets_304_without_rendering(client, cached_product, url, rendered_templates):
    first = client.get(url)
    rendered_templates.clear()
    again = client.get(url, headers={"If-None-Match": first["ETag"]})
    assert again.status_code == 304 and again.content == b""
    assert rendered_templates == []
    assert again["ETag"] == first["ETag"] and again["Cache-Control"] == first["Cache-Control"]
    assert client.get(url, headers={"If-None-Match": '"something-else"'}).status_code == 200


def test_a_failed_if_match_gets_412(client, cached_product):
    first = client.get(URL + "?page=2")
    assert client.get(URL + "?page=2", headers={"If-Match": '"another-version"'}).status_code == 412
    assert client.get(URL + "?page=2", headers={"If-Match": first["ETag"]}).status_code == 200


def test_if_modified_since_gets_304(client, cached_product, rendered_templates):
    first = client.get(URL + "?page=11")
    rendered_templates.clear()
    again = client.get(URL + "?page=11", headers={"If-Modified-Since": first["Last-Modified"]})
    assert again.status_code == 304 and rendered_templates == []
    older = client.get(URL + "?page=11", headers={"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"})
    assert older.status_code == 200


def test_a_new_comment_changes_every_page(client, db, module_table, cold_reads):
    factories.product("CACHE-2")
    factories.seed("CACHE-2", 30, seed=6)
    before = {url: client.get(url) for url in ("/products/CACHE-2/", "/products/CACHE-2/?page=2")}
    put_comments([Comment(pk="new1", sk="2030-01-01T00:00:00.000000Z", sku="CACHE-2", author="A", body="B", rating=3)])
    for url, response in before.items():
        after = client.get(url, headers={"If-None-Match": response["ETag"], "If-Modified-Since": response["Last-Modified"]})
        assert after.status_code == 200, url
        assert after["Last-Modified"] == "Tue, 01 Jan 2030 00:00:00 GMT"


def test_a_product_edit_changes_the_etag(client, cached_product, cold_reads):
    product, _ = cached_product
    before = client.get(URL)
    product.price = "12.50"
    product.save()
    after = client.get(URL, headers={"If-None-Match": before["ETag"]})
    assert after.status_code == 200 and after["ETag"] != before["ETag"]


def test_head_has_the_same_headers_and_no_body(client, cached_product):
    get, head = client.get(URL + "?page=12"), client.head(URL + "?page=12")
    assert head.status_code == 200 and head.content == b""
    assert head["ETag"] == get["ETag"] and head["Last-Modified"] == get["Last-Modified"]
    assert client.head(URL, headers={"If-None-Match": get["ETag"]}).status_code == 200
    assert client.head(URL + "?page=12", headers={"If-None-Match": get["ETag"]}).status_code == 304


def test_post_is_not_allowed(client, cached_product):
    assert client.post(URL).status_code == 405


def test_a_session_read_is_never_shared():
    """A page that read the visitor's session (the comments they just posted are pinned) is theirs."""
    request = RequestFactory().get(URL)
    request.session = SessionStore()
    request.session.get("comments_posted")
    response = caching.set_cache_headers(request, HttpResponse("pinned"), etag='"x"',
                                         last_modified=parse_sk("2024-01-01T00:00:00.000000Z"))
    assert response["Cache-Control"] == "private, max-age=60" and "Cookie" in response["Vary"]


def test_a_pending_flash_message_is_neither_stored_nor_304d(client, cached_product):
    first = client.get(URL)
    storage_request = RequestFactory().get(URL)
    storage = CookieStorage(storage_request)
    storage.add(constants.SUCCESS, "Thanks!")
    carrier = HttpResponse()
    storage.update(carrier)
    client.cookies["messages"] = carrier.cookies["messages"].value
    response = client.get(URL, headers={"If-None-Match": first["ETag"]})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"] and "ETag" not in response


def test_the_catalogue_has_the_same_conditional_get(client, cached_product, settings):
    settings.COMMENTS_PAGE_MAX_AGE = 90
    first = client.get("/")
    assert first.status_code == 200 and "Cached cups" in first.content.decode()
    etag = first["ETag"]
    assert etag.startswith('"') and first["Cache-Control"] == "public, max-age=90"
    assert "Last-Modified" not in first  # counts change undated: the ETag alone
    revalidated = client.get("/", headers={"If-None-Match": etag})
    assert revalidated.status_code == 304 and revalidated.content == b""
    assert revalidated["ETag"] == etag and revalidated["Cache-Control"] == "public, max-age=90"
    assert client.head("/", headers={"If-None-Match": etag}).status_code == 304
    product, _ = cached_product
    Product.objects.filter(pk=product.pk).update(name="Cached mugs")
    changed = client.get("/", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed["ETag"] != etag and "Cached mugs" in changed.content.decode()


def test_the_catalogue_etag_follows_the_comment_counts(client, db, module_table):
    factories.product("CACHE-3", "Counted cups")
    factories.seed("CACHE-3", 2, seed=5)
    call_command("rebuild_index", group=["CACHE-3"], verbosity=0)
    etag = client.get("/")["ETag"]
    put_comments([Comment(pk="c" * 32, sk="2030-01-01T00:00:00.000000Z", sku="CACHE-3", author="New",
                          body="Newest", rating=5)])
    call_command("rebuild_index", group=["CACHE-3"], verbosity=0)
    response = client.get("/", headers={"If-None-Match": etag})
    assert response.status_code == 200 and response["ETag"] != etag
    assert '<td class="num">3</td>' in response.content.decode()
