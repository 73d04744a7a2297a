"""The `payroll.batches` consumer: each batch event is decoded and handed to the engine's intake, which stores it
(RECEIVED, or INVALID with its status event in the same transaction); its offset moves only after that commit.

    intake = EngineIntake(store, integrations=config.integrations)
    handler = BatchHandler(intake, wire=settings.wire)

The handler is one of the processor's consumer loop (`consumers.loop.AtLeastOnceConsumer`, built in
processor/cli/service.py with the VRP topics' handlers beside it).

What happens to one message:

- a new valid batch: flow RECEIVED (the worker takes it from there; the bank is never called here); the offset
  moves after that commit;
- a batch id already stored with the same content (a redelivery, a resubmission): nothing changes;
- a new invalid batch: flow INVALID and an `INVALID` status event (outbox, same transaction), then a dead letter;
  the offset moves after the dead letter's acknowledgement;
- a batch id already stored as INVALID: a dead letter again (a crash may have lost the first one);
- a batch id already stored with different content: nothing changes (never paid twice) and a dead letter says so
  (never silently dropped);
- undecodable bytes, a tombstone, no readable batch id: a dead letter only (no batch id to publish a status for).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import structlog
from confluent_kafka import Message
from opentelemetry.trace import SpanKind

import schemas
from consumers.loop import Accept, Reject, Retry
from consumers.loop import Verdict as LoopVerdict
from processor.domain.file_states import FlowState
from processor.domain.roles import Controls
from processor.domain.schedule import Calendar
from processor.domain.time import Clock, SystemClock
from processor.domain.validation import DEFAULT_LIMITS, ValidationLimits
from processor.engine.intake import accept_batch, prepare_batch
from processor.engine.tracing import continued, traceparent_of
from processor.store import Store, StoreError
from schemas.topics import BATCHES_TOPIC

log = structlog.get_logger("consumers.batches")

Verdict = Literal["accepted", "duplicate", "invalid", "conflict"]


@dataclass(frozen=True)
class IntakeOutcome:
    """What the intake did with one batch document."""

    verdict: Verdict
    batch_id: str | None
    reason: str | None = None


class BatchIntake(Protocol):
    """Durably accepts a batch document (`processor.domain.batch` shape) and says what became of it. Must not call the
    bank; raises `StoreError` when the store cannot be reached (the handler answers Retry)."""

    def __call__(self, document: Mapping[str, Any]) -> IntakeOutcome: ...


class EngineIntake:
    """`BatchIntake` over the engine's `processor.engine.intake.accept_batch` (one event loop per instance, so it
    can be called from the consumer's thread)."""

    def __init__(
        self,
        store: Store,
        *,
        integrations: Collection[str] | None = None,
        limits: ValidationLimits = DEFAULT_LIMITS,
        clock: Clock | None = None,
        calendars: Mapping[str, Calendar] | None = None,
        controls: Controls | None = None,
    ) -> None:
        self.store = store
        self.controls = controls  # the changed-account review (`[controls]`); None: none
        self.integrations = None if integrations is None else frozenset(integrations)
        self.limits = limits
        self.calendars = calendars  # each integration's time zone, for scheduled batches (execute_on)
        self.clock: Clock = clock or SystemClock()
        self._runner = asyncio.Runner()

    def __call__(self, document: Mapping[str, Any]) -> IntakeOutcome:
        """Store the batch (or recognise it) and classify the result."""
        now = self.clock.now()
        result = self._runner.run(
            accept_batch(
                self.store,
                document,
                now=now,
                integrations=self.integrations,
                limits=self.limits,
                calendars=self.calendars,
                controls=self.controls,
            )
        )
        batch_id = result.flow.batch_id if result.flow is not None else None
        if result.flow is None or (result.created and result.status == FlowState.INVALID):
            return IntakeOutcome("invalid", batch_id, result.reason)
        if result.created:
            return IntakeOutcome("accepted", batch_id)
        if result.status == FlowState.INVALID:
            # Stored as INVALID before: dead-letter again (the first dead letter may have been lost in a crash).
            again = prepare_batch(
                document, integrations=self.integrations, limits=self.limits, now=now, calendars=self.calendars
            ).reason
            return IntakeOutcome("invalid", batch_id, again or f"batch {batch_id} was already refused as INVALID")
        if not result.same_document:
            return IntakeOutcome(
                "conflict",
                batch_id,
                f"batch_id {batch_id} was already received with different content; this event changed nothing",
            )
        return IntakeOutcome("duplicate", batch_id)

    def close(self) -> None:
        """Close the event loop."""
        self._runner.close()


class BatchHandler:
    """Decodes a `payroll.batches` message and hands it to the intake (see the module docstring)."""

    def __init__(self, intake: BatchIntake, *, wire: schemas.WireSettings | None = None) -> None:
        self.intake = intake
        self._codec = schemas.WireCodec(BATCHES_TOPIC, wire)  # reads both wire formats

    def __call__(self, message: Message) -> LoopVerdict:
        """Accept, or reject with the reason (the loop dead-letters it). A span `process TOPIC` continues the
        trace of the message's `traceparent` header (a new trace without one); the flow keeps its context."""
        topic = message.topic() or BATCHES_TOPIC
        attributes: dict[str, str | int] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.destination.name": topic,
            "messaging.destination.partition.id": str(message.partition()),
            "messaging.kafka.offset": int(message.offset() or 0),
        }
        with continued(
            f"process {topic}", traceparent_of(message.headers()), kind=SpanKind.CONSUMER, attributes=attributes
        ) as span:
            verdict = self._handle(message)
            span.set_attribute("dispersion.verdict", type(verdict).__name__)
            return verdict

    def _handle(self, message: Message) -> LoopVerdict:
        value = message.value()
        if value is None:
            return Reject("tombstone: the message has no value")
        try:
            record = self._codec.decode(value, message.topic())
        except schemas.DecodeError as exc:
            return Reject(f"undecodable: {exc}")
        except schemas.RegistryUnavailableError as exc:
            return Retry(f"schema registry unavailable: {exc}")
        try:
            outcome = self.intake(record)  # the decoded record is the engine's batch document
        except StoreError as exc:
            return Retry(str(exc))
        if outcome.verdict in ("invalid", "conflict"):
            return Reject(f"{outcome.verdict}: {outcome.reason}", outcome.batch_id)
        key = message.key()
        if key is not None and outcome.batch_id is not None and key != outcome.batch_id.encode("utf-8"):
            log.warning("batch_key_mismatch", batch_id=outcome.batch_id)  # order per batch relies on the key
        log.info("batch_consumed", batch_id=outcome.batch_id, outcome=outcome.verdict)
        return Accept(outcome.verdict)
