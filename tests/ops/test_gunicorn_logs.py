"""gunicorn's own lines (start-up, "Booting worker", the access log, shutdown) and the app's lines
share one format: with LOG_FORMAT=json every line gunicorn's process writes to stderr is a JSON object,
and the access line carries the request id the app answered with. A real gunicorn on a free port."""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stack.dynamodb_local import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def get(port: int, path: str, headers: dict | None = None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


@pytest.fixture
def served(tmp_path):
    """Start gunicorn (JSON logs, access log on), and return (port, stdout path, stderr path, stop)."""
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "shop.settings",
        "DJANGO_SECRET_KEY": "gunicorn-logs-test-only-8e1f4a7c2b9d0e6f5a3c1b7d9e2f0a4c6b8d1e3f5a7c9",
        "COMMENTS_CURSOR_KEY": "gunicorn-logs-test-only-cursor-key-2b4d6f8a0c2e4a6c8e0b2d4f6a8c0e2d",
        "MODERATION_REPORTER_KEY": "gunicorn-logs-test-only-reporter-key-9f7d5b3a1c9e7d5b3f1a9c7e5d3b1f9a",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_STATICFILES_STORAGE": "django.contrib.staticfiles.storage.StaticFilesStorage",
        # never collected: WhiteNoise warns about it at start-up, a Python warning that must be a JSON line too
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",  # never migrated: product pages are a 503
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "GUNICORN_WORKERS": "1",
        "GUNICORN_THREADS": "2",
        "GUNICORN_ACCESS_LOG": "-",
        "LOG_FORMAT": "json",
    }
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config", "gunicorn.conf.py", "shop.wsgi"],
                                   cwd=ROOT, env=env, stdout=stdout, stderr=stderr, start_new_session=True)

    def stop():
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"gunicorn exited: {err.read_text()[-2000:]}"
            try:
                get(port, "/healthz")
                break
            except OSError:
                assert time.monotonic() < deadline, "gunicorn did not answer /healthz within 60 s"
                time.sleep(0.2)
        yield port, out, err, stop
    finally:
        stop()


def test_every_stderr_line_is_json_gunicorn_s_own_included(served):
    port, out, err, stop = served
    status, headers = get(port, "/healthz", {"X-Request-ID": "gl-healthz", "User-Agent": "logs-test"})
    healthz = headers["x-request-id"]  # the site's own id, never the client's
    assert status == 200 and len(healthz) == 32
    status, headers = get(port, "/products/NO-TABLE/", {"X-Request-ID": "gl-503"})
    failing = headers["x-request-id"]
    assert status == 503 and failing not in {healthz, "gl-503"}
    stop()  # the shutdown lines too

    text = err.read_text()
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            lines.append(json.loads(line))
        except ValueError:
            pytest.fail(f"stderr line {number} is not JSON: {line!r}\n{text[-3000:]}")
    assert out.read_text() == ""  # the access log "-" is on stderr with everything else

    messages = [(line["logger"], line["message"]) for line in lines]
    for start in ("Starting gunicorn", "Booting worker with pid", "Shutting down"):
        assert any(lg == "gunicorn.error" and m.startswith(start) for lg, m in messages), start
    access = {line["request_id"]: line for line in lines if line["logger"] == "gunicorn.access"}
    assert {k: access[healthz][k] for k in ("method", "path", "status", "user_agent")} == {
        "method": "GET", "path": "/healthz", "status": 200, "user_agent": "logs-test"}
    assert access[failing]["status"] == 503 and access[failing]["duration_ms"] >= 0
    # the app's lines of the failing request: its warning with the traceback, its request line, Django's
    app = [line for line in lines if line.get("request_id") == failing and line["logger"] != "gunicorn.access"]
    assert next(line for line in app if line["logger"] == "shop.request")["client_request_id"] == "gl-503"
    assert {line["logger"] for line in app} == {"shop.unavailable", "shop.request", "django.request"}
    assert "OperationalError" in next(line["exc"] for line in app if line["logger"] == "shop.unavailable")
