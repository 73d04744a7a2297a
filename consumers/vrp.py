"""The `vrp.mandates` and `vrp.payments` consumers: each record is decoded and stored by the VRP engine (never a
bank call here: the stored mandate or payment is due work that a worker takes); its offset moves after that.

    handlers = vrp_handlers(settings, VrpIntake(vrp))   # vrp: processor.engine.vrp.VrpEngine

The handlers, by physical topic, go to the processor's consumer loop (`consumers.loop.route`, built in
processor/cli/service.py beside the batches' handler).

What happens to one message:

- a new mandate request or payment instruction: stored (a payment is checked against its mandate's limits in
  the same transaction; a refusal is a `LIMIT_EXCEEDED` status event, a normal outcome, not a dead letter);
- a mandate or payment id already stored: nothing changes;
- an invalid request with a readable id: stored as INVALID with its `INVALID` status event, then dead-lettered;
- undecodable bytes, a tombstone, an invalid request without a readable id, a payment for an unknown mandate:
  dead-lettered (the unknown mandate also gets an `INVALID` event on `vrp.status`).

Dead letters of both topics go to the deployment's dead-letter topic with the original topic named in them.
The two topics are not ordered with each other: a producer sends payments once `vrp.status` said AUTHORIZED
(a payment for a mandate still awaiting authorization is parked until it is authorised; one for a mandate never
received is refused as INVALID).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from confluent_kafka import Message
from opentelemetry.trace import SpanKind

from consumers.loop import Accept, Handler, Reject, Retry, Verdict
from consumers.records import decoded
from processor.domain.vrp_requests import InvalidRequestError
from processor.domain.vrp_states import Mandate, Payment
from processor.engine.tracing import continued, traceparent_of
from processor.engine.vrp import VrpEngine
from processor.kafka.settings import KafkaSettings
from processor.kafka.wire import WireCodec, WireSettings
from processor.store import StoreError
from schemas.topics import VRP_MANDATES_TOPIC, VRP_PAYMENTS_TOPIC

log = structlog.get_logger("consumers.vrp")


class VrpIntake:
    """Stores VRP requests through the engine's store-only path, on an event loop of the consumer's thread.
    `wake` is called after something became due (to wake the local worker; it must be thread-safe)."""

    def __init__(self, vrp: VrpEngine, *, wake: Callable[[], None] = lambda: None) -> None:
        self.vrp = vrp
        self.wake = wake
        self._runner = asyncio.Runner()

    def mandate(self, record: Mapping[str, Any]) -> Accept | Reject:
        """Store a mandate request; Reject (to dead-letter) when it is invalid."""
        try:
            outcome = self._runner.run(self.vrp.submit_mandate(record, advance=False))
        except InvalidRequestError as exc:
            return Reject(f"invalid: {exc}")
        mandate = outcome.mandate
        if mandate.state == Mandate.INVALID:
            if outcome.created or outcome.problems:
                return Reject(f"invalid: {'; '.join(outcome.problems) or mandate.last_error}", mandate.mandate_id)
            # Valid today (say, a replay after the cause was fixed), but its id was refused before, for good.
            return Reject(
                f"invalid: mandate {mandate.mandate_id} was already refused as INVALID ({mandate.last_error}); "
                "send it again under a new mandate id",
                mandate.mandate_id,
            )
        if not outcome.created:
            return Accept("duplicate")
        self.wake()
        return Accept()

    def payment(self, record: Mapping[str, Any]) -> Accept | Reject:
        """Store a payment instruction; Reject (to dead-letter) when it is invalid or its mandate unknown."""
        try:
            outcome = self._runner.run(self.vrp.submit_payment(record, advance=False))
        except InvalidRequestError as exc:
            return Reject(f"invalid: {exc}")
        payment = outcome.payment
        if payment is None:
            return Reject(f"invalid: {outcome.reason}", record.get("mandate_id"))
        if payment.state == Payment.INVALID:
            return Reject(f"invalid: {outcome.reason or payment.last_error}", payment.mandate_id)
        if not outcome.created:
            return Accept("duplicate")
        self.wake()
        return Accept(str(payment.state).lower())

    def close(self) -> None:
        """Close the event loop."""
        self._runner.close()


class _RecordHandler:
    """Decodes one topic's records with its schema and hands them to `take`."""

    def __init__(
        self,
        logical_topic: str,
        take: Callable[[Mapping[str, Any]], Accept | Reject],
        wire: WireSettings | None = None,
    ) -> None:
        self._codec = WireCodec(logical_topic, wire)  # reads both wire formats
        self._take = take

    def __call__(self, message: Message) -> Verdict:
        """The record taken under a span `process TOPIC` continuing the message's `traceparent` (a new trace
        without one); the mandate or payment keeps that context, so its steps and status events continue it."""
        with continued(f"process {message.topic()}", traceparent_of(message.headers()), kind=SpanKind.CONSUMER):
            return self._handle(message)

    def _handle(self, message: Message) -> Verdict:
        record = decoded(self._codec, message)
        if isinstance(record, Reject | Retry):
            return record
        try:
            verdict = self._take(record)
        except StoreError as exc:
            return Retry(str(exc))
        log.info("vrp_request_consumed", topic=message.topic(), outcome=getattr(verdict, "outcome", "dead_letter"))
        return verdict


def vrp_handlers(settings: KafkaSettings, intake: VrpIntake) -> dict[str, Handler]:
    """Handlers of the deployment's `vrp.mandates` and `vrp.payments` topics, by physical topic name (for
    `consumers.loop.route`)."""
    return {
        settings.topic(VRP_MANDATES_TOPIC): _RecordHandler(VRP_MANDATES_TOPIC, intake.mandate, settings.wire),
        settings.topic(VRP_PAYMENTS_TOPIC): _RecordHandler(VRP_PAYMENTS_TOPIC, intake.payment, settings.wire),
    }
