"""Traces (issue 13): one batch is one connected OpenTelemetry trace, from the Kafka message it came in through the
engine's steps, the approval, every bank call and the outbox, to the status messages; the W3C `traceparent` the
batch arrived with is continued, sent on every bank call and published with every status message.

The tracing is the processor's own (processor/cli/telemetry.py) with the SDK's in-memory exporter in place of OTLP;
the bank is the sandbox on loopback, the store real (SQLite and PostgreSQL), the broker real in the Kafka test.
Last, `dispersion processor` itself exports over OTLP/HTTP to a receiver on loopback when `[telemetry]
otlp_endpoint` or OTEL_EXPORTER_OTLP_ENDPOINT names it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from bank_support import integration_table
from confluent_kafka import Message
from engine_support import Rig, batch, engine_rig
from kafka_layer_support import batch_consumer, consume_until, new_topic, produce, read_topic, settings_for
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from otlp_support import Collector, collector_fixture  # noqa: F401  (the fixture collector)
from processor_support import start_api_processor, write_config
from sandbox_process import SandboxProcess
from vrp_engine_support import (
    VRP_DELAY,
    mandate_request,
    payment_request,
    vrp_rig,
    vrp_sandbox,  # noqa: F401  (module fixture)
)

import schemas
from consumers.batches import BatchHandler, EngineIntake
from consumers.loop import Accept, AtLeastOnceConsumer
from processor.cli.telemetry import Telemetry, start_telemetry
from processor.domain.file_states import FlowState
from processor.engine.tracing import continued
from processor.store import Store
from producers.relay import OutboxRelay
from schemas.topics import BATCHES_TOPIC, DLQ_TOPIC, STATUS_TOPIC, TRANSFERS_TOPIC, VRP_STATUS_TOPIC

UPSTREAM_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"  # the ERP's trace, as its producer put it on the message
UPSTREAM_SPAN = "00f067aa0ba902b7"
UPSTREAM = f"00-{UPSTREAM_TRACE}-{UPSTREAM_SPAN}-01"

BANK_OPERATIONS = (
    "A1 create file-payment-consent",
    "A2 upload file",
    "E4 PAR",
    "E5 authorization URL",
    "E6 token authorization_code",
    "A3 create file-payment",
    "A4 get file-payment",
)


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[Telemetry, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    telemetry = start_telemetry(None, instance="traces-test", exporter=exporter)
    assert telemetry is not None
    yield telemetry, exporter
    exporter.clear()


def _ids(traceparent: str) -> tuple[int, int]:
    """(trace id, parent span id) of W3C `traceparent` text."""
    version, trace_id, span_id, flags = traceparent.split("-")
    assert version == "00" and flags == "01", traceparent
    return int(trace_id, 16), int(span_id, 16)


def _header(headers: Sequence[tuple[str, bytes | None]], name: str) -> str:
    values = [value for key, value in headers if key == name]
    assert len(values) == 1 and values[0] is not None, headers
    return values[0].decode()


def _assert_one_connected_trace(spans: Sequence[ReadableSpan]) -> dict[int, ReadableSpan]:
    """Every span in the upstream trace, each one's parent a span of it, the consumer's span the only child of
    the upstream span. Returns the spans by id."""
    assert spans, "no spans"
    upstream_trace, upstream_span = _ids(UPSTREAM)
    assert {s.context.trace_id for s in spans if s.context is not None} == {upstream_trace}
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    roots = []
    for span in spans:
        assert span.parent is not None, f"{span.name} starts a trace of its own"
        if span.parent.span_id == upstream_span:
            roots.append(span)
        else:
            assert span.parent.span_id in by_id, f"{span.name}: its parent was not exported"
    assert [(s.name, s.kind) for s in roots] == [(f"process {roots[0].name.split()[-1]}", SpanKind.CONSUMER)]
    return by_id


def _ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


async def _approve_and_complete(rig: Rig, batch_id: str) -> None:
    await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
    approval = await rig.approve(rig.approval_url(batch_id))
    assert approval.callback is not None and approval.callback.status_code == 200
    flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
    assert flow.state == FlowState.COMPLETED, flow


async def test_one_batch_is_one_connected_trace_naming_every_bank_call_and_outbox_event(
    store: Store, traced: tuple[Telemetry, InMemorySpanExporter]
) -> None:
    telemetry, exporter = traced
    exporter.clear()
    telemetry.observe(store)
    async with engine_rig(store, bank_options=telemetry.bank_options()) as rig:
        document = batch()
        batch_id = str(document["batch_id"])
        # The message exactly as the consumer gets it from Kafka, traceparent header included.
        message = Message(
            topic=BATCHES_TOPIC,
            partition=2,
            offset=41,
            key=batch_id.encode(),
            value=_avro(document),
            headers=[("traceparent", UPSTREAM.encode())],
        )
        intake = EngineIntake(store, integrations=rig.config.integrations, clock=rig.clock)
        verdict = await asyncio.to_thread(_handle_and_close, BatchHandler(intake), intake, message)
        assert verdict == Accept("accepted")
        await _approve_and_complete(rig, batch_id)
        events = rig.events(batch_id)
        bank_requests = list(rig.sent.sent)

    spans = exporter.get_finished_spans()
    by_id = _assert_one_connected_trace(spans)
    names = [s.name for s in spans]
    for operation in BANK_OPERATIONS:
        assert operation in names, f"no span for {operation}: {sorted(set(names))}"
    assert "file create_consent" in _ancestors(next(s for s in spans if s.name == BANK_OPERATIONS[0]), by_id)
    assert "file approval link" in _ancestors(next(s for s in spans if s.name == "E4 PAR"), by_id)
    redirect = _ancestors(next(s for s in spans if s.name == "E6 token authorization_code"), by_id)
    assert "file authorization redirect" in redirect

    # The flow kept the intake's context; every step continued it.
    flow = rig.flow(batch_id)
    assert flow.traceparent is not None
    intake_span = by_id[_ids(flow.traceparent)[1]]
    assert intake_span.name == "intake batch"
    assert _ancestors(intake_span, by_id) == ["process payroll.batches"]
    steps = [s for s in spans if s.name.startswith("file ") and s.attributes]
    assert {s.name for s in steps} >= {"file create_consent", "file upload_file", "file create_payment"}
    assert all(s.parent is not None and s.parent.span_id == intake_span.context.span_id for s in steps)

    # Every status event went into the outbox under a span of its own, whose context the event carries.
    statuses = [e.status for e in events]
    assert statuses == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
    published = {
        s.attributes["dispersion.status"]: s
        for s in spans
        if s.name == f"outbox publish {STATUS_TOPIC}" and s.attributes is not None
    }
    assert sorted(published) == sorted(statuses)
    for event in events:
        assert event.headers is not None
        trace_id, span_id = _ids(event.headers["traceparent"])
        assert trace_id == int(UPSTREAM_TRACE, 16)
        assert by_id[span_id] is published[event.status]
        assert by_id[span_id].kind == SpanKind.PRODUCER

    # Every bank call carried the trace: its traceparent names the span of its operation.
    assert bank_requests
    for request in bank_requests:
        trace_id, span_id = _ids(request.headers["traceparent"])
        assert trace_id == int(UPSTREAM_TRACE, 16)
        assert by_id[span_id].kind == SpanKind.CLIENT
    a1 = next(r for r in bank_requests if r.url.path.endswith("/file-payment-consents") and r.method == "POST")
    assert by_id[_ids(a1.headers["traceparent"])[1]].name == BANK_OPERATIONS[0]


@pytest.mark.kafka
@pytest.mark.timeout(240)
async def test_the_status_messages_carry_the_trace_the_batch_came_with(
    store: Store, traced: tuple[Telemetry, InMemorySpanExporter], kafka_bootstrap: str
) -> None:
    telemetry, exporter = traced
    exporter.clear()
    telemetry.observe(store)
    topics = {
        BATCHES_TOPIC: new_topic(kafka_bootstrap, "batches"),
        DLQ_TOPIC: new_topic(kafka_bootstrap, "dlq"),
        STATUS_TOPIC: new_topic(kafka_bootstrap, "status"),
        # The relay also publishes the batch's per-transfer outcomes (issue 21): it needs their topic too.
        TRANSFERS_TOPIC: new_topic(kafka_bootstrap, "transfers"),
    }
    settings = settings_for(kafka_bootstrap, topics)
    async with engine_rig(store, bank_options=telemetry.bank_options()) as rig:
        document = batch()
        batch_id = str(document["batch_id"])
        value = _avro(document)
        produce(kafka_bootstrap, topics[BATCHES_TOPIC], [(batch_id.encode(), value, [("traceparent", UPSTREAM)])])

        intake = EngineIntake(store, integrations=rig.config.integrations, clock=rig.clock)
        await asyncio.to_thread(_consume_one, batch_consumer(settings, intake), intake)
        await _approve_and_complete(rig, batch_id)
        events = rig.events(batch_id)

    relay = OutboxRelay(store, {"bootstrap.servers": kafka_bootstrap}, topic_name=settings.topic)
    try:
        assert await asyncio.to_thread(relay.drain, 30)
    finally:
        relay.close()
    messages = [m for m in read_topic(kafka_bootstrap, topics[STATUS_TOPIC], expect=len(events)) if m.key]
    assert len(messages) == len(events) == 4

    spans = exporter.get_finished_spans()
    by_id = _assert_one_connected_trace(spans)  # the consumer continued the incoming traceparent
    consumed = next(s for s in spans if s.kind == SpanKind.CONSUMER)
    assert consumed.name == f"process {topics[BATCHES_TOPIC]}"
    for message, event in zip(messages, events, strict=True):
        carried = _header(message.headers, "traceparent")
        assert event.headers is not None and carried == event.headers["traceparent"]
        trace_id, span_id = _ids(carried)
        assert trace_id == int(UPSTREAM_TRACE, 16)
        producer_span = by_id[span_id]
        assert producer_span.name == f"outbox publish {STATUS_TOPIC}"
        assert producer_span.attributes is not None
        assert producer_span.attributes["dispersion.status"] == _status_of(message.value)


def _avro(document: dict[str, Any]) -> bytes:
    """The batch as the ERP's producer writes it to `payroll.batches` (Avro; a timestamp for `requested_at`)."""
    return schemas.encode(BATCHES_TOPIC, {**document, "requested_at": datetime(2026, 11, 2, 8, tzinfo=UTC)})


def _handle_and_close(handler: BatchHandler, intake: EngineIntake, message: Message) -> Any:
    """The handler's verdict on one message, in the consumer's thread (the intake's event loop lives there)."""
    try:
        return handler(message)
    finally:
        intake.close()


def _consume_one(consumer: AtLeastOnceConsumer, intake: EngineIntake) -> None:
    """Poll until one message was handled, as the processor's consumer thread does."""
    try:
        consume_until(consumer, 1)
    finally:
        consumer.close()
        intake.close()


def _status_of(value: bytes | None) -> str:
    record = schemas.decode(STATUS_TOPIC, value or b"")
    return str(record["status"])


@pytest.mark.parametrize("how", ["config", "environment"])
def test_the_processor_exports_its_spans_over_otlp_when_configured(
    how: str, collector: Collector, tmp_path: Path, unserved_port: int
) -> None:
    endpoint = collector.endpoint
    tables: dict[str, dict[str, Any]] = {
        "processor": {"store": f"sqlite:///{tmp_path / 'db.sqlite'}", "public_url": "http://127.0.0.1:8600"},
        "integrations.sandbox": integration_table(f"http://127.0.0.1:{unserved_port}", retry={"max_attempts": 1}),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["DISPERSION_STORE_ALLOW_DEV_KEY"] = "1"
    if how == "config":
        tables["telemetry"] = {"otlp_endpoint": endpoint}
    else:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    config = tmp_path / "dispersion.toml"
    write_config(config, tables)
    process, api = start_api_processor(config, "traced-7", env)
    try:
        # The approver opens a link of no flow: refused, and a trace of its own.
        answer = httpx.get(f"{api}/approve/file/batch-unknown?t=no-such-token", timeout=10)
        assert answer.status_code == 404
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()[-3000:]

    spans = collector.spans()
    assert "file approval link" in [span.name for span in spans]
    for span in spans:
        assert span.resource["service.name"] == "dispersion"
        assert span.resource["service.instance.id"] == "traced-7"


async def test_a_vrp_mandate_and_its_payments_continue_the_traces_their_requests_came_with(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
    traced: tuple[Telemetry, InMemorySpanExporter],
) -> None:
    """Issue 18: every `vrp.status` event of a mandate carries the trace of the request it belongs to (the mandate's
    for its own statuses, the payment's for the payment's), also for the steps taken later: the approval's redirect,
    the payment's settlement read by the worker."""
    telemetry, exporter = traced
    exporter.clear()
    telemetry.observe(store)
    payment_trace = "5ce0e9a56015fec5aadfa328ae398115"
    async with vrp_rig(vrp_sandbox, store) as rig:
        request = mandate_request(now=rig.clock.now())
        mandate_id = str(request["mandate_id"])
        with continued("process vrp.mandates", UPSTREAM, kind=SpanKind.CONSUMER):
            outcome = await rig.vrp.submit_mandate(request)
        assert outcome.created and rig.mandate(mandate_id).traceparent is not None
        assert (await rig.approve(mandate_id)).status_code == 200
        with continued("process vrp.payments", f"00-{payment_trace}-{UPSTREAM_SPAN}-01", kind=SpanKind.CONSUMER):
            first = await rig.vrp.submit_payment(payment_request(mandate_id, "25.00"))
        assert first.payment is not None
        done = await rig.vrp.follow_payment(first.payment.payment_id, max_seconds=10 * VRP_DELAY)
        assert done.state == "COMPLETED"
        events = store.run(lambda tx: tx.outbox.events(VRP_STATUS_TOPIC, mandate_id), write=False)

    seen = [(e.payload["status"], e.payload.get("payment_id") is not None) for e in events]
    assert seen == [
        ("AUTHORIZATION_REQUIRED", False),
        ("AUTHORIZED", False),
        ("PAYMENT_PENDING", True),
        ("PAYMENT_COMPLETED", True),
    ]
    for event in events:
        assert event.headers is not None, event.payload
        trace_id, _ = _ids(event.headers["traceparent"])
        wanted = payment_trace if event.payload.get("payment_id") else UPSTREAM_TRACE
        assert trace_id == int(wanted, 16), event.payload["status"]
