"""The payroll.batches consumer on a real broker and a real store (SQLite and PostgreSQL): at-least-once intake,
duplicates recognised, poison messages dead-lettered with everything kept, offsets moved only after the dead
letter's acknowledgement, a clean leave on SIGTERM. Each in both wire formats (single-object, and Confluent with a
real schema registry)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kafka_fixtures import create_topic
from kafka_layer_support import (
    batch_consumer,
    batch_record,
    committed,
    consume_until,
    new_topic,
    produce,
    read_topic,
    settings_for,
)
from registry_fixtures import register_subjects
from store_fixtures import StoreTarget

from consumers.batches import EngineIntake, IntakeOutcome, MessageRef
from processor.engine.intake import Handed
from processor.kafka.clients import producer_config
from processor.kafka.settings import KafkaSettings
from processor.kafka.wire import WireCodec, WireSettings
from processor.store import Store
from producers.dlq import DeadLetterPublisher
from schemas.topics import BATCHES_TOPIC, DLQ_TOPIC, STATUS_TOPIC

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


class RecordingIntake:
    """The engine's intake, remembering each verdict (the thing under test stays the real one)."""

    def __init__(self, store: Store) -> None:
        self.engine = EngineIntake(store)
        self.verdicts: list[tuple[str | None, str]] = []

    def __call__(self, document: Handed, *, message: MessageRef | None = None) -> IntakeOutcome:
        outcome = self.engine(document, message=message)
        self.verdicts.append((outcome.batch_id, outcome.verdict))
        return outcome


@pytest.fixture
def topics(kafka_bootstrap: str) -> dict[str, str]:
    return {BATCHES_TOPIC: new_topic(kafka_bootstrap, "batches"), DLQ_TOPIC: new_topic(kafka_bootstrap, "dlq")}


@pytest.fixture
def settings(kafka_bootstrap: str, topics: dict[str, str], wire: WireSettings) -> KafkaSettings:
    chosen = settings_for(kafka_bootstrap, topics, wire)
    register_subjects(chosen)
    return chosen


def encode(settings: KafkaSettings, logical: str, record: Mapping[str, Any]) -> bytes:
    """A record as another producer of this deployment writes it (its wire format)."""
    return WireCodec(logical, settings.wire).encode(record, settings.topic(logical))


def decode(settings: KafkaSettings, logical: str, value: bytes | None) -> dict[str, Any]:
    return WireCodec(logical, settings.wire).decode(value or b"", settings.topic(logical))


@pytest.fixture
def intake(store: Store) -> Iterator[RecordingIntake]:
    recording = RecordingIntake(store)
    yield recording
    recording.engine.close()


def test_a_batch_delivered_twice_is_accepted_once(
    settings: KafkaSettings, topics: dict[str, str], store: Store, intake: RecordingIntake
) -> None:
    value = encode(settings, BATCHES_TOPIC, batch_record("ERP-DUP-1"))
    message = (b"ERP-DUP-1", value, [("source", b"erp")])
    produce(settings.bootstrap, topics[BATCHES_TOPIC], [message, message])  # the same event, delivered twice

    consumer = batch_consumer(settings, intake)
    try:
        consume_until(consumer, 2)
    finally:
        consumer.close()

    assert intake.verdicts == [("ERP-DUP-1", "accepted"), ("ERP-DUP-1", "duplicate")]
    with store.transaction(write=False) as tx:
        flow = tx.flows.require("ERP-DUP-1")
        assert flow.state == "RECEIVED"
        assert flow.number_of_transactions == 2
        assert str(flow.control_sum) == "1500.85"
        assert tx.raw.scalar("SELECT COUNT(*) FROM flows") == 1
    assert sum(committed(settings.bootstrap, settings.group_id, topics[BATCHES_TOPIC]).values()) == 2
    assert read_topic(settings.bootstrap, topics[DLQ_TOPIC], expect=0, settle=0.5) == []


def test_poison_messages_are_dead_lettered_whole_and_the_consumer_goes_on(
    settings: KafkaSettings, topics: dict[str, str], store: Store, intake: RecordingIntake
) -> None:
    garbage = b"\x00not avro at all\xff"
    invalid = encode(settings, BATCHES_TOPIC, batch_record("ERP-BAD-1", amounts=("-5.00", "10.00"), email="nope"))
    valid = encode(settings, BATCHES_TOPIC, batch_record("ERP-OK-1"))
    headers: list[tuple[str, str | bytes | None]] = [("trace", b"abc"), ("trace", b"def"), ("empty", None)]
    # One partition, so the three arrive in this order.
    topic = new_topic(settings.bootstrap, "batches", partitions=1)
    settings = settings_for(settings.bootstrap, {**topics, BATCHES_TOPIC: topic}, settings.wire)
    produce(
        settings.bootstrap,
        topic,
        [(b"k-garbage", garbage, headers), (b"ERP-BAD-1", invalid, None), (b"ERP-OK-1", valid, None)],
    )
    consumer = batch_consumer(settings, intake)
    try:
        consume_until(consumer, 3)
    finally:
        consumer.close()

    assert intake.verdicts == [("ERP-BAD-1", "invalid"), ("ERP-OK-1", "accepted")]
    letters = read_topic(settings.bootstrap, topics[DLQ_TOPIC], expect=2)
    assert len(letters) == 2
    records = sorted((decode(settings, DLQ_TOPIC, r.value) for r in letters), key=lambda r: r["offset"])
    first, second = records
    assert first["original_value"] == garbage
    assert first["original_key"] == b"k-garbage"
    assert first["original_headers"] == [
        {"key": "trace", "value": b"abc"},
        {"key": "trace", "value": b"def"},
        {"key": "empty", "value": None},
    ]
    assert (first["topic"], first["partition"], first["offset"]) == (topic, 0, 0)
    assert first["reason"].startswith("undecodable")
    assert first["batch_id"] is None
    assert first["original_timestamp"] is not None

    assert second["original_value"] == invalid
    assert second["batch_id"] == "ERP-BAD-1"
    assert second["offset"] == 1
    assert "non_positive_amount" in second["reason"]
    assert "malformed_email" in second["reason"]
    assert {r.key for r in letters} == {b"k-garbage", b"ERP-BAD-1"}

    with store.transaction(write=False) as tx:
        assert tx.flows.require("ERP-BAD-1").state == "INVALID"
        assert tx.outbox.statuses(STATUS_TOPIC, "ERP-BAD-1") == ["INVALID"]  # the engine's outbox path
        assert tx.flows.require("ERP-OK-1").state == "RECEIVED"
    assert committed(settings.bootstrap, settings.group_id, topic, partitions=1) == {0: 3}


def test_the_offset_moves_only_after_the_dead_letter_is_acknowledged(
    kafka_bootstrap: str, topics: dict[str, str], intake: RecordingIntake, wire: WireSettings
) -> None:
    topic = new_topic(kafka_bootstrap, "batches", partitions=1)
    missing_dlq = f"{topics[DLQ_TOPIC]}.later"  # does not exist yet: dead letters cannot be acknowledged
    settings = settings_for(kafka_bootstrap, {BATCHES_TOPIC: topic, DLQ_TOPIC: missing_dlq}, wire)
    register_subjects(settings)
    valid = encode(settings, BATCHES_TOPIC, batch_record("ERP-AFTER-1"))
    produce(kafka_bootstrap, topic, [(b"x", b"garbage", None), (b"ERP-AFTER-1", valid, None)])

    publisher = DeadLetterPublisher(producer_config(settings, "dlq"), topic=missing_dlq, timeout=2.0, wire=wire)
    consumer = batch_consumer(settings, intake, dead_letters=publisher, max_backoff=0.5)
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            consumer.poll_once()
        assert consumer.handled == 0  # stuck on the poison message, not past it
        assert intake.verdicts == []  # the valid batch behind it was not taken either: order is kept
        assert committed(kafka_bootstrap, settings.group_id, topic, partitions=1) == {}

        create_topic(kafka_bootstrap, missing_dlq, partitions=1)
        consume_until(consumer, 2)
    finally:
        consumer.close()
    assert intake.verdicts == [("ERP-AFTER-1", "accepted")]
    letters = read_topic(kafka_bootstrap, missing_dlq, expect=1)
    assert [decode(settings, DLQ_TOPIC, r.value)["original_value"] for r in letters][-1] == b"garbage"
    assert committed(kafka_bootstrap, settings.group_id, topic, partitions=1) == {0: 2}


CONSUMER_SCRIPT = textwrap.dedent(
    """
    import signal, sys, threading
    from consumers.batches import BatchHandler, EngineIntake
    from consumers.loop import AtLeastOnceConsumer
    from processor.kafka.clients import consumer_config, producer_config
    from processor.kafka.settings import KafkaSettings
    from processor.kafka.wire import Registry, WireSettings
    from processor.store import Store
    from producers.dlq import DeadLetterPublisher

    bootstrap, group, batches, dlq, url, schema, wire_format, registry = sys.argv[1:9]
    store = Store.open(url, schema=schema or None)
    wire = WireSettings(wire_format, Registry(registry) if registry else None)
    settings = KafkaSettings(bootstrap, group, {"payroll.batches": batches, "payroll.batches.dlq": dlq}, wire=wire)
    letters = DeadLetterPublisher(producer_config(settings, "dlq"), topic=dlq, wire=wire)
    handler = BatchHandler(EngineIntake(store), wire=wire)
    consumer = AtLeastOnceConsumer(consumer_config(settings, "batches"), [batches], handler, letters)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())  # as `dispersion processor` stops its loop
    original = consumer.poll_once
    def poll_once(timeout=None):
        handled = original(timeout)
        if handled:
            print("handled", consumer.handled, flush=True)
        return handled
    consumer.poll_once = poll_once
    print("ready", flush=True)
    consumer.run(stop)
    store.close()
    print("stopped", flush=True)
    """
)


def test_sigterm_commits_and_leaves_the_group(
    settings: KafkaSettings, topics: dict[str, str], store_target: StoreTarget, store: Store
) -> None:
    from confluent_kafka.admin import AdminClient

    values = [encode(settings, BATCHES_TOPIC, batch_record(f"ERP-TERM-{i}")) for i in range(3)]
    produce(
        settings.bootstrap, topics[BATCHES_TOPIC], [(f"ERP-TERM-{i}".encode(), v, None) for i, v in enumerate(values)]
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CONSUMER_SCRIPT,
            settings.bootstrap,
            settings.group_id,
            topics[BATCHES_TOPIC],
            topics[DLQ_TOPIC],
            store_target.url,
            store_target.schema or "",
            settings.wire.wire_format,
            settings.wire.registry.url if settings.wire.registry else "",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 3 and time.monotonic() < deadline:
            line = process.stdout.readline()
            if line.startswith("handled"):
                seen = int(line.split()[1])
        assert seen == 3
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, process.stderr.read() if process.stderr else ""
        assert process.stdout.read().strip().endswith("stopped")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert sum(committed(settings.bootstrap, settings.group_id, topics[BATCHES_TOPIC]).values()) == 3
    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    group = admin.describe_consumer_groups([settings.group_id])[settings.group_id].result(15)
    assert list(group.members) == []  # it left the group instead of waiting for the session to time out
    with store.transaction(write=False) as tx:
        assert {tx.flows.require(f"ERP-TERM-{i}").state for i in range(3)} == {"RECEIVED"}
