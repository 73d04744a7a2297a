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
from datetime import datetime
from typing import Any, Literal, Protocol

import structlog
from confluent_kafka import Message
from opentelemetry.trace import SpanKind

from consumers.loop import Accept, Reject, Retry
from consumers.loop import Verdict as LoopVerdict
from consumers.records import decoded
from processor.domain.difference import batch_difference
from processor.domain.duplicates import ALLOW_DUPLICATE_HEADER
from processor.domain.file_states import FlowState
from processor.domain.roles import Controls
from processor.domain.schedule import Calendar
from processor.domain.time import Clock, SystemClock
from processor.domain.validation import DEFAULT_LIMITS, ValidationLimits
from processor.engine.intake import DocumentReleasedError, Guard, Handed, IntakeResult, accept_batch, prepare_batch
from processor.engine.tracing import continued, traceparent_of
from processor.kafka.wire import WireCodec, WireSettings
from processor.store import Flow, Store, StoreError
from processor.store.lifecycle import Verdict as Verdict_
from producers.dlq import REPLAY_OF_HEADER
from schemas.topics import BATCHES_TOPIC

log = structlog.get_logger("consumers.batches")

Verdict = Literal["accepted", "duplicate", "invalid", "conflict", "held"]


@dataclass(frozen=True)
class IntakeOutcome:
    """What the intake did with one batch document."""

    verdict: Verdict
    batch_id: str | None
    reason: str | None = None
    attempt: int | None = None


@dataclass(frozen=True)
class MessageRef:
    """Where a batch message was read, and whether it is a replay of a dead letter (`dispersion-replay-of`)."""

    topic: str
    partition: int
    offset: int
    replayed: bool = False
    allow_duplicate_of: str | None = None  # `submit --allow-duplicate-of ID`

    @classmethod
    def of(cls, message: Message) -> MessageRef:
        """Where `message` was read and what its headers say."""
        headers: dict[str, str] = {}
        for header in message.headers() or []:
            key, value = str(header[0]), header[1]
            if key in (REPLAY_OF_HEADER, ALLOW_DUPLICATE_HEADER):
                raw = value if isinstance(value, bytes) else str(value or "").encode()
                headers[key] = raw.decode("utf-8", "replace")[:200]
        return cls(
            message.topic() or BATCHES_TOPIC,
            message.partition() or 0,
            message.offset() or 0,
            REPLAY_OF_HEADER in headers,
            headers.get(ALLOW_DUPLICATE_HEADER) or None,
        )


class StoredMeanwhileError(Exception):
    """A batch taken in as new was stored by another instance meanwhile, and its verdict needs the document the
    intake already let go of: the message is read again (it is then a known batch, whose document is kept)."""

    def __init__(self, batch_id: str | None) -> None:
        super().__init__(f"batch {batch_id} was stored by another instance meanwhile; reading it again")
        self.batch_id = batch_id


class BatchIntake(Protocol):
    """Durably accepts a batch document (`processor.domain.batch` shape) and says what became of it. Must not call the
    bank; raises `StoreError` when the store cannot be reached (the handler answers Retry). `message`: where it
    was read (its verdict is kept for `dispersion submit`), and whether it is a replay."""

    def __call__(self, document: Handed, *, message: MessageRef | None = None) -> IntakeOutcome: ...


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
        guard: Guard | None = None,
        controls: Controls | None = None,
    ) -> None:
        self.store = store
        self.controls = controls  # the changed-account review (`[controls]`); None: none
        self.integrations = None if integrations is None else frozenset(integrations)
        self.limits = limits
        self.calendars = calendars  # each integration's time zone, for scheduled batches (execute_on)
        self.guard = guard  # the duplicate-payroll guard (None: off)
        self.clock: Clock = clock or SystemClock()
        self._runner = asyncio.Runner()

    def __call__(self, document: Handed, *, message: MessageRef | None = None) -> IntakeOutcome:
        """Store the batch (or recognise it), classify the result and keep the verdict where `message` was read.
        The document is handed over: a new batch's is let go of before its INSERT (`Handed`)."""
        now = self.clock.now()
        result = self._runner.run(
            accept_batch(
                self.store,
                document,
                now=now,
                integrations=self.integrations,
                limits=self.limits,
                calendars=self.calendars,
                guard=self.guard
                if self.guard is None or message is None
                else self.guard.allowing(message.allow_duplicate_of),
                replayed=message is not None and message.replayed,
                controls=self.controls,
            )
        )
        outcome = self._classify(result, document, now)
        if message is not None:
            verdict = Verdict_(
                message.topic,
                message.partition,
                message.offset,
                outcome.batch_id,
                outcome.verdict,
                outcome.reason,
                outcome.attempt,
                now,
            )
            self.store.run(lambda tx: tx.lifecycle.record_verdict(verdict))
        return outcome

    def _classify(self, result: IntakeResult, handed: Handed, now: datetime) -> IntakeOutcome:
        flow = result.flow
        batch_id = flow.batch_id if flow is not None else None
        attempt = flow.attempt if flow is not None else None
        if flow is None or (result.created and result.status == FlowState.INVALID):
            return IntakeOutcome("invalid", batch_id, result.reason, attempt)
        if result.created:
            if result.held is not None:
                return IntakeOutcome("held", batch_id, result.held, attempt)
            return IntakeOutcome("accepted", batch_id, "a new attempt" if result.restarted else None, attempt)
        if result.status != FlowState.INVALID and result.same_document:
            return IntakeOutcome("duplicate", batch_id, f"attempt {flow.attempt}: {flow.state}", attempt)
        try:
            document = handed.document  # a known batch: the intake kept it
        except DocumentReleasedError:
            # Taken in as a new batch, so its document was let go of, but another instance stored the same id
            # meanwhile (two members of the group during a rebalance): read again, it is a known batch then.
            raise StoredMeanwhileError(batch_id) from None
        if result.status == FlowState.INVALID:
            # Stored as INVALID before: dead-letter again (the first dead letter may have been lost in a crash).
            again = prepare_batch(
                document, integrations=self.integrations, limits=self.limits, now=now, calendars=self.calendars
            ).reason
            return IntakeOutcome(
                "invalid", batch_id, again or f"batch {batch_id} was already refused as INVALID", attempt
            )
        if not result.same_document:
            difference = self._difference(flow, document)
            return IntakeOutcome(
                "conflict",
                batch_id,
                f"batch_id {batch_id} was already received with different content ({difference}); this event "
                f"changed nothing{_resubmit_advice(flow)}",
                attempt,
            )
        raise AssertionError("unreachable: a known batch is INVALID, another document or the same one")

    def _difference(self, flow: Flow, document: Mapping[str, Any]) -> str:
        stored = self.store.run(lambda tx: tx.flows.payload_document(flow.batch_id), write=False)
        return batch_difference(stored, document)

    def close(self) -> None:
        """Close the event loop."""
        self._runner.close()


def _resubmit_advice(flow: Flow) -> str:
    if flow.state in (FlowState.AWAITING_AUTHORIZATION, FlowState.RECEIVED, FlowState.CONSENT_CREATED):
        return (
            f"; to replace it, withdraw it first (dispersion withdraw --batch {flow.batch_id} --reason TEXT), "
            "then submit again"
        )
    return ""


class BatchHandler:
    """Decodes a `payroll.batches` message and hands it to the intake (see the module docstring)."""

    def __init__(self, intake: BatchIntake, *, wire: WireSettings | None = None) -> None:
        self.intake = intake
        self._codec = WireCodec(BATCHES_TOPIC, wire)  # reads both wire formats

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
        record = decoded(self._codec, message)
        if isinstance(record, Reject | Retry):
            return record
        where = MessageRef.of(message)
        handed = Handed(record)  # the decoded record is the engine's batch document, handed over: held by it alone
        del record
        try:
            outcome = self.intake(handed, message=where)
        except StoreError as exc:
            return Retry(str(exc))
        except StoredMeanwhileError as exc:
            return Retry(str(exc))
        if outcome.verdict in ("invalid", "conflict"):
            return Reject(f"{outcome.verdict}: {outcome.reason}", outcome.batch_id)
        key = message.key()
        if key is not None and outcome.batch_id is not None and key != outcome.batch_id.encode("utf-8"):
            log.warning("batch_key_mismatch", batch_id=outcome.batch_id)  # order per batch relies on the key
        log.info("batch_consumed", batch_id=outcome.batch_id, outcome=outcome.verdict)
        return Accept(outcome.verdict)
