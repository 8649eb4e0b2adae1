"""shop.middleware.MicroCacheMiddleware: public pages replayed for a second to cookie-less GETs, on
DynamoDB Local through the whole middleware stack; personal responses never stored."""
import time
from dataclasses import replace

import pytest
from django.http import HttpResponse
from django.test import Client

from comments.store import put_comments
from shop.middleware import MicroCacheMiddleware
from tests import factories
from tests.config import set_cache_seconds

SKU = "MICRO-1"
URL = f"/products/{SKU}/"


@pytest.fixture
def product(db, comments_table, settings):
    settings.RESPONSE_MICRO_CACHE_SECONDS = 30
    set_cache_seconds(settings, 0)  # the page under the micro-cache always reads the table
    factories.seed(SKU, 3, seed=7)
    return factories.product(SKU, "Micro kettle")


def add_comment_behind_the_sites_back(body: str):
    put_comments([replace(factories.make_comments(SKU, 1, seed=99)[0], body=body)])


def test_a_public_page_is_replayed_with_its_validators(product):
    anonymous = Client()
    first = anonymous.get(URL)
    assert first["Cache-Control"].startswith("public")
    add_comment_behind_the_sites_back("Written straight into the table")
    again = anonymous.get(URL)
    assert again.status_code == 200 and again.content == first.content  # from the micro-cache
    assert again["ETag"] == first["ETag"] and again["X-Request-ID"] != first["X-Request-ID"]
    assert anonymous.get(URL, headers={"If-None-Match": first["ETag"]}).status_code == 304
    with_cookie = Client()
    with_cookie.cookies["_ga"] = "GA1.1.1"
    assert "Written straight into the table" in with_cookie.get(URL).content.decode()  # never from the cache


def test_a_post_empties_it_and_the_poster_sees_their_page(product):
    """One Client is one handler, so one process's cache: a post through it empties that cache."""
    browser = Client()
    browser.get(URL)
    response = browser.post(f"{URL}comments/", {"author": "Ann", "rating": "5", "body": "Posted through the form"},
                            headers={"Origin": "http://testserver"})
    assert response.status_code == 303 and browser.cookies
    assert "Posted through the form" in browser.get(URL).content.decode()  # cookies: their own page
    browser.cookies.clear()
    assert "Posted through the form" in browser.get(URL).content.decode()  # the post emptied the cache


def test_entries_expire(product, settings):
    settings.RESPONSE_MICRO_CACHE_SECONDS = 0.2
    anonymous = Client()
    anonymous.get(URL)
    add_comment_behind_the_sites_back("After the entry expired")
    time.sleep(0.3)
    assert "After the entry expired" in anonymous.get(URL).content.decode()


@pytest.mark.parametrize("headers, cookie, shareable", [
    ({"Cache-Control": "public, max-age=60"}, False, True),
    ({"Cache-Control": "public, max-age=60", "Vary": "Accept-Encoding"}, False, True),
    ({"Cache-Control": "private, max-age=60"}, False, False),
    ({"Cache-Control": "no-store, private"}, False, False),
    ({"Cache-Control": "public, max-age=60", "Vary": "Cookie"}, False, False),
    ({"Cache-Control": "public, max-age=60"}, True, False),
    ({}, False, False),
])
def test_only_public_cookie_free_responses_are_stored(headers, cookie, shareable):
    response = HttpResponse("page", headers=headers)
    if cookie:
        response.set_cookie("sessionid", "x")
    assert MicroCacheMiddleware.shareable(response) is shareable


def test_errors_are_not_stored(product):
    anonymous = Client()
    assert anonymous.get("/products/NOT-YET/").status_code == 404
    factories.product("NOT-YET")
    assert anonymous.get("/products/NOT-YET/").status_code == 200
