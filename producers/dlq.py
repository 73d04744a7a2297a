"""Dead letters: a message the processor cannot accept, kept whole on `payroll.batches.dlq`, acknowledged before
the consumer moves its offset past it.

    publisher = DeadLetterPublisher(
        producer_config(settings, "dlq"), topic=settings.topic(DLQ_TOPIC), wire=settings.wire
    )
    publisher.publish(message, reason="undecodable: ...", batch_id=None)   # returns once the broker has it
    publisher.close()

The record (schema `payroll_batches_dlq`) holds the original value, key and headers byte for byte, where the message
was read (topic, partition, offset), its timestamp, the reason and the batch id when it could be read. The
dead letter's key is the original key, so dead letters of one batch stay in order too. The dead letter is written in
the deployment's wire format (`WireCodec`).

A fatal producer error (librdkafka's: the idempotent producer fenced, out of sequence) fails that dead letter
(`DeadLetterError`: the consumer sends it again later) and the next one goes through a new producer made
in-process; the consumer never dies of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Message, Producer

from processor.kafka.clients import new_producer
from processor.kafka.wire import RegistryUnavailableError, WireCodec, WireSettings
from schemas.topics import DLQ_TOPIC

log = structlog.get_logger("producers.dlq")

MAX_REASON_CHARS = 16_000  # a reason listing 100,000 bad rows is cut; the count stays in its first line


class DeadLetterError(RuntimeError):
    """The dead letter was not acknowledged by the broker (in time): the offset must not move."""


class SourceMessage(Protocol):
    """What a dead letter needs of the consumed message (confluent_kafka.Message has all of it)."""

    def value(self) -> bytes | None: ...
    def key(self) -> bytes | None: ...
    def headers(self) -> Sequence[tuple[str, bytes | None]] | None: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...


def _as_bytes(value: str | bytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return value.encode("utf-8")


def dead_letter_record(
    message: SourceMessage, reason: str, *, batch_id: str | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """The DeadLetter record for a consumed message (pure)."""
    kind, stamp = message.timestamp()
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 20] + " ... (truncated)"
    return {
        "original_value": _as_bytes(message.value()),
        "original_key": _as_bytes(message.key()),
        "original_headers": [{"key": key, "value": _as_bytes(value)} for key, value in message.headers() or []],
        "topic": message.topic() or "",
        "partition": message.partition() or 0,
        "offset": message.offset() or 0,
        "original_timestamp": (
            None if kind == TIMESTAMP_NOT_AVAILABLE else datetime.fromtimestamp(stamp / 1000, tz=UTC)
        ),
        "reason": reason,
        "batch_id": batch_id,
        "occurred_at": now or datetime.now(UTC),
    }


REPLAY_OF_HEADER = "dispersion-replay-of"  # set by producers/replay.py on a re-published dead letter


@dataclass(frozen=True)
class DeadLetterReceipt:
    """An acknowledged dead letter: where it sits (`dlq`) and where its message was read (`source`), as
    (topic, partition, offset); `replay_of` names the dead letter the message was a replay of, if it was one."""

    dlq: tuple[str, int, int]
    source: tuple[str, int, int]
    batch_id: str | None
    reason: str
    replay_of: str | None


def replay_of_header(message: SourceMessage) -> str | None:
    """The `dispersion-replay-of` header of a message (the dead letter it re-publishes), or None."""
    for key, value in message.headers() or []:
        if key == REPLAY_OF_HEADER and value is not None:
            return (value if isinstance(value, bytes) else str(value).encode()).decode("utf-8", errors="replace")
    return None


class DeadLetterPublisher:
    """Publishes dead letters with an idempotent producer and waits for each acknowledgement; with `recorder`, each
    acknowledged dead letter is also recorded (the admin API lists them from the store). A recorder that fails
    fails the publication: the message is dead-lettered again later, and recorded then."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        topic: str = DLQ_TOPIC,
        timeout: float = 30.0,
        wire: WireSettings | None = None,
        recorder: Callable[[DeadLetterReceipt], None] | None = None,
        producer_factory: Callable[[dict[str, Any]], Producer] | None = None,
    ) -> None:
        self.topic = topic
        self.timeout = timeout
        self.recorder = recorder
        self._codec = WireCodec(DLQ_TOPIC, wire)
        # A delivery report always comes within the timeout (success or failure), so a dead letter that timed out
        # cannot still be delivered later behind the consumer's back.
        self._config: dict[str, Any] = {"message.timeout.ms": int(timeout * 1000), **config, "error_cb": self._on_error}
        self._factory = producer_factory or new_producer
        self._fatal: KafkaError | None = None
        self._producer = self._factory(self._config)

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal = error

    def _renew_if_broken(self) -> None:
        # A fatal error (e.g. the idempotent producer fenced) leaves the producer useless: make a new one in-process.
        # The dead letter being sent may have been written all the same; the consumer sends it again (a duplicate
        # dead letter, recorded once: the record is keyed by where the message was read).
        if self._fatal is None:
            return
        log.error("dead_letter_producer_fatal", error=str(self._fatal))
        with contextlib.suppress(KafkaException, RuntimeError):
            self._producer.purge()
            self._producer.poll(0)
        self._producer = self._factory(self._config)
        self._fatal = None

    def publish(self, message: SourceMessage, reason: str, *, batch_id: str | None = None) -> None:
        """Send the dead letter and return once the broker acknowledged it; `DeadLetterError` otherwise."""
        record = dead_letter_record(message, reason, batch_id=batch_id)
        try:
            value = self._codec.encode(record, self.topic)
        except RegistryUnavailableError as exc:  # the consumer retries the message: nothing is skipped
            raise DeadLetterError(f"dead letter to {self.topic} not written: {exc}") from exc
        outcome: list[tuple[KafkaError | None, Message]] = []
        headers: list[tuple[str, str | bytes | None]] = [("reason", reason[:200].encode("utf-8"))]
        if batch_id is not None:
            headers.append(("batch_id", batch_id.encode("utf-8")))
        self._renew_if_broken()
        try:
            self._producer.produce(
                self.topic,
                value=value,
                key=record["original_key"],
                headers=headers,
                on_delivery=lambda err, msg: outcome.append((err, msg)),
            )
            self._producer.flush(self.timeout + 5)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is not None and error.fatal():
                self._fatal = error
            raise DeadLetterError(f"dead letter to {self.topic} not written: {exc}") from exc
        if not outcome:
            raise DeadLetterError(f"dead letter to {self.topic} not acknowledged within {self.timeout} s")
        if outcome[0][0] is not None:
            if outcome[0][0].fatal():
                self._fatal = outcome[0][0]
            raise DeadLetterError(f"dead letter to {self.topic} failed: {outcome[0][0]}")
        if self.recorder is not None:
            delivered = outcome[0][1]
            receipt = DeadLetterReceipt(
                (self.topic, delivered.partition() or 0, delivered.offset() or 0),
                (record["topic"], record["partition"], record["offset"]),
                batch_id,
                record["reason"],
                replay_of_header(message),
            )
            try:
                self.recorder(receipt)
            except Exception as exc:
                raise DeadLetterError(f"dead letter published but not recorded: {exc}") from exc
        log.warning(
            "dead_lettered",
            topic=record["topic"],
            partition=record["partition"],
            offset=record["offset"],
            batch_id=batch_id,
            reason=reason[:300],
        )

    def close(self, timeout: float = 10.0) -> None:
        """Deliver anything still queued."""
        self._producer.flush(timeout)
