"""An OTLP/HTTP receiver on loopback for the trace tests: the processor's exporter posts its spans to it, as to a
collector (protobuf `ExportTraceServiceRequest` on `/v1/traces`), and the test reads them back."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass(frozen=True)
class ExportedSpan:
    """One span as a collector received it."""

    name: str
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_span_id: str  # "" for a root
    resource: dict[str, str]
    attributes: dict[str, str]


class _Receiver(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, bytes]]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@dataclass
class Collector:
    """The receiver's address and what it was sent."""

    endpoint: str
    received: list[tuple[str, bytes]]

    def spans(self) -> list[ExportedSpan]:
        """Every span received so far (each request must have gone to `/v1/traces`)."""
        found: list[ExportedSpan] = []
        for path, body in self.received:
            assert path == "/v1/traces", path
            for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        found.append(
                            ExportedSpan(
                                span.name,
                                span.trace_id.hex(),
                                span.span_id.hex(),
                                span.parent_span_id.hex(),
                                resource,
                                {a.key: a.value.string_value for a in span.attributes},
                            )
                        )
        return found


@pytest.fixture(name="collector")
def collector_fixture() -> Iterator[Collector]:
    """An OTLP/HTTP receiver on a free loopback port, stopped after the test."""
    received: list[tuple[str, bytes]] = []
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Collector(f"http://127.0.0.1:{server.server_address[1]}", received)
    finally:
        server.shutdown()
        server.server_close()
