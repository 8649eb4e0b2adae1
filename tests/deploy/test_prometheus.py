"""A real Prometheus (Debian's package) scrapes a running stack: gunicorn (two workers, multiprocess
metrics at /metrics) and `sync_index` following the stream (its own metrics port). Queries for the
product page's p99 latency and the stream's apply lag return numbers. It loads the self-hosted alert
rules (deploy/prometheus/alerts.yml), which evaluate cleanly and raise nothing on the healthy stack, and
every query of the Grafana dashboard (deploy/grafana/corner-shop.json) evaluates."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from stack.dynamodb_local import DynamoDBLocalError, free_port
from tests.conftest import service_missing
from tests.deploy.test_prometheus_rules import ALERTS, dashboard_expressions
from tests.ops.test_gunicorn import ROOT, SKU, Site

pytestmark = pytest.mark.slow
PAGE_P99 = 'histogram_quantile(0.99, sum by (le) (rate(shop_request_seconds_bucket{view="product-detail"}[1m])))'
STREAM_LAG = "max(pagination_index_stream_apply_lag_seconds)"


class MetricsSite(Site):
    """Two workers, so /metrics must add up both (gunicorn.conf.py gives them a multiprocess folder)."""

    @property
    def env(self) -> dict:
        return {**super().env, "GUNICORN_WORKERS": "2"}


class Prometheus:
    def __init__(self, tmp, targets: dict[str, str]):
        self.port = free_port()
        self.config = tmp / "prometheus.yml"
        jobs = [{"job_name": name, "scrape_interval": "1s", "static_configs": [{"targets": [target]}]}
                for name, target in targets.items()]
        self.config.write_text(json.dumps({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                           "rule_files": [str(ALERTS)], "scrape_configs": jobs}))
        self.command = ["prometheus", f"--config.file={self.config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{self.port}"]
        self.log = tmp / "prometheus.log"
        self.process = None

    def start(self):
        self.process = subprocess.Popen(self.command, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                        start_new_session=True)
        return self

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)

    def query(self, expression: str) -> list:
        return self.api("query?" + urllib.parse.urlencode({"query": expression}))["result"]

    def api(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/{path}", timeout=5) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def number(self, expression: str, timeout: float = 90, between=None) -> float:
        """The first finite value `expression` gives, waiting for scrapes to bring one (calling
        `between()` before each try: a rate needs traffic between two scrapes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if between:
                between()
            assert self.process.poll() is None, self.log.read_text()[-2000:]
            try:
                for sample in self.query(expression):
                    value = float(sample["value"][1])
                    if value == value and value not in (float("inf"), float("-inf")):
                        return value
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"{expression} gave no number within {timeout:.0f} s; targets: "
                             f"{self.query('up')}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if not shutil.which("prometheus"):
        service_missing("prometheus is not installed (Debian: apt-get install prometheus; `make metrics-tools`)")
    if not shutil.which("redis-server"):
        service_missing("redis-server is not installed (Debian: apt-get install redis-server)")
    tmp = tmp_path_factory.mktemp("prometheus")
    site = MetricsSite(tmp)
    metrics_port = free_port()
    sync = prometheus = None
    try:
        site.dynamodb.start()
    except DynamoDBLocalError as exc:
        service_missing(f"DynamoDB Local: {exc}")
    try:
        site.redis.start()
        site.manage(["migrate", "--no-input", "-v", "0"], ["create_tables"],
                    ["seed_demo", "--big", "45", "--products", "1", "--comments", "5", "--threads", "1"],
                    ["rebuild_index"], ["collectstatic", "--no-input", "-v", "0"])
        site.start()
        sync = subprocess.Popen([sys.executable, "manage.py", "sync_index", "--poll-seconds", "0.2"], cwd=ROOT,
                                env={**site.env, "SYNC_INDEX_METRICS_PORT": str(metrics_port)},
                                stdout=open(tmp / "sync.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        prometheus = Prometheus(tmp, {"web": f"127.0.0.1:{site.port}", "sync_index": f"127.0.0.1:{metrics_port}"})
        prometheus.start()
        yield site, prometheus
    finally:
        if prometheus:
            prometheus.stop()
        if sync and sync.poll() is None:
            os.killpg(sync.pid, signal.SIGTERM)
            sync.wait(30)
        site.stop()
        site.redis.kill()
        site.dynamodb.stop()


def post_comment(site, body: str) -> int:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", site.port, timeout=30)
    try:
        connection.request("POST", f"/products/{SKU}/comments/",
                           body=urllib.parse.urlencode({"author": "Ann", "rating": "5", "body": body}),
                           headers={"Content-Type": "application/x-www-form-urlencoded",
                                    "Origin": f"http://127.0.0.1:{site.port}"})
        return connection.getresponse().status
    finally:
        connection.close()


def test_prometheus_reads_page_latency_and_stream_lag(stack):
    site, prometheus = stack

    def browse():
        for number in (1, 2, 3):
            assert site.get(f"/products/{SKU}/" + (f"?page={number}" if number > 1 else ""))[0] == 200

    prometheus.number('up{job="web"} == 1')
    assert post_comment(site, "Scraped.") == 303
    p99 = prometheus.number(PAGE_P99, between=browse)
    status, _, text = site.get("/metrics")  # both workers' values, added up
    assert status == 200 and 'shop_request_seconds_bucket{le="0.001",status="200",view="product-detail"}' in text
    assert 0 < p99 <= 10
    lag = prometheus.number(STREAM_LAG)
    assert 0 <= lag < 600
    assert prometheus.number("sum(shop_dynamodb_calls_total)") > 0
    assert prometheus.number("max_over_time(pagination_index_stream_leases_held[1m]) >= 1") >= 1
    assert prometheus.number("sum(pagination_index_call_seconds_count)") > 0


def test_the_alert_rules_load_evaluate_and_stay_quiet_on_a_healthy_stack(stack):
    site, prometheus = stack
    prometheus.number('up{job="sync_index"} == 1')
    prometheus.number("time() - max(pagination_index_stream_last_poll_timestamp_seconds) < 60")
    deadline = time.monotonic() + 60
    while True:
        groups = prometheus.api("rules")["groups"]
        loaded = [rule for group in groups for rule in group["rules"]]
        if loaded and all(rule.get("lastEvaluation", "").startswith("2") and rule["health"] == "ok" for rule in loaded):
            break
        assert time.monotonic() < deadline, loaded
        time.sleep(1)
    assert {rule["name"] for rule in loaded} >= {"SyncIndexDown", "SyncIndexStalled", "StreamApplyLagHigh", "SiteDown"}
    for rule in loaded:
        assert rule["health"] == "ok" and not rule.get("lastError"), rule
        # Nothing pending or firing on a healthy stack (a rule that always fired would be noise).
        assert rule["state"] == "inactive", rule


def test_every_dashboard_query_evaluates(stack):
    site, prometheus = stack
    prometheus.number('up{job="sync_index"} == 1')
    answered = 0
    for expression in dashboard_expressions():
        answered += bool(prometheus.query(expression))  # a bad query is an HTTP 400: api() fails
    assert answered >= len(dashboard_expressions()) // 2
