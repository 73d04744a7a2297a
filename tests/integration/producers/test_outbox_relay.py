"""The outbox relay against a real broker, on both store engines: order per key, each event once, and a relay
that died after the broker acknowledged its events but before marking them causes no second publication."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Consumer, KafkaError

from processor.store import OutboxEvent, Store
from producers.relay import OutboxRelay

LOGICAL = "dispersion.status"


class ShiftedClock:
    """The real time plus an offset (to be past another relay's lease without waiting for it)."""

    def __init__(self, offset: timedelta = timedelta(0)) -> None:
        self.offset = offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


def _relay(store: Store, bootstrap: str, topic: str, **options: Any) -> OutboxRelay:
    return OutboxRelay(
        store,
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"},
        topic_name=lambda _logical: topic,
        encoder=lambda event: event.payload_text.encode(),
        lease_seconds=30,
        **options,
    )


def _published(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list[tuple[str, str]]:
    """(key, event_id) of every message on the topic, read until `expected` arrived and a quiet second after."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: list[tuple[str, str]] = []
    deadline = datetime.now(UTC) + timedelta(seconds=timeout)
    quiet_until: datetime | None = None
    try:
        while datetime.now(UTC) < deadline:
            message = consumer.poll(0.2)
            now = datetime.now(UTC)
            if message is None or message.error() is not None:
                if quiet_until is not None and now > quiet_until:
                    break
                continue
            headers = dict(message.headers() or [])
            key = message.key()
            assert isinstance(key, bytes)
            seen.append((key.decode(), headers["event_id"].decode()))
            if len(seen) >= expected:
                quiet_until = now + timedelta(seconds=1)  # anything more would be a duplicate: wait for it
    finally:
        consumer.close()
    return seen


def _append(store: Store, key: str, n: int) -> list[OutboxEvent]:
    with store.transaction() as tx:
        return [tx.outbox.append(LOGICAL, key, {"n": i}, now=datetime.now(UTC)) for i in range(n)]


def test_the_relay_publishes_each_event_once_in_order_per_key(
    store: Store, kafka_bootstrap: str, kafka_topic: str
) -> None:
    events = _append(store, "batch-a", 3) + _append(store, "batch-b", 2) + _append(store, "batch-a", 1)
    relay = _relay(store, kafka_bootstrap, kafka_topic)
    try:
        assert relay.drain(timeout=20)
    finally:
        relay.close()
    seen = _published(kafka_bootstrap, kafka_topic, len(events))
    assert sorted(event_id for _, event_id in seen) == sorted(e.event_id for e in events)
    for key in ("batch-a", "batch-b"):
        assert [i for k, i in seen if k == key] == [e.event_id for e in events if e.key == key]


def test_a_relay_that_died_before_marking_is_not_published_twice(
    store: Store, kafka_bootstrap: str, kafka_topic: str
) -> None:
    first = _append(store, "batch-a", 3) + _append(store, "batch-b", 2)
    dead = _relay(store, kafka_bootstrap, kafka_topic)
    dead.step()  # claims and produces every event ...
    dead._producer.flush(20)  # ... the broker acknowledges them ...
    assert dead.in_flight == 5 and dead.stats.published == 0  # ... and the relay dies before marking any
    later = _append(store, "batch-a", 1)  # written after: never handed to the dead relay's producer

    heir = _relay(store, kafka_bootstrap, kafka_topic, clock=ShiftedClock(timedelta(seconds=31)))
    try:
        assert heir.drain(timeout=30)
    finally:
        heir.close()
    seen = _published(kafka_bootstrap, kafka_topic, len(first) + len(later))
    assert Counter(event_id for _, event_id in seen) == Counter(e.event_id for e in first + later)
    assert [i for k, i in seen if k == "batch-a"] == [e.event_id for e in first + later if e.key == "batch-a"]
    assert heir.stats.handovers == 2 and heir.stats.found_published == 5
    assert heir.stats.produced == 1  # only the event the dead relay never had
    with store.transaction(write=False) as tx:
        assert tx.outbox.backlog()[0] == 0


def test_when_the_topic_cannot_be_read_the_handed_keys_wait(
    store: Store, kafka_bootstrap: str, kafka_topic: str
) -> None:
    events = _append(store, "batch-a", 2)
    dead = _relay(store, kafka_bootstrap, kafka_topic)
    dead.step()
    dead._producer.flush(20)
    blind = _relay(
        store,
        kafka_bootstrap,
        kafka_topic,
        clock=ShiftedClock(timedelta(seconds=31)),
        handover_config={"bootstrap.servers": "127.0.0.1:1", "group.id": "nobody"},
        handover_timeout=1.0,
    )
    try:
        blind.step()
        blind._producer.flush(5)
        assert blind.stats.produced == 0 and blind.stats.handovers == 0
        with store.transaction(write=False) as tx:
            assert tx.outbox.backlog()[0] == 2
            assert [h.key for h in tx.outbox.handovers(owner=blind.owner, now=blind.clock.now())] == ["batch-a"]
    finally:
        blind.close()
    assert _published(kafka_bootstrap, kafka_topic, len(events)) == [("batch-a", e.event_id) for e in events]


def test_a_delivery_reported_failed_but_written_is_not_sent_again(
    store: Store, kafka_bootstrap: str, kafka_topic: str
) -> None:
    events = _append(store, "batch-a", 2)
    relay = _relay(store, kafka_bootstrap, kafka_topic)
    try:
        relay.step()
        relay._producer.flush(20)  # both written and acknowledged ...
        with relay._lock:  # ... but the first report is an error (as a timed-out, possibly written request is)
            first = relay._acked.pop(0)
            relay._failed.append((first, KafkaError(KafkaError._MSG_TIMED_OUT)))
        assert relay.drain(timeout=30)
    finally:
        relay.close()
    seen = _published(kafka_bootstrap, kafka_topic, len(events))
    assert seen == [("batch-a", e.event_id) for e in events]  # once each, in order: Kafka was checked first
    assert relay.stats.delivery_failures == 1 and relay.stats.found_published == 1


def test_a_relay_closed_with_kafka_unreachable_leaves_its_keys_to_their_leases(
    store: Store, kafka_bootstrap: str, kafka_topic: str
) -> None:
    _append(store, "batch-a", 1)
    cut_off = OutboxRelay(
        store,
        {"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, "acks": "all"},
        topic_name=lambda _logical: kafka_topic,
        encoder=lambda event: event.payload_text.encode(),
        lease_seconds=30,
    )
    cut_off.step()  # handed to its producer, which cannot reach a broker
    cut_off.close(timeout=0.5)  # dropped: a request in flight might still be written, so the key is kept
    now = datetime.now(UTC)
    with store.transaction() as tx:
        assert tx.outbox.claim(owner="other", now=now, limit=10, lease_seconds=30) == []
    with store.transaction() as tx:  # after the lease: a handover, checked in Kafka before anything is sent
        assert len(tx.outbox.claim(owner="other", now=now + timedelta(seconds=31), limit=10, lease_seconds=30)) == 1
        (handed,) = tx.outbox.handovers(owner="other", now=now + timedelta(seconds=31))
        assert handed.previous_owner == cut_off.owner
