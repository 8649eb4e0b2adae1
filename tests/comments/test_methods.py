"""What each URL answers to the methods it does not take (issue 16): read-only views answer 405 with
`Allow` before Django's CSRF check would (JSON under /api/), while the comment form's target stays
protected by its origin check. Requests go through the whole middleware stack with CSRF enforced,
as a browser or script meets it; product pages and the API read DynamoDB Local."""
import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests import factories
from tests.comments.test_posting import _clean_rate_limit, stored  # noqa: F401 (autouse)

SKU = "METHOD-1"
UNSAFE = ["post", "put", "patch", "delete"]
READ_ONLY_PAGES = ["/", f"/products/{SKU}/", f"/products/{SKU}/?page=2", "/robots.txt", "/sitemap.xml",
                   "/sitemap-products.xml", "/healthz", "/readyz", "/ops/"]
API = f"/api/products/{SKU}/comments"


@pytest.fixture
def product(db, comments_table):
    factories.seed(SKU, 25, seed=3)
    return factories.product(SKU, "Method kettle")


@pytest.fixture
def browser():
    """CSRF enforced (Django's test client skips it by default), with a form's Origin, as a browser posts."""
    return Client(enforce_csrf_checks=True, headers={"Origin": "http://testserver"})


@pytest.mark.parametrize("method", UNSAFE)
@pytest.mark.parametrize("url", READ_ONLY_PAGES)
def test_read_only_pages_answer_405_with_allow(browser, db, url, method):
    """Answered before the view looks anything up: no product or table needed."""
    response = getattr(browser, method)(url)
    assert response.status_code == 405, response.content[:200]
    assert response["Allow"] == "GET, HEAD"
    assert "This address can only be read" in response.content.decode()
    assert "Please try again" not in response.content.decode()  # not the CSRF failure page


def test_a_staff_member_with_a_session_also_gets_405(browser, product):
    """The staff page with a logged-in session (a CSRF cookie in play) still answers 405, not 403."""
    User.objects.create_superuser("ops", "ops@example.com", "pw")
    browser.login(username="ops", password="pw")
    assert browser.get("/ops/").status_code == 200
    response = browser.post("/ops/")
    assert response.status_code == 405 and response["Allow"] == "GET, HEAD"


@pytest.mark.parametrize("method", UNSAFE)
@pytest.mark.parametrize("url", [API, "/api/products/NOPE/comments"])
def test_the_api_answers_json_405_with_allow(browser, db, url, method):
    response = getattr(browser, method)(url)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": {"status": 405, "message": "Only GET and HEAD are allowed."}}


@pytest.mark.parametrize("method", UNSAFE)
def test_unknown_api_endpoints_are_json_404_for_any_method(browser, method):
    response = getattr(browser, method)("/api/nothing")
    assert response.status_code == 404 and response.json()["error"]["status"] == 404


def test_safe_methods_still_work(browser, product):
    assert browser.get(f"/products/{SKU}/").status_code == 200
    assert browser.head(f"/products/{SKU}/").status_code == 200
    assert browser.get(API).status_code == 200
    assert browser.head(API).status_code == 200


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_the_form_target_takes_get_head_and_post_only(browser, product, method):
    response = getattr(browser, method)(f"/products/{SKU}/comments/")
    assert response.status_code == 405 and response["Allow"] == "GET, HEAD, POST"
    assert len(stored()) == 25  # the seeded ones only


def test_the_form_target_is_still_protected_against_cross_site_posts(product):
    """It has no CSRF token (pages stay public); its origin check is what protects it."""
    form = {"author": "Eve", "rating": "5", "body": "Forged"}
    for headers in ({}, {"Origin": "https://evil.example"}):
        response = Client(enforce_csrf_checks=True, headers=headers).post(f"/products/{SKU}/comments/", form)
        assert response.status_code == 403
        assert "We couldn&#39;t accept this form" in response.content.decode()
    assert len(stored()) == 25  # the seeded ones only
    ours = Client(enforce_csrf_checks=True, headers={"Origin": "http://testserver"})
    assert ours.post(f"/products/{SKU}/comments/", form).status_code == 303
    assert len(stored()) == 26


@pytest.mark.parametrize("name", ["<script>alert(1)</script>", "sort", '"quoted"', "x" * 300])
def test_unknown_api_parameters_are_never_echoed(client, product, name):
    response = client.get(API, {name: "1"})
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message == "Unknown parameter; this endpoint takes only cursor, limit, offset, rating."
    raw = response.content.decode()
    assert name not in raw and json.dumps(name)[1:-1] not in raw
    assert "script" not in raw
