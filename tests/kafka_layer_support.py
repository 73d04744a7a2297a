"""Helpers of the Kafka-layer tests: sample batches, producing, reading a whole topic, committed offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka_fixtures import create_topic

from consumers.batches import BatchHandler, BatchIntake
from consumers.loop import AtLeastOnceConsumer
from processor.devtools.processes import eventually
from processor.kafka.clients import consumer_config, producer_config
from processor.kafka.settings import KafkaSettings
from processor.kafka.wire import WireSettings
from producers.dlq import DeadLetterPublisher
from schemas.topics import BATCHES_TOPIC, DLQ_TOPIC


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def new_topic(bootstrap: str, prefix: str, partitions: int = 3) -> str:
    """Create a uniquely named topic and return its name."""
    name = unique(prefix)
    create_topic(bootstrap, name, partitions=partitions)
    return name


def batch_record(batch_id: str, *, amounts: tuple[str, ...] = ("1500.75", "0.10"), email: str = "") -> dict[str, Any]:
    """A `payroll.batches` record; `email` replaces every e-mail (e.g. a malformed one)."""
    return {
        "batch_id": batch_id,
        "integration": "bank-gt",
        "file_reference": "PAYROLL-NOV",
        "origin_account": {"account_number": "3001234567", "account_type": "MONETARY", "currency": "GTQ"},
        "transactions": [
            {
                "destination_account": {
                    "account_number": f"40098765{i:02d}",
                    "account_type": "SAVINGS",
                    "currency": "GTQ",
                    "email": email or f"employee.{i}@example.com",
                },
                "amount": Decimal(amount),
                "concept": f"Salary #{i}",
                "employee_reference": f"E-{i}",
            }
            for i, amount in enumerate(amounts)
        ],
        "requested_at": datetime(2026, 11, 30, 12, 0, 0, 250000, tzinfo=UTC),
        "source": "test",
    }


def produce(
    bootstrap: str,
    topic: str,
    messages: list[tuple[bytes | None, bytes | None, list[tuple[str, str | bytes | None]] | None]],
) -> None:
    """Produce (key, value, headers) messages in order and wait for every acknowledgement."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for key, value, headers in messages:
        producer.produce(topic, value=value, key=key, headers=headers, on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0
    assert errors == [None] * len(messages)


@dataclass(frozen=True)
class Read:
    """A message as read back (plain values, so tests can compare)."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int
    offset: int


def read_topic(bootstrap: str, topic: str, *, expect: int, timeout: float = 30.0, settle: float = 1.0) -> list[Read]:
    """Every message of `topic` from the beginning: waits until at least `expect` arrived, then `settle` seconds
    more for any extra (a duplicate must show up), ordered by partition and offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    found: list[Read] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        quiet_until: float | None = None
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                found.append(
                    Read(
                        message.key(),
                        message.value(),
                        list(message.headers() or []),
                        message.partition() or 0,
                        message.offset() or 0,
                    )
                )
            elif message is not None and message.error().code() != KafkaError._PARTITION_EOF:
                raise AssertionError(str(message.error()))
            if len(found) >= expect:
                quiet_until = quiet_until or time.monotonic() + settle
                if time.monotonic() >= quiet_until:
                    break
    finally:
        consumer.close()
    return sorted(found, key=lambda r: (r.partition, r.offset))


def committed(bootstrap: str, group: str, topic: str, partitions: int = 3) -> dict[int, int]:
    """The group's committed offsets per partition (partitions without a commit are left out)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in offsets if tp.offset >= 0}


def settings_for(bootstrap: str, topics: dict[str, str], wire: WireSettings | None = None) -> KafkaSettings:
    """Settings with a fresh consumer group, the given logical -> physical topic names and wire format."""
    return KafkaSettings(bootstrap=bootstrap, group_id=unique("group"), topics=topics, wire=wire or WireSettings())


def batch_consumer(
    settings: KafkaSettings,
    intake: BatchIntake,
    *,
    dead_letters: DeadLetterPublisher | None = None,
    **options: Any,
) -> AtLeastOnceConsumer:
    """A consumer of the deployment's `payroll.batches` topic alone that dead-letters to its `payroll.batches.dlq`
    (the processor's loop, processor/cli/service.py, reads every input topic with one consumer)."""
    sink = dead_letters or DeadLetterPublisher(
        producer_config(settings, "dlq"), topic=settings.topic(DLQ_TOPIC), wire=settings.wire
    )
    return AtLeastOnceConsumer(
        consumer_config(settings, "batches"),
        [settings.topic(BATCHES_TOPIC)],
        BatchHandler(intake, wire=settings.wire),
        sink,
        **options,
    )


def poll_until(
    consumer: AtLeastOnceConsumer,
    done: Callable[[], bool],
    what: str,
    *,
    timeout: float = 60.0,
    poll: float | None = None,
    values: Callable[[], object] | None = None,
) -> None:
    """Let `consumer` poll (and handle, and commit) until `done()`; `what` (and `values()`, when given) name what
    was awaited when it times out."""

    def step() -> bool:
        if done():
            return True
        consumer.poll_once(poll)
        return False

    try:
        eventually(step, what=what, timeout=timeout, interval=0)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; last value {values()}" if values else str(exc)) from None


def consume_until(consumer: AtLeastOnceConsumer, handled: int, timeout: float = 60.0) -> None:
    """Let `consumer` poll until it handled `handled` messages."""
    poll_until(consumer, lambda: consumer.handled >= handled, f"{handled} messages handled", timeout=timeout)
