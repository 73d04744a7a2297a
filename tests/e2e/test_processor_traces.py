"""Traces end to end, as deployed (docs/operations.md, "Traces"): `dispersion processor` with `[telemetry]
otlp_endpoint` naming an OTLP/HTTP receiver on loopback, a real broker, PostgreSQL and the sandbox bank as
subprocesses. A batch produced with the ERP's `traceparent` becomes one trace at the collector, continuing the
ERP's, naming every bank operation; every status message on the topic carries the trace."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from otlp_support import Collector, ExportedSpan, collector_fixture  # noqa: F401  (the fixture collector)
from processor_support import (
    BATCHES_TOPIC,
    STATUS_TOPIC,
    DeploymentFactory,
    TopicLog,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    payroll_batch,
    unique_id,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(300)]

ERP_TRACE = "0af7651916cd43dd8448eb211c80319c"
ERP_SPAN = "b7ad6b7169203331"
BANK_OPERATIONS = {
    "A1 create file-payment-consent",
    "A2 upload file",
    "E4 PAR",
    "E5 authorization URL",
    "E6 token authorization_code",
    "A3 create file-payment",
    "A4 get file-payment",
}


def has(key: str, status: str) -> Callable[[TopicLog], bool]:
    return lambda log: log.find(key, status) is not None


def test_a_batch_is_one_trace_from_the_erp_message_to_its_status_messages(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory, collector: Collector
) -> None:
    deployment = deployment_factory(kafka_bootstrap, tables={"telemetry": {"otlp_endpoint": collector.endpoint}})
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    batch_id = unique_id("B")
    transfers = [("200100300", "1500.50"), ("200100301", "2000.00")]
    deployment.producer().send(
        BATCHES_TOPIC,
        batch_id,
        payroll_batch(batch_id, transfers),
        headers=[("traceparent", f"00-{ERP_TRACE}-{ERP_SPAN}-01")],
    )
    statuses.wait_until(has(batch_id, "AUTHORIZATION_REQUIRED"), timeout=60, what="the approval link")
    required = statuses.find(batch_id, "AUTHORIZATION_REQUIRED")
    assert required is not None
    answer = deployment.approver().approve(str(required.record["authorization_url"]), via=instance.url)
    assert answer.status_code == 200, answer.text
    statuses.wait_until(has(batch_id, "COMPLETED"), timeout=60, what="COMPLETED")
    assert instance.terminate() == 0  # the exporter sends what it still holds on the way out

    # Every status message carries the batch's trace, naming the span that published it.
    spans = [s for s in collector.spans() if s.trace_id == ERP_TRACE]
    by_id = {s.span_id: s for s in spans}
    events = [e for e in statuses.events if e.key == batch_id]
    assert [e.status for e in events] == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
    for event in events:
        carried = dict(event.headers)["traceparent"]
        assert carried is not None
        _, trace_id, span_id, _ = carried.decode().split("-")
        assert trace_id == ERP_TRACE
        published = by_id[span_id]
        assert (published.name, published.attributes["dispersion.status"]) == (
            f"outbox publish {STATUS_TOPIC}",
            event.status,
        )

    # One connected trace at the collector: the consumer's span continues the ERP's, every other one has its
    # parent in the trace; every bank operation is in it; all of it from this instance.
    consumed = [s for s in spans if s.parent_span_id == ERP_SPAN]
    assert [s.name for s in consumed] == [f"process {deployment.topics[BATCHES_TOPIC]}"]
    assert all(s.parent_span_id in by_id for s in spans if s not in consumed), _orphans(spans, by_id)
    assert {s.name for s in spans} >= BANK_OPERATIONS
    assert {s.resource["service.instance.id"] for s in spans} == {instance.name}
    assert {s.resource["service.name"] for s in spans} == {"dispersion"}


def _orphans(spans: list[ExportedSpan], by_id: dict[str, ExportedSpan]) -> list[str]:
    return [s.name for s in spans if s.parent_span_id not in by_id and s.parent_span_id != ERP_SPAN]
