"""The whole Kafka path in both wire formats, on a real broker and a real schema registry (Apicurio Registry from
`dispersion dev registry`): `dispersion topics` creates the topics and registers the subjects, `dispersion submit`
produces, the batch consumer takes a valid batch and dead-letters an invalid one, the outbox relay publishes the
INVALID status event and `dispersion status` reads it. Besides: a record in the other format is still consumed, a
Confluent record without a registry is a clear dead letter, a registry that cannot serve is retried (never
dead-lettered), and a consumer that knows only the Confluent framing and the registry's REST API (what Java's
KafkaAvroDeserializer does) reads our status event by its schema id."""

from __future__ import annotations

import io
import json
import struct
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import httpx
import pytest
from cli_support import EXPORT, ORIGIN, write_config
from kafka_layer_support import (
    batch_consumer,
    batch_record,
    consume_until,
    new_topic,
    produce,
    read_topic,
    settings_for,
)
from registry_fixtures import register_subjects

import schemas
from consumers.batches import EngineIntake
from processor.cli import status as statuscli
from processor.cli import submit
from processor.cli.config import settings_from_config
from processor.cli.topics import main as topics_main
from processor.kafka.clients import producer_config
from processor.kafka.settings import KafkaSettings
from processor.kafka.wire import Registry, WireCodec, WireSettings
from processor.store import Store
from producers.dlq import DeadLetterPublisher
from producers.relay import OutboxRelay
from schemas import CONFLUENT, SINGLE_OBJECT
from schemas.topics import ALL_TOPICS, BATCHES_TOPIC, DLQ_TOPIC, STATUS_TOPIC

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def test_submit_consume_dead_letter_relay_and_status_in_each_wire_format(
    wire: WireSettings,
    kafka_bootstrap: str,
    sqlite_store: Store,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = uuid.uuid4().hex[:8]
    physical = {logical: f"wf.{run}.{logical}" for logical in ALL_TOPICS}
    extra = {"wire_format": wire.wire_format}
    if wire.registry is not None:
        extra["schema_registry_url"] = wire.registry.url
    config = write_config(tmp_path / "conf" / "dispersion.toml", kafka_bootstrap, physical, kafka=extra)

    assert topics_main(["--config", str(config), "--partitions", "1"]) == 0
    created = capsys.readouterr().out
    assert f"{physical[BATCHES_TOPIC]}: created" in created
    if wire.registry is not None:  # every topic's subject, with the compatibility the registry enforces
        for logical in ALL_TOPICS:
            assert f"{physical[logical]}-value: registered (schema id " in created
        assert "BACKWARD (set)" in created
    else:
        assert "-value" not in created
    settings = settings_from_config(str(config))
    assert settings.wire == wire

    export = tmp_path / "payroll-export.csv"
    export.write_text(EXPORT)
    code = submit.main(["--config", str(config), str(export), *ORIGIN, "--batch-id", f"WF-OK-{run}", "--quiet"])
    assert code == 0, capsys.readouterr().err
    # `submit` checks its input, so the invalid batch comes from another producer, in the same wire format.
    invalid = WireCodec(BATCHES_TOPIC, wire).encode(
        batch_record(f"WF-BAD-{run}", amounts=("-5.00", "10.00")), physical[BATCHES_TOPIC]
    )
    produce(kafka_bootstrap, physical[BATCHES_TOPIC], [(f"WF-BAD-{run}".encode(), invalid, None)])

    _consume(settings, sqlite_store, 2)
    with sqlite_store.transaction(write=False) as tx:
        assert tx.flows.require(f"WF-OK-{run}").state == "RECEIVED"
        assert tx.flows.require(f"WF-BAD-{run}").state == "INVALID"

    opener = b"\x00" if wire.wire_format == CONFLUENT else schemas.MAGIC
    (submitted, _bad) = read_topic(kafka_bootstrap, physical[BATCHES_TOPIC], expect=2)
    assert (submitted.value or b"").startswith(opener)
    (letter,) = read_topic(kafka_bootstrap, physical[DLQ_TOPIC], expect=1)
    assert (letter.value or b"").startswith(opener)
    dead = WireCodec(DLQ_TOPIC, wire).decode(letter.value or b"", physical[DLQ_TOPIC])
    assert dead["batch_id"] == f"WF-BAD-{run}"
    assert dead["original_value"] == invalid
    assert "non_positive_amount" in dead["reason"]

    relay = OutboxRelay(sqlite_store, producer_config(settings, "relay"), topic_name=settings.topic, wire=wire)
    try:
        assert relay.drain(30)
    finally:
        relay.close()
    (event,) = read_topic(kafka_bootstrap, physical[STATUS_TOPIC], expect=1)
    assert (event.value or b"").startswith(opener)

    out = io.StringIO()
    assert statuscli.main(["--config", str(config), "--batch", f"WF-BAD-{run}", "--json"], out=out) == 0
    (line,) = out.getvalue().splitlines()
    printed = json.loads(line)
    assert (printed["batch_id"], printed["status"]) == (f"WF-BAD-{run}", "INVALID")


@pytest.mark.parametrize("consumer_format", [SINGLE_OBJECT, CONFLUENT])
def test_a_record_in_the_other_wire_format_is_still_consumed(
    consumer_format: str, kafka_bootstrap: str, schema_registry_url: str, sqlite_store: Store
) -> None:
    registry = Registry(schema_registry_url)
    topics = {BATCHES_TOPIC: new_topic(kafka_bootstrap, "batches", 1), DLQ_TOPIC: new_topic(kafka_bootstrap, "dlq")}
    settings = settings_for(kafka_bootstrap, topics, WireSettings(consumer_format, registry))
    register_subjects(settings)
    topic = topics[BATCHES_TOPIC]
    single = WireCodec(BATCHES_TOPIC).encode(batch_record("MIX-SO-1"), topic)
    confluent = WireCodec(BATCHES_TOPIC, WireSettings(CONFLUENT, registry)).encode(batch_record("MIX-CF-1"), topic)
    assert schemas.wire_format_of(single) == SINGLE_OBJECT
    assert schemas.wire_format_of(confluent) == CONFLUENT
    produce(kafka_bootstrap, topic, [(b"MIX-SO-1", single, None), (b"MIX-CF-1", confluent, None)])

    _consume(settings, sqlite_store, 2)
    with sqlite_store.transaction(write=False) as tx:
        assert tx.flows.require("MIX-SO-1").state == "RECEIVED"
        assert tx.flows.require("MIX-CF-1").state == "RECEIVED"
        assert str(tx.flows.require("MIX-CF-1").control_sum) == "1500.85"
    assert read_topic(kafka_bootstrap, topics[DLQ_TOPIC], expect=0, settle=0.5) == []


def test_without_a_registry_a_confluent_record_is_a_clear_dead_letter(
    kafka_bootstrap: str, schema_registry_url: str, sqlite_store: Store
) -> None:
    topics = {BATCHES_TOPIC: new_topic(kafka_bootstrap, "batches", 1), DLQ_TOPIC: new_topic(kafka_bootstrap, "dlq")}
    producing = settings_for(kafka_bootstrap, topics, WireSettings(CONFLUENT, Registry(schema_registry_url)))
    register_subjects(producing)
    value = WireCodec(BATCHES_TOPIC, producing.wire).encode(batch_record("CF-NOREG-1"), topics[BATCHES_TOPIC])
    produce(kafka_bootstrap, topics[BATCHES_TOPIC], [(b"CF-NOREG-1", value, None)])

    settings = settings_for(kafka_bootstrap, topics)  # single-object, no registry
    _consume(settings, sqlite_store, 1)
    (letter,) = read_topic(kafka_bootstrap, topics[DLQ_TOPIC], expect=1)
    dead = schemas.decode(DLQ_TOPIC, letter.value or b"")
    assert dead["original_value"] == value
    assert dead["reason"].startswith("undecodable: ")
    assert "Confluent-framed" in dead["reason"]
    assert "schema_registry_url" in dead["reason"]
    with sqlite_store.transaction(write=False) as tx:
        assert tx.flows.get("CF-NOREG-1") is None


def test_a_registry_that_cannot_serve_is_waited_for_never_dead_lettered(
    kafka_bootstrap: str, schema_registry_url: str, sqlite_store: Store, unserved_port: int
) -> None:
    topics = {BATCHES_TOPIC: new_topic(kafka_bootstrap, "batches", 1), DLQ_TOPIC: new_topic(kafka_bootstrap, "dlq")}
    good = WireSettings(CONFLUENT, Registry(schema_registry_url))
    register_subjects(settings_for(kafka_bootstrap, topics, good))
    value = WireCodec(BATCHES_TOPIC, good).encode(batch_record("CF-DOWN-1"), topics[BATCHES_TOPIC])
    produce(kafka_bootstrap, topics[BATCHES_TOPIC], [(b"CF-DOWN-1", value, None)])

    # A port nothing listens on: the registry is "down" for this consumer.
    down = WireSettings(CONFLUENT, Registry(f"http://127.0.0.1:{unserved_port}/apis/ccompat/v7"))
    stuck_settings = settings_for(kafka_bootstrap, topics, down)
    intake = EngineIntake(sqlite_store)
    # Dead letters that would go out (single-object: no registry needed) and no second chance for a failing
    # message: only the registry failure being recognised as "retry later" keeps the record from the DLQ.
    letters = DeadLetterPublisher(producer_config(stuck_settings, "dlq"), topic=topics[DLQ_TOPIC])
    stuck = batch_consumer(stuck_settings, intake, dead_letters=letters, max_backoff=0.5, poison_attempts=1)
    try:
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            stuck.poll_once()
        assert stuck.handled == 0  # retried in place, not skipped
    finally:
        stuck.close()
    assert read_topic(kafka_bootstrap, topics[DLQ_TOPIC], expect=0, settle=0.5) == []

    healthy = batch_consumer(replace(stuck_settings, wire=good), intake)
    try:
        consume_until(healthy, 1)  # the same group takes the same message once the registry answers
    finally:
        healthy.close()
        intake.close()
    with sqlite_store.transaction(write=False) as tx:
        assert tx.flows.require("CF-DOWN-1").state == "RECEIVED"


def test_a_java_style_consumer_reads_our_status_event_by_schema_id(
    kafka_bootstrap: str, schema_registry_url: str, sqlite_store: Store
) -> None:
    """What Java's KafkaAvroDeserializer does, spelled out: magic byte 0, a big-endian schema id, the writer
    schema fetched from the registry by that id, then plain Avro binary."""
    topic = new_topic(kafka_bootstrap, "status", 1)
    wire = WireSettings(CONFLUENT, Registry(schema_registry_url))
    settings = settings_for(kafka_bootstrap, {STATUS_TOPIC: topic}, wire)
    register_subjects(settings)
    with sqlite_store.transaction() as tx:
        tx.outbox.append_status(STATUS_TOPIC, "JAVA-1", "INVALID", {"reason": "bad rows"}, now=datetime.now(UTC))
    relay = OutboxRelay(sqlite_store, producer_config(settings, "relay"), topic_name=settings.topic, wire=wire)
    try:
        assert relay.drain(30)
    finally:
        relay.close()
    (message,) = read_topic(kafka_bootstrap, topic, expect=1)
    data = message.value or b""

    magic, schema_id = struct.unpack(">bI", data[:5])
    assert magic == 0
    with httpx.Client(timeout=10) as http:
        fetched = http.get(f"{schema_registry_url}/schemas/ids/{schema_id}")
        assert fetched.status_code == 200, fetched.text
        latest = http.get(f"{schema_registry_url}/subjects/{topic}-value/versions/latest").json()
    assert latest["id"] == schema_id  # the id of the subject's registered version
    writer = fastavro.parse_schema(json.loads(fetched.json()["schema"]))
    body = io.BytesIO(data[5:])
    record = fastavro.schemaless_reader(body, writer, None)
    assert body.tell() == len(data) - 5  # nothing left over
    assert isinstance(record, dict)
    assert (record["batch_id"], record["status"], record["reason"]) == ("JAVA-1", "INVALID", "bad rows")
    assert record == WireCodec(STATUS_TOPIC, wire).decode(data, topic)


def test_producers_wait_for_a_registry_that_cannot_serve(
    kafka_bootstrap: str,
    schema_registry_url: str,
    sqlite_store: Store,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    unserved_port: int,
) -> None:
    """The relay keeps the events in the outbox (and keeps running), a dead letter is not acknowledged (so the
    consumer retries the message), `submit` produces nothing and says why; all go on once the registry answers."""
    topics = {
        BATCHES_TOPIC: new_topic(kafka_bootstrap, "batches", 1),
        DLQ_TOPIC: new_topic(kafka_bootstrap, "dlq", 1),
        STATUS_TOPIC: new_topic(kafka_bootstrap, "status", 1),
    }
    good = WireSettings(CONFLUENT, Registry(schema_registry_url))
    down = WireSettings(CONFLUENT, Registry(f"http://127.0.0.1:{unserved_port}/apis/ccompat/v7"))
    register_subjects(settings_for(kafka_bootstrap, topics, good))

    with sqlite_store.transaction() as tx:
        tx.outbox.append_status(STATUS_TOPIC, "REG-DOWN-1", "INVALID", {"reason": "x"}, now=datetime.now(UTC))
    stalled = settings_for(kafka_bootstrap, topics, down)
    relay = OutboxRelay(sqlite_store, producer_config(stalled, "relay"), topic_name=stalled.topic, wire=down)
    try:
        relay.step()
        assert relay.stats.produced == 0
    finally:
        relay.close()
    assert sqlite_store.run(lambda tx: tx.outbox.backlog(), write=False)[0] == 1  # still waiting, not lost
    relay = OutboxRelay(sqlite_store, producer_config(stalled, "relay"), topic_name=stalled.topic, wire=good)
    try:
        assert relay.drain(30)
    finally:
        relay.close()
    (event,) = read_topic(kafka_bootstrap, topics[STATUS_TOPIC], expect=1)
    assert WireCodec(STATUS_TOPIC, good).decode(event.value or b"", topics[STATUS_TOPIC])["batch_id"] == "REG-DOWN-1"

    produce(kafka_bootstrap, topics[BATCHES_TOPIC], [(b"junk", b"\xc3\x01 not a record", None)])
    intake = EngineIntake(sqlite_store)
    consumer = batch_consumer(stalled, intake, max_backoff=0.5)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            consumer.poll_once()
        assert consumer.handled == 0  # the dead letter could not be written: the message waits
    finally:
        consumer.close()
    consumer = batch_consumer(replace(stalled, wire=good), intake)
    try:
        consume_until(consumer, 1)
    finally:
        consumer.close()
        intake.close()
    (letter,) = read_topic(kafka_bootstrap, topics[DLQ_TOPIC], expect=1)
    assert WireCodec(DLQ_TOPIC, good).decode(letter.value or b"", topics[DLQ_TOPIC])["original_key"] == b"junk"

    config = write_config(
        tmp_path / "dispersion.toml",
        kafka_bootstrap,
        topics,
        kafka={"wire_format": CONFLUENT, "schema_registry_url": down.registry.url if down.registry else ""},
    )
    export = tmp_path / "payroll-export.csv"
    export.write_text(EXPORT)
    assert submit.main(["--config", str(config), str(export), *ORIGIN, "--batch-id", "REG-DOWN-2", "--quiet"]) == 3
    err = capsys.readouterr().err
    assert "schema registry unreachable" in err and "nothing was produced" in err
    assert "Traceback" not in err
    assert len(read_topic(kafka_bootstrap, topics[BATCHES_TOPIC], expect=1)) == 1  # only the junk from above


def _consume(settings: KafkaSettings, store: Store, count: int) -> None:
    """Run the batch consumer of the processor over `store` until it has handled `count` records."""
    intake = EngineIntake(store)
    consumer = batch_consumer(settings, intake)
    try:
        consume_until(consumer, count)
    finally:
        consumer.close()
        intake.close()
