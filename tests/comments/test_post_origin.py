"""The comment form has no CSRF token: a POST is accepted only from the site's own pages, judged by
Origin, then Sec-Fetch-Site, then Referer (comments.origin). On DynamoDB Local, through the real view."""
import pytest
from django.test import Client

from tests import factories
from tests.comments.test_posting import POST_URL, SKU, URL, VALID, _clean_rate_limit, stored  # noqa: F401 (autouse)


@pytest.fixture
def product(db, comments_table):
    return factories.product(SKU, "Kettle")


def post(headers: dict):
    return Client(headers=headers).post(POST_URL, VALID)


@pytest.mark.parametrize("headers", [
    {"Origin": "http://testserver"},
    {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
    {"Sec-Fetch-Site": "same-origin"},
    {"Referer": "http://testserver/products/POST-1/"},  # an old browser: no Origin, a Referer of ours
])
def test_a_post_from_our_page_is_a_303(product, headers):
    response = post(headers)
    assert response.status_code == 303 and response["Location"] == URL
    assert len(stored()) == 1


@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example"},
    {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    {"Origin": "null"},  # sandboxed frames, data: URLs
    {"Origin": "https://testserver"},  # another scheme is another origin
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain is not trusted unless listed
    {"Referer": "https://evil.example/products/POST-1/"},
    {},  # curl, a script: nothing says where the form came from
])
def test_a_foreign_or_unknown_post_is_a_403_that_keeps_the_comment(product, headers):
    response = post(headers)
    html = response.content.decode()
    assert response.status_code == 403
    assert "We couldn&#39;t accept this form" in html
    assert "Very good kettle." in html  # shown again, not lost
    assert stored() == []


def test_trusted_origins_are_accepted(product, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://shop.example", "https://*.cdn.example"]
    assert post({"Origin": "https://shop.example"}).status_code == 303
    assert post({"Origin": "https://www.cdn.example"}).status_code == 303
    assert post({"Origin": "https://cdn.example.evil"}).status_code == 403
    assert len(stored()) == 2


def test_a_refused_post_is_not_counted_by_the_throttle(product, settings):
    settings.COMMENTS_POSTS_PER_MINUTE = 1
    assert post({"Origin": "https://evil.example"}).status_code == 403
    assert post({"Origin": "http://testserver"}).status_code == 303
