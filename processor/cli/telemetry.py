"""OpenTelemetry for a processor instance: the SDK, the OTLP exporter and the instrumentation, wired here only
(the layers below use the API: processor/engine/tracing.py). docs/operations.md, "Traces".

    telemetry = start_telemetry(config.telemetry.otlp_endpoint, instance="proc-1")   # None: traces are off
    if telemetry is not None:
        telemetry.observe(store)                  # store transactions and outbox events as spans
        bank_options = telemetry.bank_options()   # every bank client's httpx.AsyncClient instrumented
    ...
    telemetry.shutdown()                          # sends the spans still buffered

Off unless an endpoint is configured (`[telemetry] otlp_endpoint`, or the standard OTEL_EXPORTER_OTLP_ENDPOINT /
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): no provider is installed, so every span is the API's no-op and nothing is
instrumented. Resource: `service.name` = dispersion, `service.instance.id` = the instance name; sampling follows
OTEL_TRACES_SAMPLER (default: every trace, or as its parent says).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor, RequestInfo
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind

from processor.bank.client import IDEMPOTENCY, INTERACTION, OPERATION_EXTENSION
from processor.engine.tracing import TRACEPARENT, current_traceparent
from processor.store import Store

SERVICE_NAME = "dispersion"
ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
TRACES_PATH = "/v1/traces"


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base address (as OTEL_EXPORTER_OTLP_ENDPOINT: `/v1/traces`
    is appended unless it is there)."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def wanted(configured: str | None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether traces are exported: an endpoint in the configuration or in the standard variables."""
    env = os.environ if environ is None else environ
    return bool(configured) or any(env.get(name) for name in ENDPOINT_ENV)


async def _name_bank_span(span: Span, request: RequestInfo) -> None:
    """The httpx span of a bank call, named by the spec's operation, with the correlation id and the key."""
    if not span.is_recording():
        return
    operation = (request.extensions or {}).get(OPERATION_EXTENSION)
    if isinstance(operation, str):
        span.update_name(operation)
        span.set_attribute("dispersion.bank.operation", operation)
    headers = request.headers
    if headers is not None:
        for header, attribute in (
            (INTERACTION, "dispersion.bank.interaction_id"),
            (IDEMPOTENCY, "dispersion.bank.idempotency_key"),
        ):
            value = headers.get(header)
            if value:
                span.set_attribute(attribute, value)


class StoreTracing:
    """The store's observer (processor.store.observe): a span per transaction and per outbox event, only inside a
    recorded trace (a claim or a relay round of its own starts none). An event's span is its producer span:
    its context is stored as the event's `traceparent` header, which the relay publishes with the message."""

    def __init__(self) -> None:
        self._tracer = trace.get_tracer("dispersion.store")

    @contextmanager
    def transaction(self, *, write: bool, dialect: str) -> Iterator[object]:
        """A `store write` / `store read` span."""
        if not trace.get_current_span().is_recording():
            yield None
            return
        name = "store write" if write else "store read"
        with self._tracer.start_as_current_span(
            name, kind=SpanKind.CLIENT, attributes={"db.system.name": dialect}
        ) as span:
            yield span

    @contextmanager
    def event(self, *, topic: str, key: str, status: str | None) -> Iterator[dict[str, str]]:
        """An `outbox publish TOPIC` span; yields its `traceparent` for the event's headers."""
        if not trace.get_current_span().is_recording():
            yield {}
            return
        attributes: dict[str, str] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "create",
            "messaging.destination.name": topic,
            "messaging.kafka.message.key": key,
        }
        if status is not None:
            attributes["dispersion.status"] = status
        with self._tracer.start_as_current_span(
            f"outbox publish {topic}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            text = current_traceparent()
            yield {} if text is None else {TRACEPARENT: text}


@dataclass
class Telemetry:
    """The installed tracer provider and what instruments the instance's parts."""

    provider: TracerProvider

    def observe(self, store: Store) -> None:
        """Trace the store's transactions and outbox events."""
        store.observer = StoreTracing()

    def instrument_bank_http(self, client: httpx.AsyncClient) -> None:
        """Instrument a bank client's httpx client: a span per request, named by the spec operation, and the
        W3C `traceparent` sent to the bank."""
        HTTPXClientInstrumentor.instrument_client(client, tracer_provider=self.provider, request_hook=_name_bank_span)

    def bank_options(self) -> dict[str, Any]:
        """Options for every `BankClient` (through `build_engine(bank_options=...)`)."""
        return {"instrument": self.instrument_bank_http}

    def shutdown(self) -> None:
        """Export what is still buffered and stop."""
        self.provider.shutdown()


def _package_version() -> str:
    try:
        return version("dispersion")
    except PackageNotFoundError:
        return "unknown"


def start_telemetry(
    configured: str | None,
    *,
    instance: str,
    environ: Mapping[str, str] | None = None,
    exporter: SpanExporter | None = None,
) -> Telemetry | None:
    """Install the tracer provider when traces are wanted (see `wanted`), exporting with OTLP/HTTP in batches;
    `exporter` replaces that exporter, spans then exported one by one (the tests' in-memory one). None: off.
    A process has one provider: a second call adds its exporter to the first one's provider."""
    if exporter is None and not wanted(configured, environ):
        return None
    processor: SpanProcessor
    if exporter is None:
        # Without a configured endpoint the exporter reads the standard variables itself.
        otlp = OTLPSpanExporter(endpoint=traces_url(configured)) if configured else OTLPSpanExporter()
        processor = BatchSpanProcessor(otlp)
    else:
        processor = SimpleSpanProcessor(exporter)
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        current.add_span_processor(processor)
        return Telemetry(current)
    resource = Resource.create(
        {"service.name": SERVICE_NAME, "service.instance.id": instance, "service.version": _package_version()}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return Telemetry(provider)
