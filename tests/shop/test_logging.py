"""Logs an operator can follow: every line logged while a request is served carries its request id
(the X-Request-ID answered), lines outside a request carry none, and a django.* line is written once
with DEBUG on as off. Lines are read from the handler LOGGING configures, in its own format."""
from __future__ import annotations

import io
import json
import logging

import pytest

from shop.logs import JSONFormatter, KeyValueFormatter, RequestIdFilter, current_request_id
from stack.dynamodb_local import free_port
from tests import factories
from tests.config import index_config

pytestmark = pytest.mark.django_db


@pytest.fixture
def console(monkeypatch):
    """The configured console handler (the one with the request-id filter), writing JSON into a buffer."""
    handlers = [h for h in logging.getLogger().handlers
                if any(isinstance(f, RequestIdFilter) for f in h.filters)]
    assert len(handlers) == 1, handlers
    handler, buffer = handlers[0], io.StringIO()
    monkeypatch.setattr(handler, "formatter", JSONFormatter())
    previous = handler.setStream(buffer)
    yield lambda: [json.loads(line) for line in buffer.getvalue().splitlines() if line.startswith("{")]
    handler.setStream(previous)


def test_lines_of_a_refused_post_carry_its_request_id(client, console):
    product = factories.product("LOGS-1")
    response = client.post(f"/products/{product.sku}/comments/", {"author": "a", "body": "b", "rating": 5},
                           HTTP_ORIGIN="https://elsewhere.example")
    assert response.status_code == 403
    request_id = response["X-Request-ID"]
    lines = console()
    by_logger = {line["logger"]: line for line in lines}
    # the view's own line, the middleware's request line, and Django's "Forbidden" (logged after the
    # middleware has returned, before the response is closed)
    assert {"comments.views", "shop.request", "django.request"} <= set(by_logger), lines
    assert "refused" in by_logger["comments.views"]["message"]
    assert by_logger["django.request"]["message"].startswith("Forbidden")
    assert [line.get("request_id") for line in lines] == [request_id] * len(lines)


def test_an_index_outage_logs_its_503_with_the_request_id(client, comments_table, settings, console):
    factories.seed("LOGS-2", 230, seed=41)  # 12 pages: the last two need the index
    product = factories.product("LOGS-2")
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"], "OPTIONS": dict(
        settings.PAGINATION_INDEX_REDIS, LOCATION=f"redis://127.0.0.1:{free_port()}/1")})
    response = client.get(product.get_absolute_url() + "?page=12", HTTP_X_REQUEST_ID="outage-7")
    assert response.status_code == 503 and response["X-Request-ID"] == "outage-7"
    lines = console()
    unavailable = [line for line in lines if line["logger"] == "shop.unavailable"]
    assert len(unavailable) == 1 and "the comment index unavailable" in unavailable[0]["message"]
    assert "exc" in unavailable[0]  # the traceback goes to the log, never to the page
    assert {line.get("request_id") for line in lines} == {"outage-7"}


def test_a_line_outside_a_request_carries_no_request_id(client, console):
    client.get("/healthz", HTTP_X_REQUEST_ID="before-1")
    logging.getLogger("shop.test").warning("between requests")
    client.get("/healthz", HTTP_X_REQUEST_ID="after-1")
    lines = console()
    between = [line for line in lines if line["message"] == "between requests"]
    assert len(between) == 1 and "request_id" not in between[0]
    assert [line["request_id"] for line in lines if line["logger"] == "shop.request"] == ["before-1", "after-1"]


def test_key_value_lines_carry_the_request_id_too():
    record = logging.LogRecord("comments.views", logging.INFO, __file__, 1, "comment post refused", None, None)
    token = current_request_id.set("kv-1")
    try:
        RequestIdFilter().filter(record)
    finally:
        current_request_id.reset(token)
    assert KeyValueFormatter().format(record).endswith("comment post refused request_id=kv-1")


@pytest.mark.parametrize("debug", [False, True])
def test_a_django_line_is_written_once_with_or_without_debug(client, settings, monkeypatch, debug):
    """Django's default logging gives `django` a console handler of its own when DEBUG is on; each
    line would then be written twice, once in Django's format and once in ours."""
    settings.DEBUG = debug
    buffer = io.StringIO()
    loggers = [logging.getLogger()] + [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.StreamHandler) and not type(handler).__module__.startswith("_pytest"):
                monkeypatch.setattr(handler, "stream", buffer)  # every stream handler, whoever added it
    assert client.get("/products/NO-SUCH-SKU/").status_code == 404
    assert buffer.getvalue().count("Not Found: /products/NO-SUCH-SKU/") == 1, buffer.getvalue()
