"""deploy/nginx/shop.conf.template in a real nginx (its own prefix, a free port) in front of the
test's own Django live server on DynamoDB Local: static files, gzip, the one-second micro-cache, and
nothing personal ever cached."""
from __future__ import annotations

import gzip
import http.client
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from stack.nginx import Nginx, NginxError, nginx_binary
from tests import factories
from tests.conftest import service_missing
from tests.config import set_cache_seconds

SKU = "NGINX-1"
PAGE = f"/products/{SKU}/"
CSS = "css/shop.css"


@pytest.fixture
def site(transactional_db, comments_table, live_server, settings, tmp_path):
    if not nginx_binary():
        service_missing("nginx is not installed (Debian: apt-get install nginx)")
    set_cache_seconds(settings, 0)
    factories.product(SKU, "Enamel jug")
    factories.seed(SKU, 30, seed=5)
    call_command("rebuild_index", verbosity=0)
    static_root = tmp_path / "static"
    settings.STATIC_ROOT = static_root
    call_command("collectstatic", interactive=False, verbosity=0)
    try:
        with Nginx(tmp_path / "nginx", upstream=urlsplit(live_server.url).netloc, static_root=static_root) as nginx:
            yield nginx
    except NginxError as exc:
        pytest.fail(str(exc))


def fetch(nginx: Nginx, path: str, method: str = "GET", headers: dict | None = None, body: str | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response, response.read()
    finally:
        connection.close()


def test_static_files_are_served_by_nginx_for_a_year_and_gzipped(site):
    response, body = fetch(site, f"/static/{CSS}", headers={"Accept-Encoding": "gzip"})
    assert response.status == 200
    assert response.getheader("Server", "").startswith("nginx")
    assert response.getheader("Cache-Control") == "public, max-age=31536000, immutable"
    assert response.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(body) == Path(site.static_root, CSS).read_bytes()
    assert fetch(site, "/static/css/no-such.css")[0].status == 404  # never passed on to Django


def test_public_pages_are_gzipped_and_micro_cached(site):
    first, body = fetch(site, PAGE, headers={"Accept-Encoding": "gzip"})
    assert first.status == 200 and first.getheader("X-Cache-Status") == "MISS"
    assert first.getheader("Content-Encoding") == "gzip"
    assert "Enamel jug" in gzip.decompress(body).decode()
    assert first.getheader("Cache-Control") == "public, max-age=60"  # what browsers are told, unchanged
    again, _ = fetch(site, PAGE, headers={"Accept-Encoding": "gzip"})
    assert again.getheader("X-Cache-Status") == "HIT"
    assert again.getheader("ETag") == first.getheader("ETag")
    # Django compressed it (Vary: Accept-Encoding): a client without gzip gets a plain copy of its own.
    plain, body = fetch(site, PAGE)
    assert plain.getheader("Content-Encoding") is None and "Enamel jug" in body.decode()
    assert fetch(site, PAGE)[0].getheader("X-Cache-Status") == "HIT"
    revalidated, _ = fetch(site, PAGE, headers={"If-None-Match": first.getheader("ETag")})
    assert revalidated.status == 304


def test_cookies_and_private_responses_are_never_cached(site):
    with_cookie, _ = fetch(site, PAGE, headers={"Cookie": "sessionid=abc"})
    assert with_cookie.getheader("X-Cache-Status") == "BYPASS"
    for _ in range(2):  # never_cache: "private, no-store": fetched every time
        health, _ = fetch(site, "/healthz")
        assert health.status == 200 and health.getheader("X-Cache-Status") == "MISS"

    origin = f"http://127.0.0.1:{site.port}"
    posted, _ = fetch(site, f"{PAGE}comments/", "POST", body="author=Ann&rating=5&body=Through+nginx",
                      headers={"Origin": origin, "Content-Type": "application/x-www-form-urlencoded"})
    assert posted.status == 303
    cookies = "; ".join(value.split(";", 1)[0] for name, value in posted.getheaders() if name.lower() == "set-cookie")
    assert cookies
    personal, body = fetch(site, PAGE, headers={"Cookie": cookies})
    assert personal.getheader("X-Cache-Status") == "BYPASS"
    assert "Your comment is posted" in body.decode() and "no-store" in personal.getheader("Cache-Control")
    anonymous, body = fetch(site, PAGE)
    assert anonymous.getheader("X-Cache-Status") in {"MISS", "EXPIRED", "HIT"}
    assert "Your comment is posted" not in body.decode()  # the poster's page was not stored
