"""Replaying a dead letter: its original bytes and key re-published to the topic it was read from, with headers
that name the dead letter and who replayed it, when and why; recorded in the store before and after.

    replayer = DeadLetterReplayer(settings)
    done = replay_dead_letter(store, replayer, letter_id, by="ana", reason="integration configured", now=now)

- The dead letter is read back from the DLQ topic at the place the store recorded (the bytes are not copied into
  the database); its original headers are kept, earlier replay headers replaced.
- Headers added: `dispersion-replay-of` (`dlq-topic/partition/offset`), `dispersion-replayed-by`,
  `dispersion-replayed-at` (UTC, milliseconds), `dispersion-replay-reason`. When the replayed message is
  dead-lettered again, its dead letter records `replay_of`, so the chain can be followed.
- A dead letter already replayed (or being replayed) is refused unless `force`; the replay record is written,
  under the dead letter's row lock, before the message is produced, and completed with where it landed (or
  removed when the broker did not take it: nothing was re-published).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaError, Message, TopicPartition

import schemas
from processor.domain.time import iso_ms
from processor.kafka.clients import new_consumer, new_producer, producer_config, reader_config
from processor.kafka.settings import KafkaSettings
from processor.store import Store, StoreTx
from processor.store.operator import DeadLetterRow, ReplayRow
from producers.dlq import REPLAY_OF_HEADER, DeadLetterReceipt
from schemas.topics import DLQ_TOPIC

REPLAY_HEADERS = (REPLAY_OF_HEADER, "dispersion-replayed-by", "dispersion-replayed-at", "dispersion-replay-reason")


class ReplayError(Exception):
    """The replay was refused or did not happen; `status`: 404 unknown dead letter, 409 refused or failed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Replayed:
    """A replay that the broker acknowledged."""

    letter: DeadLetterRow
    replay: ReplayRow
    partition: int
    offset: int


class DeadLetterReplayer:
    """Reads a dead letter back from the DLQ topic and re-publishes its message (clients of the deployment's
    settings: the producer is the project's idempotent one, with room for a message as large as a batch)."""

    def __init__(self, settings: KafkaSettings, *, timeout: float = 15.0) -> None:
        self.settings = settings
        self.timeout = timeout
        self._codec = schemas.Codec(DLQ_TOPIC)

    def read(self, topic: str, partition: int, offset: int) -> dict[str, Any]:
        """The DeadLetter record at that place; `ReplayError` when the topic no longer holds it (retention)."""
        consumer = new_consumer(reader_config(self.settings, "replay", **{"enable.partition.eof": True}))
        try:
            consumer.assign([TopicPartition(topic, partition, offset)])
            message = consumer.poll(self.timeout)
        finally:
            consumer.close()
        if message is None or message.error() is not None or message.offset() != offset:
            raise ReplayError(409, f"dead letter {topic}/{partition}/{offset} can no longer be read from Kafka")
        value = message.value()
        try:
            return self._codec.decode(value if value is not None else b"")
        except schemas.DecodeError as exc:
            raise ReplayError(409, f"dead letter {topic}/{partition}/{offset} cannot be decoded: {exc}") from None

    def publish(self, record: Mapping[str, Any], headers: list[tuple[str, str | bytes | None]]) -> tuple[int, int]:
        """Produce the original value and key to the original topic; (partition, offset) once acknowledged."""
        producer = new_producer(
            producer_config(self.settings, "replay", **{"message.timeout.ms": int(self.timeout * 1000)})
        )
        outcome: list[tuple[KafkaError | None, Message]] = []
        producer.produce(
            record["topic"],
            partition=int(record["partition"]),  # where the original was read, whatever partitioned it then
            value=record["original_value"],
            key=record["original_key"],
            headers=headers,
            on_delivery=lambda err, msg: outcome.append((err, msg)),
        )
        producer.flush(self.timeout + 5)
        if not outcome or outcome[0][0] is not None:
            why = outcome[0][0] if outcome else "no acknowledgement"
            raise ReplayError(409, f"Kafka did not take the replay ({why}); nothing was re-published")
        return outcome[0][1].partition() or 0, outcome[0][1].offset() or 0


def replay_headers(
    record: Mapping[str, Any], letter: DeadLetterRow, *, by: str, reason: str, now: datetime
) -> list[tuple[str, str | bytes | None]]:
    """The original headers (earlier replay headers left out) and the four replay headers."""
    kept: list[tuple[str, str | bytes | None]] = [
        (str(h["key"]), h["value"]) for h in record.get("original_headers") or [] if h["key"] not in REPLAY_HEADERS
    ]
    added = (letter.coordinates, by, iso_ms(now), reason)
    kept.extend((key, value.encode("utf-8")) for key, value in zip(REPLAY_HEADERS, added, strict=True))
    return kept


def replay_dead_letter(
    store: Store,
    replayer: DeadLetterReplayer,
    letter_id: int,
    *,
    by: str,
    reason: str,
    now: datetime,
    force: bool = False,
    audit: Callable[[StoreTx, Replayed], None] | None = None,
) -> Replayed:
    """Replay one recorded dead letter (see the module docstring). `audit` writes the replay's audit entry in the
    transaction that records where it landed."""

    def begin(tx: StoreTx) -> tuple[DeadLetterRow, ReplayRow]:
        letter = tx.operator.dead_letter(letter_id, for_update=True)
        if letter is None:
            raise ReplayError(404, f"dead letter {letter_id} is unknown")
        earlier = tx.operator.replays(letter_id)
        if earlier and not force:
            last = earlier[-1]
            state = "being replayed" if last.target_offset is None else "already replayed"
            raise ReplayError(
                409,
                f"dead letter {letter_id} is {state} (by {last.replayed_by} at {iso_ms(last.replayed_at)}: "
                f"{last.reason}); replay it again only with force",
            )
        replay = tx.operator.begin_replay(letter_id, by=by, reason=reason, target_topic=letter.source_topic, now=now)
        return letter, replay

    letter, replay = store.run(begin)
    try:
        record = replayer.read(letter.dlq_topic, letter.dlq_partition, letter.dlq_offset)
        partition, offset = replayer.publish(record, replay_headers(record, letter, by=by, reason=reason, now=now))
    except BaseException:
        store.run(lambda tx: tx.operator.drop_replay(replay.id))
        raise
    done = Replayed(letter, replay, partition, offset)

    def complete(tx: StoreTx) -> None:
        tx.operator.complete_replay(replay.id, partition, offset)
        if audit is not None:
            audit(tx, done)

    store.run(complete)
    return done


def store_recorder(store: Store, now: Callable[[], datetime]) -> Callable[[DeadLetterReceipt], None]:
    """The dead-letter publisher's recorder: each acknowledged dead letter recorded in the store."""

    def record(receipt: DeadLetterReceipt) -> None:
        store.run(
            lambda tx: tx.operator.record_dead_letter(
                dlq=receipt.dlq,
                source=receipt.source,
                batch_id=receipt.batch_id,
                reason=receipt.reason,
                replay_of=receipt.replay_of,
                now=now(),
            )
        )

    return record
