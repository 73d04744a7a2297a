"""The outbox relay: status events written by the engine (in the same transaction as the state change) go to
Kafka in order per key, each once, and are marked published only after the broker acknowledged them.

    relay = OutboxRelay(store, producer_config(settings, "relay"), owner="relay-host-1", topic_name=settings.topic,
                        wire=settings.wire)
    relay.run(stop_event)          # until stop_event is set; then flushes, marks, releases its keys

One round (`step`):

1. serve delivery reports (`poll`); mark the acknowledged events published in one short transaction;
2. `outbox.claim` leases keys with unpublished events (the keys this relay already holds included, which renews
   their lease) and returns their events, each key's in sequence order;
3. events not already handed to the producer are encoded (the topic's schema, in the deployment's wire format:
   single-object or Confluent) and produced, keyed by the outbox key (batch id, mandate id), so one key's events
   share a partition and keep their order. While the schema registry cannot serve (confluent mode), the round
   stops there and the events wait in the outbox.

Guarantees, and why:

- *Order per key*: the store hands a key to one relay at a time and its events in sequence order; the producer is
  idempotent (`enable.idempotence=true`, `acks=all`), so retries inside librdkafka neither reorder nor duplicate.
- *Nothing lost*: an event is marked published only from its successful delivery report. The producer's
  `message.timeout.ms` is 0 (no limit): while Kafka is down, claimed events wait in the producer's queue (at most
  `max_in_flight`) and in the outbox (all of them, unpublished), and go out when Kafka returns. A relay that dies
  leaves them unpublished; another relay takes the keys once the lease runs out.
- *Each once*: an event already handed to the producer is never produced again by this relay. A relay that
  dies (or closes with Kafka down) after handing events to its producer may have got some of them into Kafka
  without marking them; the next owner of those keys (`Outbox.handovers`) reads the topic from the time they
  were first handed (producers/handover.py), marks what it finds published (`Outbox.adopt`) and produces only
  the rest. If the topic cannot be read, the keys wait. A delivery reported as failed may have been written
  all the same: its key becomes a handover for this relay too (`Outbox.suspect`). A relay closed while Kafka is
  unreachable keeps its keys leased (a dropped request may still land) until the lease runs out. Every event
  also carries its `event_id` (header and field), so a consumer can still deduplicate should a relay stalled
  past its lease deliver late.
- An event that cannot be encoded (an engine bug) blocks its key only, with an error log, so later events of that
  batch never overtake it; other keys go on.
- A fatal producer error (librdkafka's `error_cb` with `fatal()`, a produce refused as fatal, e.g. the idempotent
  producer fenced or out of sequence) does not end the relay: the broken producer is abandoned (its queue
  purged), every key it held unacknowledged events of becomes a handover for this relay (`Outbox.suspect`: Kafka
  is read before anything of them is produced again), and a new producer is created in-process, at once and
  then with a backoff up to 30 s while creating one fails. Meanwhile `problem` says why the relay cannot
  publish (the processor's `/healthz` answers 503 with it).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, Producer
from prometheus_client import Counter, Gauge

import schemas
from processor.domain.time import Clock, SystemClock
from processor.kafka.clients import new_producer
from processor.kafka.wire import RegistryUnavailableError, WireCodec, WireSettings
from processor.store import Handover, OutboxEvent, Store, StoreError
from producers.avro_json import Coercion, CoercionError, convert
from producers.handover import HandoverScanError, published_event_ids, scan_config
from schemas.topics import STATUS_TOPIC, TRANSFERS_TOPIC, VRP_STATUS_TOPIC

log = structlog.get_logger("producers.relay")

PUBLISHED = Counter("dispersion_outbox_published_total", "Outbox events acknowledged by Kafka", ["topic"])
RELAY_ERRORS = Counter("dispersion_outbox_relay_errors_total", "Outbox relay failures", ["kind"])
IN_FLIGHT = Gauge("dispersion_outbox_in_flight", "Outbox events handed to the producer, not yet acknowledged")

# The field of each status record that carries the message key.
KEY_FIELDS: dict[str, str] = {STATUS_TOPIC: "batch_id", VRP_STATUS_TOPIC: "mandate_id", TRANSFERS_TOPIC: "batch_id"}
# Handed keys whose possible publications started within the same span are scanned together.
HANDOVER_GROUP_SECONDS = 300


class PoisonEventError(ValueError):
    """An outbox event that cannot be turned into its topic's record."""


@cache
def _raw_schema(topic: str) -> Any:
    return json.loads(schemas.schema(topic).path.read_text(encoding="utf-8"))


def outbox_record(event: OutboxEvent) -> dict[str, Any]:
    """The Avro record for an outbox event of a known topic (pure): its payload plus `event_id`, the status, the
    key field and `occurred_at` (the event's creation time unless the payload has one)."""
    if event.topic not in schemas.TOPICS:
        raise PoisonEventError(f"no schema for outbox topic {event.topic!r}")
    if not isinstance(event.payload, Mapping):
        raise PoisonEventError(f"payload of event {event.event_id} is not an object")
    document = dict(event.payload)
    document["event_id"] = event.event_id  # the outbox's id is the one consumers deduplicate on
    if event.status is not None:
        document["status"] = event.status
    key_field = KEY_FIELDS.get(event.topic)
    if key_field is not None and document.get(key_field) is None:
        document[key_field] = event.key
    if document.get("occurred_at") is None:
        document["occurred_at"] = event.created_at
    context = Coercion()
    try:
        record = convert(_raw_schema(event.topic), document, context, "$")
    except CoercionError as exc:
        raise PoisonEventError(f"event {event.event_id} does not fit {event.topic}: {exc}") from exc
    if context.dropped:
        log.debug("outbox_fields_dropped", topic=event.topic, event_id=event.event_id, fields=context.dropped)
    assert isinstance(record, dict)
    return record


class EventEncoder:
    """Outbox events as their topic's records in the deployment's wire format (`WireCodec`)."""

    def __init__(
        self, wire: WireSettings | None = None, topic_name: Callable[[str], str] = lambda topic: topic
    ) -> None:
        self.wire = wire or WireSettings()
        self.topic_name = topic_name
        self._codecs: dict[str, WireCodec] = {}

    def __call__(self, event: OutboxEvent) -> bytes:
        """The encoded event; `PoisonEventError` when it does not fit, `RegistryUnavailableError` when
        the registry cannot serve now (the event is not at fault)."""
        record = outbox_record(event)  # checks the topic is known
        codec = self._codecs.get(event.topic)
        if codec is None:
            codec = self._codecs[event.topic] = WireCodec(event.topic, self.wire)
        try:
            return codec.encode(record, self.topic_name(event.topic))
        except schemas.EncodeError as exc:
            raise PoisonEventError(str(exc)) from exc


@dataclass
class RelayStats:
    """Counters of one relay (for tests, logs and the health endpoint)."""

    produced: int = 0
    published: int = 0
    delivery_failures: int = 0
    store_errors: int = 0
    handovers: int = 0  # handed keys checked in Kafka and adopted
    found_published: int = 0  # events found in Kafka on a handover, marked instead of produced again


class OutboxRelay:
    """Publishes the store's outbox to Kafka. One thread drives it (`run` or repeated `step` calls)."""

    def __init__(
        self,
        store: Store,
        config: Mapping[str, Any],
        *,
        owner: str | None = None,
        topic_name: Callable[[str], str] = lambda topic: topic,
        batch_size: int = 500,
        lease_seconds: float = 60.0,
        max_in_flight: int = 5_000,
        clock: Clock | None = None,
        encoder: Callable[[OutboxEvent], bytes] | None = None,
        wire: WireSettings | None = None,
        handover_config: Mapping[str, Any] | None = None,
        handover_timeout: float = 30.0,
        producer_factory: Callable[[dict[str, Any]], Producer] | None = None,
    ) -> None:
        self.store = store
        self.owner = owner or f"relay-{uuid.uuid4().hex[:12]}"
        self.topic_name = topic_name
        self.batch_size = batch_size
        self.lease_seconds = lease_seconds
        self.max_in_flight = max_in_flight
        self.clock: Clock = clock or SystemClock()
        self.encoder = encoder or EventEncoder(wire, topic_name)
        # Consumer properties for reading the topics on a handover (default: the producer's, adapted).
        self.handover_config = dict(handover_config) if handover_config is not None else scan_config(config)
        self.handover_timeout = handover_timeout
        self._handover_backoff = 0.5
        self._handover_retry_at = 0.0  # monotonic time before which handed keys wait without a scan
        self.stats = RelayStats()
        # No local time limit: an event waits (in order) until Kafka takes it; see the module docstring. Set last,
        # over any [kafka.client] setting: a timed-out message may have been written all the same.
        self._producer_config: dict[str, Any] = {
            "linger.ms": 5,
            **config,
            "message.timeout.ms": 0,
            "error_cb": self._on_error,
        }
        self._producer_factory = producer_factory or new_producer
        self._fatal: KafkaError | None = None  # the fatal error that broke the current producer, if one did
        self._replace_backoff = 0.0
        self._replace_at = 0.0  # monotonic time of the next attempt to create a producer
        self._producer = self._producer_factory(self._producer_config)
        self._in_flight: dict[int, OutboxEvent] = {}  # handed to the producer, not yet marked published
        self._acked: list[int] = []  # acknowledged, to be marked published
        self._failed: list[tuple[int, KafkaError]] = []
        self._poisoned: dict[int, str] = {}  # outbox id -> why it cannot be encoded (logged once)
        self._suspects: set[tuple[str, str]] = set()  # keys with a failed delivery, to be checked in Kafka first
        self._lock = threading.Lock()  # delivery callbacks run inside poll/flush, on the calling thread

    @property
    def in_flight(self) -> int:
        """Events handed to the producer and not yet marked published."""
        return len(self._in_flight)

    @property
    def problem(self) -> str | None:
        """Why this relay cannot publish now (a fatal producer error not yet recovered from), or None."""
        fatal = self._fatal
        return None if fatal is None else f"no working Kafka producer: {fatal.str()}"

    def _on_error(self, error: KafkaError) -> None:
        # librdkafka's error callback (served by poll/flush on this thread); only a fatal error breaks the producer.
        if error.fatal():
            self._broken(error)
        else:
            log.warning("outbox_producer_error", error=str(error))

    def _broken(self, error: KafkaError) -> None:
        if self._fatal is None:
            self._fatal = error
            RELAY_ERRORS.labels("fatal").inc()
            log.error("outbox_producer_fatal", owner=self.owner, error=str(error))

    def _replace_producer(self) -> bool:
        """Abandon the producer a fatal error broke and create a new one; False while creating one fails.

        What the old producer held unacknowledged may be in Kafka all the same: those keys become handovers
        (checked in Kafka before anything of them is produced again), so no event is lost or sent twice."""
        if time.monotonic() < self._replace_at:
            return False
        old = self._producer
        unsure = {(event.topic, event.key) for event in self._in_flight.values()}
        with contextlib.suppress(KafkaException, RuntimeError):
            old.purge()
            old.poll(0)  # delivery reports: acknowledged ones are marked below, the rest are suspects
        self._settle()
        self._suspects |= unsure
        self._in_flight.clear()
        self._settle()  # records the suspects (or keeps them blocked until the store takes them)
        try:
            self._producer = self._producer_factory(self._producer_config)
        except (KafkaException, ValueError, RuntimeError) as exc:
            self._replace_backoff = min(30.0, max(0.5, 2 * self._replace_backoff))
            self._replace_at = time.monotonic() + self._replace_backoff
            log.error("outbox_producer_not_recreated", error=str(exc), retry_in=self._replace_backoff)
            return False
        log.warning("outbox_producer_recreated", owner=self.owner, after=str(self._fatal), unsure_keys=len(unsure))
        self._fatal = None
        self._replace_backoff = 0.0
        return True

    def _on_delivery(self, outbox_id: int, error: KafkaError | None, _message: Any) -> None:
        with self._lock:
            if error is None:
                self._acked.append(outbox_id)
            else:
                self._failed.append((outbox_id, error))

    def _settle(self) -> int:
        """Mark acknowledged events published; forget failed ones so they are claimed and produced again."""
        with self._lock:
            acked, self._acked = self._acked, []
            failed, self._failed = self._failed, []
        for outbox_id, error in failed:
            event = self._in_flight.pop(outbox_id, None)
            if error.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
                continue  # dropped on purpose by `close`: still unpublished in the outbox
            if error.fatal():
                self._broken(error)
            self.stats.delivery_failures += 1
            RELAY_ERRORS.labels("delivery").inc()
            log.error("outbox_delivery_failed", outbox_id=outbox_id, key=event.key if event else None, error=str(error))
            if event is not None:
                self._suspects.add((event.topic, event.key))  # it may be in Kafka all the same
        if self._suspects:
            suspects = set(self._suspects)
            try:
                self.store.run(lambda tx: tx.outbox.suspect(owner=self.owner, keys=suspects))
                self._suspects -= suspects
            except StoreError as exc:
                log.warning("outbox_suspect_failed", keys=len(suspects), error=str(exc))  # blocked until recorded
        if not acked:
            IN_FLIGHT.set(len(self._in_flight))
            return 0
        now = self.clock.now()
        try:
            self.store.run(lambda tx: tx.outbox.mark_published(acked, now=now))
        except StoreError as exc:
            # Delivered but not marked: keep them in flight (never produced again) and mark them next round.
            with self._lock:
                self._acked[:0] = acked
            self.stats.store_errors += 1
            RELAY_ERRORS.labels("store").inc()
            log.warning("outbox_mark_failed", events=len(acked), error=str(exc))
            return 0
        for outbox_id in acked:
            event = self._in_flight.pop(outbox_id, None)
            if event is not None:
                PUBLISHED.labels(event.topic).inc()
        self.stats.published += len(acked)
        IN_FLIGHT.set(len(self._in_flight))
        return len(acked)

    def step(self) -> int:
        """One round (see the module docstring); returns how many events were produced or marked published."""
        if self._fatal is not None and not self._replace_producer():
            return 0
        self._producer.poll(0)
        done = self._settle()
        if self._fatal is not None:
            return done  # broken while serving callbacks: replaced next round
        taken = self._claim()
        if taken is None:
            return done
        claimed, handed = taken
        blocked: set[tuple[str, str]] = set(self._suspects)
        found: set[str] = set()
        if handed:
            waiting, found = self._take_over(handed)
            blocked |= waiting
        room = self.max_in_flight - len(self._in_flight)
        for event in claimed:
            if event.id in self._in_flight or event.event_id in found:
                continue
            slot = (event.topic, event.key)
            if slot in blocked:
                continue  # an earlier event of this key did not go out: later ones must not overtake it
            if room <= 0:
                break
            try:
                value = self.encoder(event)
            except RegistryUnavailableError as exc:
                RELAY_ERRORS.labels("registry").inc()
                log.warning("outbox_registry_unavailable", key=event.key, error=str(exc))
                break  # nothing after it may overtake it; the rest waits for the next round
            except PoisonEventError as exc:
                blocked.add(slot)
                if event.id not in self._poisoned:
                    self._poisoned[event.id] = str(exc)
                    RELAY_ERRORS.labels("poison").inc()
                    log.error("outbox_event_unpublishable", outbox_id=event.id, key=event.key, error=str(exc))
                continue
            headers: list[tuple[str, str | bytes | None]] = [
                ("event_id", event.event_id.encode()),
                ("seq", str(event.seq).encode()),
            ]
            if event.headers:
                headers.extend(event.headers.items())  # str values: the client writes them as UTF-8
            try:
                self._producer.produce(
                    self.topic_name(event.topic),
                    value=value,
                    key=event.key.encode("utf-8"),
                    headers=headers,
                    on_delivery=partial(self._on_delivery, event.id),
                )
            except BufferError:
                break  # the producer's queue is full: the rest of this round waits (order kept: we stop here)
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if error is None or not (error.fatal() or error.code() == KafkaError._FATAL):
                    raise
                self._broken(error)
                break  # nothing more goes to this producer; the next round replaces it
            self._in_flight[event.id] = event
            self.stats.produced += 1
            room -= 1
            done += 1
        self._producer.poll(0)
        IN_FLIGHT.set(len(self._in_flight))
        return done

    def _claim(self) -> tuple[list[OutboxEvent], list[Handover]] | None:
        """This round's claimed events and the keys handed over to this owner, in one transaction; None when the
        store failed (counted and logged: the round ends, the next one tries again)."""
        now = self.clock.now()
        try:
            return self.store.run(
                lambda tx: (
                    tx.outbox.claim(
                        owner=self.owner,
                        now=now,
                        limit=self.batch_size,
                        lease_seconds=self.lease_seconds,
                        known=self._in_flight,  # produced already: not built again
                    ),
                    tx.outbox.handovers(owner=self.owner, now=now),
                )
            )
        except StoreError as exc:
            self.stats.store_errors += 1
            RELAY_ERRORS.labels("store").inc()
            log.warning("outbox_claim_failed", error=str(exc))
            return None

    def _take_over(self, handed: list[Handover]) -> tuple[set[tuple[str, str]], set[str]]:
        """Check Kafka for the handed keys' events and adopt the keys; returns (keys that must wait this round,
        event ids found in Kafka and now marked published).

        All scans of one round share one deadline, well inside the lease, so the keys claimed at the start of the
        round are still this relay's when it produces. Keys are scanned in groups of similar start time, newest
        first: a key handed long ago (a long scan) holds up only its own group. After a failed scan, handed keys
        wait without a scan until a backoff has passed."""
        slots = {(item.topic, item.key) for item in handed}
        if time.monotonic() < self._handover_retry_at:
            return slots, set()
        deadline = time.monotonic() + min(self.handover_timeout, self.lease_seconds / 4)
        groups: dict[tuple[str, int], list[Handover]] = {}
        for item in handed:
            groups.setdefault((item.topic, int(item.since.timestamp()) // HANDOVER_GROUP_SECONDS), []).append(item)
        found: set[str] = set()
        scanned: list[tuple[str, str]] = []
        failed = False
        for (topic, _bucket), items in sorted(groups.items(), key=lambda group: -group[0][1]):
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise HandoverScanError("no time left in this round")
                found |= published_event_ids(
                    self.handover_config,
                    self.topic_name(topic),
                    {item.key.encode("utf-8") for item in items},
                    since=min(item.since for item in items),
                    timeout=left,
                )
            except HandoverScanError as exc:
                failed = True
                RELAY_ERRORS.labels("handover").inc()
                log.warning("outbox_handover_scan_failed", topic=topic, keys=len(items), error=str(exc))
                continue
            scanned.extend((topic, item.key) for item in items)
        self._handover_backoff = min(2 * self._handover_backoff, 30.0) if failed else 0.5
        self._handover_retry_at = time.monotonic() + self._handover_backoff if failed else 0.0
        if not scanned:
            return slots, set()
        try:
            adoption = self.store.run(
                lambda tx: tx.outbox.adopt(
                    owner=self.owner, keys=scanned, published_event_ids=found, now=self.clock.now()
                )
            )
        except StoreError as exc:
            self.stats.store_errors += 1
            RELAY_ERRORS.labels("store").inc()
            log.warning("outbox_adopt_failed", keys=len(scanned), error=str(exc))
            return slots, set()
        self.stats.handovers += len(scanned)
        self.stats.found_published += adoption.marked
        log.info(
            "outbox_handover",
            keys=len(scanned),
            found_published=adoption.marked,
            previous_owners=sorted({item.previous_owner for item in handed}),
        )
        # Only the keys still held may be produced now (a key missing was fully published, or its lease lost).
        return slots - set(adoption.keys), found

    def run(self, stop: threading.Event, *, idle: float = 0.2) -> None:
        """Relay until `stop` is set, then `close`."""
        log.info("outbox_relay_started", owner=self.owner)
        try:
            while not stop.is_set():
                if self.step() == 0:
                    self._producer.poll(idle)  # waits for delivery reports as well as for time to pass
        finally:
            self.close()

    def drain(self, timeout: float = 30.0) -> bool:
        """Step until the outbox has nothing unpublished and nothing is in flight (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step()
            if not self._in_flight:
                backlog, _ = self.store.run(lambda tx: tx.outbox.backlog(), write=False)
                if backlog == 0:
                    return True
            self._producer.poll(0.05)
        return False

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (up to `timeout`), mark it, and release this relay's keys (unless something had to
        be dropped: then the keys are left to their leases, see below)."""
        self._producer.flush(timeout)
        # A broken producer's requests may still land too: treat them as dropped ones.
        purged = len(self._producer) > 0 or self._fatal is not None
        if purged:
            # Kafka is unreachable: drop the local copies; the events stay unpublished in the outbox.
            self._producer.purge()
            self._producer.poll(0)
        self._settle()
        if purged:
            # A dropped request may still be written by the broker: the keys stay leased until the lease runs out,
            # and the next owner checks Kafka for them first (they name this relay as the one that handed them).
            log.warning("outbox_relay_closed_keys_left_to_their_leases", owner=self.owner)
        else:
            try:
                self.store.run(lambda tx: tx.outbox.release(owner=self.owner))
            except StoreError as exc:
                log.warning("outbox_release_failed", error=str(exc))  # the leases run out on their own
        if self._in_flight:
            log.warning("outbox_relay_closed_with_unacknowledged", events=len(self._in_flight))
        log.info("outbox_relay_stopped", owner=self.owner, published=self.stats.published)
