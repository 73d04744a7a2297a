"""The dashboard and the alerts select only what a processor really exports: a `dispersion processor` process
(real broker, PostgreSQL, sandbox bank) consumes a batch up to AUTHORIZATION_REQUIRED and dead-letters a poison
message, then its `/metrics` is scraped over HTTP. Every metric an expression of deploy/grafana/dispersion.json or
deploy/prometheus/alerts.yml names is in that scrape (or is Prometheus's own `up`), every label an expression uses
on an observed metric is one of its labels, every batch state an expression selects is a real flow state, and
every dispersion metric the processor exports has a place on the dashboard."""

from __future__ import annotations

import httpx
import pytest
from monitoring_support import PROMETHEUS_OWN, TARGET_LABELS, alert_expressions, dashboard_expressions, promql_names
from processor_support import (
    BATCHES_TOPIC,
    DLQ_TOPIC,
    STATUS_TOPIC,
    DeploymentFactory,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    payroll_batch,
    unique_id,
)
from prometheus_client.parser import text_string_to_metric_families

from processor.domain.file_states import FlowState

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(180)]

SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}


def exported(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """Series names a scrape offers (families with their type's suffixes) and the label names seen per series."""
    names: set[str] = set()
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        for sample in family.samples:
            names.add(sample.name)
            labels.setdefault(sample.name, set()).update(sample.labels)
    return names, labels


def test_every_expression_names_only_what_a_running_processor_exports(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap)
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    dead_letters = deployment.topic_log(DLQ_TOPIC, decode=False)
    producer = deployment.producer()
    batch_id = unique_id("MON")
    producer.send(BATCHES_TOPIC, batch_id, payroll_batch(batch_id))
    producer.send_raw(BATCHES_TOPIC, b"poison", b"not avro")
    statuses.wait_until(lambda log: log.find(batch_id, "AUTHORIZATION_REQUIRED") is not None, timeout=60, what="AR")
    dead_letters.wait_until(lambda log: len(log.events) == 1, timeout=60, what="the dead letter")

    scrape = httpx.get(f"{instance.url}/metrics", timeout=30)
    assert scrape.status_code == 200
    names, labels = exported(scrape.text)
    # The work above left samples behind: consumer outcomes, bank calls, published events, store gauges.
    for observed in (
        "dispersion_consumed_messages_total",
        "dispersion_bank_call_seconds_count",
        "dispersion_outbox_published_total",
        "dispersion_batches",
    ):
        assert observed in labels, observed

    expressions = {**dashboard_expressions(), **alert_expressions()}
    used: set[str] = set()
    for where, expr in expressions.items():
        metrics, label_names, values = promql_names(expr)
        assert metrics, f"{where}: no metric in {expr!r}"
        unknown = metrics - names - PROMETHEUS_OWN
        assert not unknown, f"{where}: {sorted(unknown)} not exported by the processor ({expr!r})"
        used |= metrics
        sampled = [labels[m] for m in metrics if m in labels]
        if sampled and len(sampled) == len(metrics):  # every metric observed: its labels are known
            known = set().union(*sampled) | TARGET_LABELS | {"le"}
            assert label_names <= known, f"{where}: labels {sorted(label_names - known)} unknown ({expr!r})"
        if "dispersion_batches" in metrics:
            states = {str(s) for s in FlowState}
            assert values.get("state", set()) <= states, f"{where}: {values['state'] - states} is no flow state"

    # The other way round: the dashboard shows every dispersion metric the processor exports (the `_created`
    # timestamps prometheus_client adds to counters and histograms aside).
    ours = {
        family.name
        for family in text_string_to_metric_families(scrape.text)
        if family.name.startswith("dispersion_") and not family.name.endswith("_created")
    }
    shown = {name for expr in dashboard_expressions().values() for name in promql_names(expr)[0]}
    missing = {family for family in ours if not any(s == family or s.startswith(f"{family}_") for s in shown)}
    assert not missing, f"exported but on no dashboard panel: {sorted(missing)}"
    print(f"{len(expressions)} expressions over {len(used)} metrics checked against {len(ours)} exported families")
    assert instance.terminate() == 0
