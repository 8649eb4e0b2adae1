"""Surrogate keys on product pages and the purge hook after a moderation change; the ready-made webhook
hook against a real HTTP server started here on a free port."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from moderation import services
from moderation.purge import product_key
from tests import factories

SKU = "PURGE 1, ü"  # a SKU that is no header token as it is


@pytest.fixture
def comments(db, comments_table):
    factories.product(SKU, "Milk jug")
    return factories.seed(SKU, 3, seed=4)


@pytest.fixture
def receiver():
    """A purge endpoint: records each JSON body, answers with `status` (settable)."""
    received, state = [], {"status": 204}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(state["status"])
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/purge", received, state
    server.shutdown()
    server.server_close()


def test_product_pages_and_the_api_carry_the_products_key(comments, client):
    key = product_key(SKU)
    assert key.startswith("product-") and key.isascii() and " " not in key and "," not in key
    for url in [f"/products/{SKU}/", f"/products/{SKU}/?page=1", f"/api/products/{SKU}/comments"]:
        response = client.get(url, follow=True)
        assert response["Cache-Tag"] == response["Surrogate-Key"] == key, url
    assert "Cache-Tag" not in client.get("/")  # the catalogue is not a product's page
    assert product_key("OTHER") != key


def test_a_hide_calls_the_webhook_with_the_products_key_and_paths(comments, receiver, settings, admin_user):
    url, received, _ = receiver
    settings.MODERATION_PURGE_HOOK = "moderation.purge.webhook"
    settings.MODERATION_PURGE_WEBHOOK_URL = url
    services.comment_hide(comment_id=comments[0].pk, actor=admin_user, reason="x")
    assert received == [{"keys": [product_key(SKU)],
                         "paths": ["/products/PURGE%201,%20%C3%BC/", "/api/products/PURGE%201,%20%C3%BC/comments"]}]


def test_a_failing_purge_is_logged_and_the_hide_stands(comments, receiver, settings, admin_user, caplog):
    url, received, state = receiver
    state["status"] = 500
    settings.MODERATION_PURGE_HOOK = "moderation.purge.webhook"
    settings.MODERATION_PURGE_WEBHOOK_URL = url
    assert services.comment_hide(comment_id=comments[0].pk, actor=admin_user, reason="x")
    assert len(received) == 1 and "purge hook moderation.purge.webhook failed" in caplog.text



@pytest.mark.parametrize("hook, url, ids", [
    ("", "", []),
    ("moderation.purge.webhook", "http://127.0.0.1:9/purge", []),
    ("moderation.purge.no_such_hook", "", ["moderation.E001"]),
    ("moderation.purge.TAG_HEADERS", "", ["moderation.E001"]),  # not callable
    ("moderation.purge.webhook", "", ["moderation.E002"]),
])
def test_the_purge_hook_setting_is_checked(settings, hook, url, ids):
    from moderation.apps import check_purge_hook

    settings.MODERATION_PURGE_HOOK, settings.MODERATION_PURGE_WEBHOOK_URL = hook, url
    assert [error.id for error in check_purge_hook()] == ids
