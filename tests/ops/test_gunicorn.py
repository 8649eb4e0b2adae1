"""The site served by gunicorn, a real process on a free port with production-like settings (DEBUG off,
WhiteNoise with hashed static files), as docker-compose.yml runs it: the Redis index backend (a
redis-server of this module's own) and its own DynamoDB Local (data on disk), both of which the tests
stop and start again, and a file SQLite database migrated by this module."""
from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.test import override_settings

from tests.config import index_config, source_of
from stack.dynamodb_local import DynamoDBLocal, DynamoDBLocalError, free_port
from tests.conftest import service_missing
from tests.pages import parse
from tests.services import RedisServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SKU = "KETTLE-2000"  # seed_demo's flagship product
BIG = 330  # 17 pages of 20: pages 11..17 come from the index


class Site:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.dynamodb = DynamoDBLocal(db_path=tmp / "dynamodb", log_path=tmp / "dynamodb.log")
        self.redis = RedisServer(tmp)
        self.port = free_port()
        self.table = "comments-gunicorn"
        self.log_path = tmp / "gunicorn.log"
        self.process: subprocess.Popen | None = None

    @property
    def env(self) -> dict:
        return {
            "PATH": os.environ["PATH"],
            "DJANGO_SETTINGS_MODULE": "shop.settings",
            "DJANGO_SECRET_KEY": "gunicorn-test-only-3f9d2c7b1e6a4058b9c7d2e1f0a3b4c5d6e7f8091a2b",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "DATABASE_URL": f"sqlite:///{self.tmp / 'db.sqlite3'}",
            "DYNAMODB_ENDPOINT_URL": self.dynamodb.endpoint_url,
            "COMMENTS_TABLE": self.table,
            "PAGINATION_INDEX_BACKEND": "redis",
            "REDIS_URL": f"redis://127.0.0.1:{self.redis.port}/0",
            "DJANGO_STATIC_ROOT": str(self.tmp / "static"),
            "GUNICORN_BIND": f"127.0.0.1:{self.port}",
            "GUNICORN_WORKERS": "1",
            "GUNICORN_THREADS": "2",
            "LOG_FORMAT": "json",
        }

    def manage(self, *commands: list[str]) -> str:
        """Run management commands in one fresh process with the site's environment (one start-up)."""
        script = ("import json, sys, django; django.setup(); from django.core.management import call_command; "
                  "[call_command(*args) for args in json.loads(sys.argv[1])]")
        result = subprocess.run([sys.executable, "-c", script, json.dumps(commands)], cwd=ROOT, env=self.env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{commands}: {result.stdout}{result.stderr}"
        return result.stdout

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--config", "gunicorn.conf.py", "shop.wsgi"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"gunicorn exited: {self.log_path.read_text()[-2000:]}"
            try:
                if self.get("/healthz")[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("gunicorn did not answer /healthz within 60 s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def get(self, path: str, headers: dict | None = None) -> tuple[int, dict, str]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            body = response.read().decode("utf-8", "replace")
            return response.status, {k.lower(): v for k, v in response.getheaders()}, body
        finally:
            connection.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not shutil.which("redis-server"):
        service_missing("redis-server is not installed (Debian: apt-get install redis-server)")
    site = Site(tmp_path_factory.mktemp("gunicorn"))
    try:
        site.dynamodb.start()
    except DynamoDBLocalError as exc:
        service_missing(f"DynamoDB Local: {exc}")
    try:
        site.redis.start()
        site.manage(
            ["migrate", "--no-input", "-v", "0"],
            ["create_tables"],
            ["seed_demo", "--big", str(BIG), "--products", "2", "--comments", "25", "--threads", "2"],
            ["rebuild_index"],
            ["collectstatic", "--no-input", "-v", "0"],
        )
        site.start()
        yield site
    finally:
        site.stop()
        site.redis.kill()
        site.dynamodb.stop()


@pytest.fixture(scope="module")
def table_order(site):
    """The table's truth for the flagship product, newest first (read straight from its DynamoDB)."""
    from django.conf import settings

    with override_settings(COMMENTS_TABLE=site.table, PAGINATION_INDEX=index_config(
            aws={"ENDPOINT_URL": site.dynamodb.endpoint_url}, table=site.table)):
        entries = sorted(source_of(SKU).group_entries(SKU), key=lambda e: (e[1], e[0]), reverse=True)
    assert len(entries) == BIG
    return [member for member, _ in entries]


def test_catalogue(site):
    status, headers, html = site.get("/")
    assert status == 200
    assert "Kettle 2000" in html and f'href="/products/{SKU}/"' in html
    assert "330" in html  # the count, from the index


def test_product_pages_first_and_deep(site, table_order):
    status, _, html = site.get(f"/products/{SKU}/")
    assert status == 200
    page = parse(html)
    assert [pk for pk, _ in page["comments"]] == table_order[:20]
    assert page["status"] == (1, 17)
    status, _, html = site.get(f"/products/{SKU}/?page=16")  # the index path
    assert status == 200
    assert [pk for pk, _ in parse(html)["comments"]] == table_order[300:320]
    status, _, html = site.get(f"/products/{SKU}/?page=17")
    assert [pk for pk, _ in parse(html)["comments"]] == table_order[320:]


def test_bad_pages_404_and_page_one_301(site):
    for path in (f"/products/{SKU}/?page=18", f"/products/{SKU}/?page=abc", "/products/NO-SUCH-SKU/"):
        status, _, html = site.get(path)
        assert status == 404, path
        assert "Page not found" in html and "Traceback" not in html
    status, headers, _ = site.get(f"/products/{SKU}/?page=1")
    assert status == 301
    assert headers["location"] == f"/products/{SKU}/"


def test_hashed_static_files_served_by_whitenoise(site):
    _, _, html = site.get("/")
    css = re.search(r'href="(/static/css/shop\.[0-9a-f]{12}\.css)"', html)
    assert css, "the stylesheet link has no content hash"
    status, headers, body = site.get(css.group(1), headers={"Accept-Encoding": "identity"})
    assert status == 200 and ".pagination" in body
    assert "max-age=315360000" in headers["cache-control"] and "immutable" in headers["cache-control"]


def test_favicon_ico_leads_to_the_hashed_icon(site):
    status, headers, _ = site.get("/favicon.ico")
    assert status == 302
    assert re.fullmatch(r"/static/favicon\.[0-9a-f]{12}\.ico", headers["location"])
    status, icon_headers, body = site.get(headers["location"], headers={"Accept-Encoding": "identity"})
    assert status == 200 and body.startswith("\x00\x00\x01\x00")
    assert icon_headers["content-type"] in {"image/x-icon", "image/vnd.microsoft.icon"}
    assert "immutable" in icon_headers["cache-control"]


def test_pages_and_static_files_are_gzipped_and_static_files_kept_for_years(site):
    """Production settings: pages compressed by GZipMiddleware; the hashed stylesheet from WhiteNoise's
    pre-compressed copy, with a ten-year immutable Cache-Control."""
    for path in ("/", f"/products/{SKU}/?page=12"):
        status, headers, _ = site.get(path, headers={"Accept-Encoding": "gzip"})
        assert status == 200 and headers["content-encoding"] == "gzip", path
        assert "accept-encoding" in headers["vary"].lower()
    css = re.search(r'href="(/static/css/shop\.[0-9a-f]{12}\.css)"', site.get("/")[2]).group(1)
    status, headers, _ = site.get(css, headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert headers["cache-control"] == "max-age=315360000, public, immutable"


def test_headers_request_id_and_log_line(site):
    status, headers, _ = site.get(f"/products/{SKU}/?page=12", headers={"X-Request-ID": "gunicorn-e2e-1"})
    assert status == 200
    assert headers["x-request-id"] == "gunicorn-e2e-1"
    assert "default-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [json.loads(line) for line in site.log_path.read_text().splitlines()
                 if line.startswith("{") and "gunicorn-e2e-1" in line]
        if lines:
            break
        time.sleep(0.2)
    assert len(lines) == 1
    assert {k: lines[0][k] for k in ("message", "status", "page", "served_by", "path")} == {
        "message": "request", "status": 200, "page": 12, "served_by": "index", "path": f"/products/{SKU}/"}


def assert_ready(site):
    status, _, body = site.get("/readyz")
    assert status == 200, body
    assert json.loads(body) == {"status": "ok", "checks": {"database": "ok", "dynamodb": "ok", "index": "ok"}}


def assert_ready_again(site, seconds: float = 30):
    """After a dependency restarts, /readyz turns 200 again. Not at once: a restarted DynamoDB Local
    takes a few seconds (longer on a busy machine) to answer its first request within the probe's
    read timeout, and the probe makes one attempt per call."""
    deadline = time.monotonic() + seconds
    while site.get("/readyz")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert_ready(site)


def assert_not_ready_because_of(site, part):
    status, headers, body = site.get("/readyz")
    assert status == 503 and headers["retry-after"]
    checks = json.loads(body)["checks"]
    assert checks.pop(part).startswith("failed: ")
    assert set(checks.values()) == {"ok"}


def test_readyz_follows_dynamodb(site):
    assert_ready(site)
    site.dynamodb.stop()
    try:
        assert_not_ready_because_of(site, "dynamodb")
        status, _, html = site.get(f"/products/{SKU}/?page=13")  # pages say so too, with the 503 page
        assert status == 503 and "Temporarily unavailable" in html
        assert site.get("/healthz")[0] == 200  # the process itself is fine
    finally:
        site.dynamodb.start()
    assert_ready_again(site)


def test_readyz_follows_redis(site, table_order):
    assert_ready(site)
    site.redis.stop()  # SHUTDOWN SAVE: the index comes back with it
    try:
        assert_not_ready_because_of(site, "index")
        status, _, html = site.get(f"/products/{SKU}/?page=14")  # an index page: 503
        assert status == 503 and "Temporarily unavailable" in html
        assert site.get(f"/products/{SKU}/?page=2")[0] == 200  # fast pages don't need the index
    finally:
        site.redis.start()
    assert_ready_again(site)  # /readyz asks the store itself
    # Pages that met the dead index fail fast for PAGINATION_INDEX_FAIL_FAST_SECONDS (2 s), then ask again.
    deadline = time.monotonic() + 10
    while (status := site.get(f"/products/{SKU}/?page=14"))[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    status, _, html = site.get(f"/products/{SKU}/?page=14")
    assert status == 200
    assert [pk for pk, _ in parse(html)["comments"]] == table_order[260:280]
