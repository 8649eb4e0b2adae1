"""The self-hosted stack's alert rules (deploy/prometheus/alerts.yml) pass `promtool check rules` and
their unit tests (`promtool test rules`: each alert fires on the series that mean trouble, stays quiet
on healthy ones); each names a runbook page that names it; and the Grafana dashboard
(deploy/grafana/corner-shop.json) and the rules query only metrics the shop defines. A real Prometheus
loads and evaluates both against a running stack in tests/deploy/test_prometheus.py."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import service_missing
from tests.deploy.aws_actions import ROOT

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "corner-shop.json"
# Series Prometheus makes itself, and PromQL's functions and keywords (not metric names).
NOT_METRICS = {"up", "time", "max", "sum", "rate", "by", "le", "or", "and", "absent", "histogram_quantile",
               "status", "view", "job", "outcome", "operation", "method", "cache", "result", "on", "without"}


def promtool() -> str:
    path = shutil.which("promtool")
    if not path:
        service_missing("promtool is not installed (Debian: apt-get install prometheus; `make metrics-tools`)")
    return path


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    return [target["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for target in panel["targets"]]


def defined_metrics() -> set[str]:
    """The series names the shop's collectors expose (metrics/__init__.py), with their suffixes."""
    text = (ROOT / "metrics" / "__init__.py").read_text()
    names = set()
    for kind, name in re.findall(r'(Counter|Gauge|Histogram)\(\s*"([a-z_]+)"', text):
        base = name.removesuffix("_total") if kind == "Counter" else name
        names |= {"Counter": {f"{base}_total"}, "Gauge": {base},
                  "Histogram": {f"{base}_bucket", f"{base}_count", f"{base}_sum"}}[kind]
    return names


def test_promtool_checks_the_rules_and_their_unit_tests_pass():
    tool = promtool()
    checked = subprocess.run([tool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
    tested = subprocess.run([tool, "test", "rules", ALERTS_TEST.name], cwd=ALERTS_TEST.parent, capture_output=True,
                            text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert is exercised by the unit tests, firing at least once.
    spec = yaml.safe_load(ALERTS_TEST.read_text())
    fired = {case["alertname"] for test in spec["tests"] for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert fired == {rule["alert"] for rule in rules()}


def test_every_alert_names_a_runbook_page_that_names_it():
    for rule in rules():
        page = ROOT / rule["annotations"]["runbook"]
        assert page.is_file(), (rule["alert"], page)
        assert f"`{rule['alert']}`" in page.read_text(), f"{page.name} does not name {rule['alert']}"


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_the_queries_use_only_metrics_the_shop_defines(source):
    expressions = [rule["expr"] for rule in rules()] if source == "rules" else dashboard_expressions()
    assert expressions
    defined = defined_metrics()
    for expression in expressions:
        # Identifiers outside label matchers and strings: metric names, functions, keywords.
        bare = re.sub(r'\{[^}]*\}|"[^"]*"|\[[^\]]*\]', " ", expression)
        for name in set(re.findall(r"\b[a-z_][a-z0-9_]*\b", bare)) - NOT_METRICS:
            assert name in defined, f"{source}: {name!r} in {expression!r} is no metric of metrics/__init__.py"
