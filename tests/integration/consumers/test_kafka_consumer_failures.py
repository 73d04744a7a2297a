"""The at-least-once consumer loop (`consumers.loop`) when its handler fails, on a real broker:

- the intake raises `StoreError` (the database is down): the message is retried in place, however often, never
  dead-lettered and never skipped; its offset stays uncommitted until the intake finally accepts it, once;
- the intake raises anything else, every time (a bug this message triggers): after `poison_attempts` attempts
  the message is dead-lettered whole (bytes, key, headers, where it was read) with the exception as the reason,
  its offset moves only after the dead letter, and the messages behind it are consumed.

The intake is an in-process fake (the loop's collaborator); the broker, the consumer group, the dead-letter
producer and the committed offsets are real.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka_layer_support import (
    batch_record,
    committed,
    new_topic,
    poll_until,
    produce,
    read_topic,
    settings_for,
    unique,
)

import schemas
from consumers.batches import BatchHandler, IntakeOutcome, MessageRef
from consumers.loop import AtLeastOnceConsumer
from processor.engine.intake import Handed
from processor.kafka.clients import consumer_config, producer_config
from processor.kafka.settings import KafkaSettings
from processor.store import StoreError
from producers.dlq import DeadLetterPublisher, SourceMessage
from schemas.topics import BATCHES_TOPIC, DLQ_TOPIC

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


class FlakyIntake:
    """A batch intake that fails for chosen batch ids: `down[batch_id]` times with `StoreError` (then accepts),
    or always with `bugs[batch_id]` (an unexpected exception). Every call and every acceptance is recorded."""

    def __init__(self, *, down: Mapping[str, int] | None = None, bugs: Mapping[str, Exception] | None = None) -> None:
        self.down = dict(down or {})
        self.bugs = dict(bugs or {})
        self.calls: list[str] = []
        self.accepted: list[str] = []

    def __call__(self, document: Handed, *, message: MessageRef | None = None) -> IntakeOutcome:
        batch_id = str(document.document["batch_id"])
        self.calls.append(batch_id)
        if batch_id in self.bugs:
            raise self.bugs[batch_id]
        if self.down.get(batch_id, 0) > 0:
            self.down[batch_id] -= 1
            raise StoreError("cannot connect to postgresql://db/dispersion: connection refused")
        self.accepted.append(batch_id)
        return IntakeOutcome("accepted", batch_id)

    def count(self, batch_id: str) -> int:
        return self.calls.count(batch_id)


class RecordingSink:
    """The real dead-letter publisher, noting for each dead letter the group's committed offsets at the moment it
    was published (they must not have moved past the message yet)."""

    def __init__(self, publisher: DeadLetterPublisher, settings: KafkaSettings, topic: str) -> None:
        self.publisher = publisher
        self.settings = settings
        self.topic = topic
        self.published: list[tuple[int, str, dict[int, int]]] = []  # (offset, reason, committed offsets then)

    def publish(self, message: SourceMessage, reason: str, *, batch_id: str | None = None) -> None:
        seen = committed(self.settings.bootstrap, self.settings.group_id, self.topic, partitions=1)
        self.publisher.publish(message, reason, batch_id=batch_id)
        self.published.append((message.offset() or 0, reason, seen))


@pytest.fixture
def dlq(kafka_bootstrap: str) -> str:
    return new_topic(kafka_bootstrap, "dlq", partitions=1)


@pytest.fixture
def batches(kafka_bootstrap: str) -> str:
    return new_topic(kafka_bootstrap, "batches", partitions=1)  # one partition: the order below is the order read


@pytest.fixture
def settings(kafka_bootstrap: str, batches: str, dlq: str) -> KafkaSettings:
    return settings_for(kafka_bootstrap, {BATCHES_TOPIC: batches, DLQ_TOPIC: dlq})


@pytest.fixture
def sink(settings: KafkaSettings, batches: str, dlq: str) -> Iterator[RecordingSink]:
    publisher = DeadLetterPublisher(producer_config(settings, "dlq"), topic=dlq, timeout=10.0)
    yield RecordingSink(publisher, settings, batches)
    publisher.close()


def loop_consumer(
    settings: KafkaSettings, intake: FlakyIntake, sink: RecordingSink, *, poison_attempts: int
) -> AtLeastOnceConsumer:
    """The loop as `kafka_layer_support.batch_consumer` builds it, with the recording dead-letter sink."""
    return AtLeastOnceConsumer(
        consumer_config(settings, "batches"),
        [settings.topic(BATCHES_TOPIC)],
        BatchHandler(intake),
        sink,
        poison_attempts=poison_attempts,
        max_backoff=0.2,
    )


def end_offset(bootstrap: str, topic: str) -> int:
    """The high watermark of partition 0: how many messages the topic holds (read from the broker, no waiting)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("watermarks")})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
    finally:
        consumer.close()
    return int(high)


def message(batch_id: str, headers: list[tuple[str, str | bytes | None]] | None = None) -> Any:
    return (batch_id.encode(), schemas.encode(BATCHES_TOPIC, batch_record(batch_id)), headers)


def test_a_store_outage_is_retried_in_place_without_commit_or_dead_letter(
    settings: KafkaSettings, batches: str, dlq: str, sink: RecordingSink
) -> None:
    # The store is down for ERP-FLAKY's first 4 attempts: more than poison_attempts, which must not matter.
    intake = FlakyIntake(down={"ERP-FLAKY": 4})
    produce(settings.bootstrap, batches, [message("ERP-FIRST"), message("ERP-FLAKY"), message("ERP-AFTER")])
    consumer = loop_consumer(settings, intake, sink, poison_attempts=2)
    try:
        # (stop early if the loop moved past the failing message: that is the bug this test is about)
        poll_until(
            consumer,
            lambda: intake.count("ERP-FLAKY") == 4 or consumer.handled > 1,
            "four failed attempts",
            timeout=30,
            poll=0.2,
        )
        assert intake.count("ERP-FLAKY") == 4
        # Still failing: the first message is done and committed, the failing one is not, nothing behind it
        # was taken (order is kept) and nothing was dead-lettered.
        assert intake.accepted == ["ERP-FIRST"]
        assert "ERP-AFTER" not in intake.calls
        assert consumer.handled == 1
        assert committed(settings.bootstrap, settings.group_id, batches, partitions=1) == {0: 1}
        assert sink.published == []

        # The store is back: the next attempt accepts it, then the loop goes on.
        poll_until(consumer, lambda: consumer.handled == 3, "the three messages handled", timeout=30, poll=0.2)
    finally:
        consumer.close()

    assert intake.calls == ["ERP-FIRST"] + ["ERP-FLAKY"] * 5 + ["ERP-AFTER"]
    assert intake.accepted == ["ERP-FIRST", "ERP-FLAKY", "ERP-AFTER"]  # each exactly once
    assert committed(settings.bootstrap, settings.group_id, batches, partitions=1) == {0: 3}
    assert sink.published == []
    assert end_offset(settings.bootstrap, dlq) == 0  # the broker holds no dead letter either


def test_a_message_that_keeps_failing_is_dead_lettered_after_poison_attempts(
    settings: KafkaSettings, batches: str, dlq: str, sink: RecordingSink
) -> None:
    headers: list[tuple[str, str | bytes | None]] = [("trace", b"t-1"), ("trace", b"t-2"), ("empty", None)]
    poison = message("ERP-BUG", headers)
    intake = FlakyIntake(bugs={"ERP-BUG": KeyError("transactions")})
    produce(settings.bootstrap, batches, [poison, message("ERP-NEXT")])
    consumer = loop_consumer(settings, intake, sink, poison_attempts=3)
    try:
        poll_until(
            consumer,
            lambda: intake.count("ERP-BUG") == 2 or consumer.handled > 0,
            "two failed attempts",
            timeout=30,
            poll=0.2,
        )
        # Below poison_attempts: retried in place, not dead-lettered, offset not moved, nothing behind it taken.
        assert sink.published == []
        assert consumer.handled == 0
        assert intake.calls == ["ERP-BUG", "ERP-BUG"]
        assert committed(settings.bootstrap, settings.group_id, batches, partitions=1) == {}

        poll_until(
            consumer,
            lambda: consumer.handled == 2,
            "the poison message dead-lettered and the next accepted",
            timeout=30,
            poll=0.2,
        )
    finally:
        consumer.close()

    assert intake.count("ERP-BUG") == 3  # exactly poison_attempts attempts
    assert intake.accepted == ["ERP-NEXT"]
    assert [(offset, seen) for offset, _, seen in sink.published] == [(0, {})]  # published before any commit
    assert committed(settings.bootstrap, settings.group_id, batches, partitions=1) == {0: 2}

    letters = read_topic(settings.bootstrap, dlq, expect=1)
    assert len(letters) == 1
    assert letters[0].key == b"ERP-BUG"
    record = schemas.decode(DLQ_TOPIC, letters[0].value or b"")
    assert record["original_value"] == poison[1]
    assert record["original_key"] == b"ERP-BUG"
    assert record["original_headers"] == [
        {"key": "trace", "value": b"t-1"},
        {"key": "trace", "value": b"t-2"},
        {"key": "empty", "value": None},
    ]
    assert (record["topic"], record["partition"], record["offset"]) == (batches, 0, 0)
    assert record["original_timestamp"] is not None
    assert record["reason"] == "processing failed 3 times: KeyError: 'transactions'"
    assert record["batch_id"] is None
    assert dict(letters[0].headers)["reason"] == record["reason"].encode()
