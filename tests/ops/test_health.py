"""/healthz, /readyz, error pages, security headers and the request log line, through Django's test client."""
import json
import logging

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.urls import path

from shop.logs import JSONFormatter, KeyValueFormatter
from tests import factories
from tests.config import index_config, use_table


def boom(request):
    raise RuntimeError("secret internals: do not show")


urlpatterns = [path("boom/", boom)]


def test_healthz_needs_no_dependency(client, settings):
    settings.PAGINATION_INDEX = index_config(aws={"ENDPOINT_URL": "http://127.0.0.1:9"})  # nothing listens there
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.content == b"ok\n"


@pytest.mark.django_db
def test_readyz_ok_when_every_dependency_answers(client, comments_table):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "dynamodb": "ok", "index": "ok"}}


@pytest.mark.django_db
def test_readyz_503_names_dynamodb_when_the_table_is_missing(client, dynamodb_settings, settings):
    use_table(settings, "no-such-table")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response["Retry-After"]
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["dynamodb"] == "failed: ResourceNotFoundException"
    assert body["checks"]["index"] == "ok"


@pytest.mark.django_db
def test_readyz_503_names_dynamodb_when_it_does_not_answer(client, settings):
    settings.PAGINATION_INDEX = index_config(aws={"ENDPOINT_URL": "http://127.0.0.1:9"})
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["dynamodb"].startswith("failed: ")


@pytest.mark.django_db
def test_security_headers(client):
    response = client.get("/healthz")
    assert "default-src 'self'" in response["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "strict-origin-when-cross-origin"
    assert response["X-Frame-Options"] == "DENY"


@pytest.mark.django_db
def test_404_page_in_the_sites_look(client):
    response = client.get("/products/NOPE/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Page not found" in html and 'class="site-header"' in html


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_500_page_shows_no_traceback(client):
    client.raise_request_exception = False
    response = client.get("/boom/")
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong" in html
    assert "secret internals" not in html and "Traceback" not in html


@pytest.mark.django_db
def test_400_page_for_a_bad_host(client):
    response = client.get("/", HTTP_HOST="evil.example.com")
    assert response.status_code == 400
    html = response.content.decode()
    assert "Something was wrong with that request" in html and 'class="site-header"' in html
    assert "evil.example.com" not in html


@pytest.mark.parametrize("template, title", [("400.html", "Something was wrong with that request"),
                                             ("403.html", "Forbidden"), ("503.html", "Temporarily unavailable")])
def test_error_templates_render_in_the_sites_look(rf, template, title):
    from django.template.loader import render_to_string
    html = render_to_string(template, request=rf.get("/"))
    assert title in html and 'class="site-header"' in html


def request_lines(caplog):
    return [record.fields for record in caplog.records if record.name == "shop.request"]


@pytest.mark.django_db
def test_one_log_line_per_request_with_page_and_path(client, comments_table, caplog):
    factories.seed("LOG-1", 260, seed=5)
    factories.product("LOG-1")
    call_command("rebuild_index", group=["LOG-1"], verbosity=0)
    caplog.set_level(logging.INFO, logger="shop.request")
    first = client.get("/products/LOG-1/", HTTP_X_REQUEST_ID="req-123")
    deep = client.get("/products/LOG-1/?page=12")
    missing = client.get("/products/LOG-1/?page=99")
    assert (first.status_code, deep.status_code, missing.status_code) == (200, 200, 404)
    assert first["X-Request-ID"] == "req-123"
    assert len(deep["X-Request-ID"]) == 32
    lines = request_lines(caplog)
    assert len(lines) == 3
    assert lines[0]["request_id"] == "req-123"
    assert {k: lines[0][k] for k in ("method", "path", "status", "page", "served_by")} == {
        "method": "GET", "path": "/products/LOG-1/", "status": 200, "page": 1, "served_by": "fast"}
    assert (lines[1]["page"], lines[1]["served_by"], lines[1]["request_id"]) == (12, "index", deep["X-Request-ID"])
    assert lines[2]["status"] == 404 and "page" not in lines[2]
    assert all(line["duration_ms"] >= 0 for line in lines)


@pytest.mark.django_db
def test_an_unsafe_request_id_is_replaced(client):
    response = client.get("/healthz", HTTP_X_REQUEST_ID="bad id\nwith newline")
    assert response["X-Request-ID"] != "bad id\nwith newline" and len(response["X-Request-ID"]) == 32


def log_record(**fields):
    record = logging.LogRecord("shop.request", logging.INFO, __file__, 1, "request", None, None)
    record.fields = fields
    return record


def test_json_and_key_value_formats():
    record = log_record(request_id="abc", path="/products/X/", status=200, duration_ms=3.5, served_by="index")
    entry = json.loads(JSONFormatter().format(record))
    assert entry["message"] == "request" and entry["level"] == "INFO"
    assert {k: entry[k] for k in ("request_id", "path", "status", "duration_ms", "served_by")} == {
        "request_id": "abc", "path": "/products/X/", "status": 200, "duration_ms": 3.5, "served_by": "index"}
    line = KeyValueFormatter().format(log_record(path="/a b", status=404))
    assert line.endswith(' INFO shop.request request path="/a b" status=404')
