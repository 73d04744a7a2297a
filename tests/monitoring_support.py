"""The shipped monitoring files (deploy/grafana/dispersion.json, deploy/prometheus/alerts.yml) read for the tests:
every PromQL expression they hold, and the metric and label names an expression uses (a small tokenizer, enough
for the selectors, aggregations and functions those files use)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dispersion.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
PROMETHEUS_OWN = frozenset({"up"})  # series Prometheus itself writes for every target, not the processor
TARGET_LABELS = frozenset({"instance", "job"})  # added by Prometheus to everything it scrapes
_GROUPING = ("by", "without", "on", "ignoring", "group_left", "group_right")
_KEYWORDS = frozenset({*_GROUPING, "and", "or", "unless", "offset", "bool", "inf", "nan", "atan2"})


def dashboard_expressions() -> dict[str, str]:
    """Every PromQL expression of the dashboard: panel targets and template variable queries, by where."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    found: dict[str, str] = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["definition"])
            assert query is not None, variable["definition"]
            found[f"variable {variable['name']}"] = query.group(1)
    return found


def alert_expressions() -> dict[str, str]:
    """Every rule's expression of alerts.yml, by alert name."""
    rules: dict[str, Any] = yaml.safe_load(ALERTS.read_text())
    return {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}


def promql_names(expr: str) -> tuple[set[str], set[str], dict[str, set[str]]]:
    """(metric names, label names, label values per label matched with `=`) used by one expression. Grafana's
    `$variables` may appear inside strings and ranges."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', lambda m: m.group(0).replace("$", ""), expr)
    labels: set[str] = set()
    values: dict[str, set[str]] = {}
    for inner in re.findall(r"\{([^}]*)\}", text):
        for name, op, value in re.findall(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)"', inner):
            labels.add(name)
            if op == "=":
                values.setdefault(name, set()).add(value)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    for clause in re.findall(rf"\b(?:{'|'.join(_GROUPING)})\s*\(([^)]*)\)", text):
        labels.update(word.strip() for word in clause.split(",") if word.strip())
    text = re.sub(rf"\b(?:{'|'.join(_GROUPING)})\s*\([^)]*\)", " ", text)
    text = re.sub(r"[a-zA-Z_]\w*\s*\(", "(", text)  # functions and aggregations
    words = set(re.findall(r"(?<![\w.])[a-zA-Z_:][\w:]*", text))
    return {w for w in words if w.lower() not in _KEYWORDS}, labels, values
