"""The shipped alerting rules and dashboard, checked with Prometheus's own tool: `promtool check rules` accepts
deploy/prometheus/alerts.yml, `promtool test rules` runs its unit tests (alerts.test.yml: each tested alert fires
when it should and stays quiet before), `promtool check config` accepts the example Prometheus configuration, and
every PromQL expression of the Grafana dashboard parses (checked as recording rules). Which metrics the expressions
name is checked against a live processor in tests/e2e/test_monitoring_metrics.py.

promtool comes with Debian's `prometheus` package (.ci/setup installs it). Without it these tests skip, unless
DISPERSION_REQUIRE_PROMTOOL=1 (CI), which makes them fail."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from monitoring_support import ALERTS, DASHBOARD, alert_expressions, dashboard_expressions

PROMETHEUS_DIR = ALERTS.parent
REQUIRE_ENV = "DISPERSION_REQUIRE_PROMTOOL"
# Grafana's variables, as Grafana would fill them in, so the expressions are plain PromQL.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$instance": ".+"}


@pytest.fixture(scope="module")
def promtool() -> str:
    """The promtool executable (skip, or fail under DISPERSION_REQUIRE_PROMTOOL=1, when absent)."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get(REQUIRE_ENV, "") == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but promtool is not installed (Debian: apt-get install prometheus)")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return found


def _run(promtool: str, *args: str, cwd: Path = PROMETHEUS_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_promtool_accepts_the_alerting_rules(promtool: str) -> None:
    done = _run(promtool, "check", "rules", ALERTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_expressions())} rules found" in done.stdout
    expected = {
        "DispersionProcessorDown",
        "DispersionOutboxStuck",
        "DispersionOutboxBacklogGrowing",
        "DispersionConsumerLag",
        "DispersionBankErrorRate",
        "DispersionBatchesAwaitingAuthorization",
        "DispersionDeadLetters",
    }
    assert set(alert_expressions()) == expected


def test_the_alert_unit_tests_pass(promtool: str) -> None:
    tests = yaml.safe_load((PROMETHEUS_DIR / "alerts.test.yml").read_text())
    tested = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"]}
    assert len(tested) >= 2 and tested <= set(alert_expressions()), tested
    done = _run(promtool, "test", "rules", "alerts.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_accepts_the_example_prometheus_configuration(promtool: str) -> None:
    done = _run(promtool, "check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    assert [job["job_name"] for job in config["scrape_configs"]] == ["dispersion"]  # what the rules select


def test_every_dashboard_expression_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    rules = []
    for index, expr in enumerate(dashboard_expressions().values()):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
        rules.append({"record": f"dashboard:expression_{index}", "expr": expr})
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = _run(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def test_the_dashboard_is_importable_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "dispersion" and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":  # every panel queries the chosen Prometheus data source
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"], panel["title"]
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert {"Batches by state", "Consumer lag by topic", "Bank call latency p95", "Relay errors"} <= titles
    assert all(re.fullmatch(r"[A-Z]", t["refId"]) for p in dashboard["panels"] for t in p.get("targets", []))
