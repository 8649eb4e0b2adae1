"""Under DEBUG (`make run`) the site answers as in production where it can: an oversized body is the
413 page, not Django's debug 400 page; and Django's own debug pages, styled inline, are let through
the site's Content-Security-Policy so they render."""
import sys

import pytest
from django.conf import settings
from django.test import Client, RequestFactory, override_settings
from django.views import debug

from shop.middleware import ContentSecurityPolicyMiddleware
from tests import factories

SKU = "DEBUG-1"
VALID = {"author": "Ann", "rating": "4", "body": "Very good kettle."}

pytestmark = pytest.mark.django_db


def style_src(response) -> list[str]:
    policy = response["Content-Security-Policy"]
    return next(d.split()[1:] for d in policy.split(";") if d.split() and d.split()[0] == "style-src")


@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_an_oversized_comment_post_is_the_413_page(comments_table, debug):
    factories.product(SKU, "Kettle")
    client = Client(headers={"Origin": "http://testserver"})
    data = {**VALID, "body": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}
    with override_settings(DEBUG=debug):
        response = client.post(f"/products/{SKU}/comments/", data)
    assert response.status_code == 413
    assert "That was too much to send" in response.content.decode()


@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_an_oversized_post_to_a_csrf_protected_view_is_the_413_page(debug):
    """The CSRF check reads the form before the view runs (here: the admin's login)."""
    client = Client(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "a" * 32
    data = {"username": "x", "password": "y" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}
    with override_settings(DEBUG=debug):
        response = client.post("/admin/login/", data)
    assert response.status_code == 413
    assert "That was too much to send" in response.content.decode()


def test_djangos_debug_404_page_may_style_itself_inline(client):
    with override_settings(DEBUG=True):
        response = client.get("/no-such-page/")
        ordinary = client.get("/robots.txt")
    assert response.status_code == 404
    html = response.content.decode()
    assert "<style>" in html and "Using the URLconf defined in" in html  # Django's technical 404 page
    assert "'unsafe-inline'" in style_src(response)
    # Everything else keeps the policy production sends, under DEBUG too.
    assert ordinary["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY
    assert "'unsafe-inline'" not in style_src(ordinary)


def test_without_debug_the_404_page_is_ours_under_the_full_policy(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404 and "<style>" not in response.content.decode()
    assert response["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY


def test_djangos_debug_500_page_may_style_and_script_inline():
    request = RequestFactory().get("/boom/")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        page = debug.technical_500_response(request, *sys.exc_info())
    middleware = ContentSecurityPolicyMiddleware(lambda request: page)
    with override_settings(DEBUG=True):
        response = middleware(request)
    policy = dict((d.split()[0], d.split()[1:]) for d in response["Content-Security-Policy"].split(";"))
    assert "'unsafe-inline'" in policy["style-src"] and "'unsafe-inline'" in policy["script-src"]
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
