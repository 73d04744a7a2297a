"""Traces of a batch's life, through the OpenTelemetry API only (the SDK and the exporter are set up, or not,
by the composition layer: processor/cli/telemetry.py). Without a configured tracer provider every call here is
the API's no-op: spans are not recorded, and a W3C `traceparent` received is passed on unchanged.

    with continued("process payroll.batches", traceparent_of(message.headers()), kind=SpanKind.CONSUMER):
        ...                                   # the span continues the producer's trace (a new one without it)
    text = current_traceparent()              # kept with the flow, so steps run later (any instance) continue it

A batch's trace: the consumer's span, the intake's, each step of its flow (`processor.engine.leased`), the
approval link and the redirect (`processor.engine.authorization`), every bank call (the httpx instrumentation,
named by the spec's operation), every store transaction and every outbox event, whose `traceparent` header the
relay publishes with the status message.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

TRACEPARENT = "traceparent"
TRACER_NAME = "dispersion"

_W3C = TraceContextTextMapPropagator()
_tracer = trace.get_tracer(TRACER_NAME)  # a proxy: follows the provider installed later, if any


def current_traceparent() -> str | None:
    """The current span's context as W3C `traceparent` text; None when there is no valid one."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get(TRACEPARENT)


def parent_context(traceparent: str | None) -> Context:
    """A context whose span is the remote parent `traceparent` names; an empty one (a new trace) when it is
    None or not valid W3C text."""
    if not traceparent:
        return Context()
    return _W3C.extract({TRACEPARENT: traceparent}, Context())


def traceparent_of(
    headers: Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None,
) -> str | None:
    """The `traceparent` of Kafka message headers (pairs, or a mapping; None when absent or not text)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    for name, value in pairs:
        if name.lower() == TRACEPARENT and value is not None:
            try:
                return value if isinstance(value, str) else value.decode("ascii")
            except UnicodeDecodeError:
                return None
    return None


@contextmanager
def continued(
    name: str,
    traceparent: str | None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> Iterator[Span]:
    """A current span whose parent is `traceparent` (text kept with a flow, or read from a message): the
    work inside continues that trace, started wherever and whenever it was."""
    with _tracer.start_as_current_span(
        name, context=parent_context(traceparent), kind=kind, attributes=attributes
    ) as span:
        yield span


def tracing_on() -> bool:
    """Whether a tracer provider records spans (the composition layer installed one)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)
