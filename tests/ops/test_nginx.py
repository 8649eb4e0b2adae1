"""deploy/nginx/shop.conf.template in a real nginx (its own prefix, a free port) in front of the
test's own Django live server on DynamoDB Local: static files, gzip, the one-second micro-cache,
nothing personal ever cached; and, configured as docker-compose.yml configures it, each client counted
by its own address (clients connect from 127.0.0.2 and up; 127.0.0.1 plays the trusted load balancer),
X-Forwarded-Proto believed from the balancer only, /metrics never served, limits per address."""
from __future__ import annotations

import gzip
import http.client
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from django.core.management import call_command

from stack.nginx import Nginx, NginxError, nginx_binary
from tests import factories
from tests.conftest import service_missing
from tests.config import set_cache_seconds

ROOT = Path(__file__).resolve().parents[2]
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


def fetch(nginx: Nginx, path: str, method: str = "GET", headers: dict | None = None, body: str | None = None,
          source: str = "127.0.0.1"):
    """One request to nginx from the loopback address `source` (a client of its own)."""
    connection = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=30, source_address=(source, 0))
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


# --- Client addresses, proxies and limits (issue 45) ---------------------------------------------

def compose_environment(service: str) -> dict:
    """A service's environment as docker-compose.yml writes it (anchors merged), `${NAME:-default}`
    taken at its default."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return {name: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))
            for name, value in compose["services"][service]["environment"].items()}


@pytest.fixture
def behind_nginx(site, settings):
    """Django and nginx configured as docker-compose.yml configures them."""
    web, nginx = compose_environment("web"), compose_environment("nginx")
    settings.COMMENTS_CLIENT_IP_HEADER = web.get("COMMENTS_CLIENT_IP_HEADER", "")
    settings.COMMENTS_CLIENT_IP_PROXIES = int(web.get("COMMENTS_CLIENT_IP_PROXIES", "1"))
    assert (nginx["NGINX_TRUSTED_PROXIES"], nginx["NGINX_LIMIT_EXEMPT"]) == (site.trusted_proxies, site.limit_exempt)
    return site


def post_comment(nginx: Nginx, source: str, body: str, headers: dict | None = None) -> int:
    response, _ = fetch(nginx, f"{PAGE}comments/", "POST", source=source,
                        body=f"author=Ann&rating=5&body={body.replace(' ', '+')}",
                        headers={"Origin": f"http://127.0.0.1:{nginx.port}",
                                 "Content-Type": "application/x-www-form-urlencoded", **(headers or {})})
    return response.status


def test_two_clients_behind_nginx_have_two_rate_limit_buckets(behind_nginx, settings):
    """H1: behind nginx, REMOTE_ADDR is nginx's for everyone. Each client must count by its own
    address, and no header a client sends may move its posts into someone else's bucket."""
    from tests.comments.test_posting import wait_for_fresh_minute

    settings.COMMENTS_POSTS_PER_MINUTE = 2
    wait_for_fresh_minute()
    mallory, alice = "127.0.0.2", "127.0.0.3"
    # Mallory uses up her limit, once naming Alice's address in every forwarding header she can.
    assert post_comment(behind_nginx, mallory, "first") == 303
    assert post_comment(behind_nginx, mallory, "second", {"X-Forwarded-For": alice, "X-Real-IP": alice}) == 303
    assert post_comment(behind_nginx, mallory, "third", {"X-Forwarded-For": "198.51.100.1"}) == 429
    # Alice was not blocked by any of it.
    assert [post_comment(behind_nginx, alice, f"alice {i}") for i in range(3)] == [303, 303, 429]


def test_the_trusted_balancer_names_the_client_and_its_scheme(behind_nginx, settings):
    """Behind a load balancer (NGINX_TRUSTED_PROXIES, here 127.0.0.1), its X-Forwarded-For names the
    client and its X-Forwarded-Proto the scheme; a client's own are ignored (L1: nginx once overwrote
    the balancer's "https" with its own "http", and DJANGO_HTTPS=1 looped on redirects)."""
    from tests.comments.test_posting import wait_for_fresh_minute

    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.COMMENTS_POSTS_PER_MINUTE = 1
    wait_for_fresh_minute()
    balancer = "127.0.0.1"
    _, through_balancer = fetch(behind_nginx, PAGE, source=balancer,
                                headers={"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.5"})
    assert f'<link rel="canonical" href="https://127.0.0.1:{behind_nginx.port}{PAGE}">' in through_balancer.decode()
    _, spoofed = fetch(behind_nginx, PAGE, source="127.0.0.2", headers={"X-Forwarded-Proto": "https"})
    assert f'<link rel="canonical" href="http://127.0.0.1:{behind_nginx.port}{PAGE}">' in spoofed.decode()
    # Two clients behind the balancer: two buckets.
    assert post_comment(behind_nginx, balancer, "one", {"X-Forwarded-For": "10.9.8.7, 203.0.113.5"}) == 303
    assert post_comment(behind_nginx, balancer, "two", {"X-Forwarded-For": "203.0.113.5"}) == 429
    assert post_comment(behind_nginx, balancer, "three", {"X-Forwarded-For": "203.0.113.6"}) == 303


def test_metrics_are_never_served_through_the_proxy(behind_nginx, live_server):
    """M5: nginx and gunicorn on one host: every request through nginx comes from 127.0.0.1."""
    response, _ = fetch(behind_nginx, "/metrics")
    assert response.status == 404
    direct = http.client.HTTPConnection("127.0.0.1", urlsplit(live_server.url).port, timeout=30)
    try:
        direct.request("GET", "/metrics")
        scraped = direct.getresponse()
        scraped.read()
        assert scraped.status == 200 and "no-store" in scraped.getheader("Cache-Control")
        for header in ("X-Forwarded-For", "X-Forwarded-Proto", "Forwarded", "X-Real-IP", "X-Forwarded-Host"):
            direct.request("GET", "/metrics", headers={header: "127.0.0.1"})
            refused = direct.getresponse()
            refused.read()
            assert refused.status == 404, header
    finally:
        direct.close()


def statuses(nginx: Nginx, path: str, count: int, source: str) -> list[int]:
    """`count` GETs on one kept-alive connection from `source`, as fast as nginx answers them."""
    connection = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=30, source_address=(source, 0))
    try:
        found = []
        for _ in range(count):
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            found.append(response.status)
        return found
    finally:
        connection.close()


def test_one_client_flooding_is_limited_and_another_is_not(behind_nginx):
    """M9: 20 requests a second with bursts of 100 per address; past it nginx answers 429 itself
    (a static file: nginx alone answers it, so the burst is spent in well under a second)."""
    flood = statuses(behind_nginx, f"/static/{CSS}", 300, "127.0.0.4")
    assert flood[:100] == [200] * 100 and flood.count(429) > 100
    assert statuses(behind_nginx, f"/static/{CSS}", 1, "127.0.0.5") == [200]
    assert statuses(behind_nginx, "/healthz", 1, "127.0.0.5") == [200]
    assert 429 not in statuses(behind_nginx, f"/static/{CSS}", 300, "127.0.0.1")  # NGINX_LIMIT_EXEMPT
