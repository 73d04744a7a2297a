"""A fatal Kafka producer error (issue 10) in a running processor's outbox relay: a real broker, a real PostgreSQL
store, a processor instance in this process with its real consumer, relay and HTTP server on loopback; and in the
dead-letter publisher, on the real broker.

Only the failure is faked: the relay's first producer (a real librdkafka producer, wrapped) turns fatal on its
third message, as the idempotent producer does when the broker fences it. That message reaches the broker but is
reported failed with `_FATAL`, the error callback hears of it, and every later produce is refused. The relay must
recreate its producer in-process, `/healthz` must answer 503 with the reason meanwhile and 200 after, and every
status event must be on the topic exactly once (the one written despite its failed report is found by the
handover, not sent again).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from bank_support import integration_table
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException, Producer
from kafka_fixtures import create_topic
from kafka_layer_support import read_topic
from processor_support import (
    BATCHES_TOPIC,
    STATUS_TOPIC,
    KafkaProducer,
    TopicLog,
    create_project_topics,
    payroll_batch,
    topic_names,
    unique_id,
)
from store_fixtures import StoreTarget

from processor.cli.config import Config
from processor.cli.service import Processor
from processor.devtools.processes import eventually, listening_socket
from processor.kafka.settings import KafkaSettings
from processor.store import Cipher, Store
from producers.dlq import DeadLetterError, DeadLetterPublisher

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(180)]

FATAL = KafkaError(KafkaError._FATAL, "Producer fenced by a newer instance (injected)", fatal=True)


class TrippingProducer:
    """A real producer that turns fatal on message `healthy + 1`: that message is produced and flushed (so the
    broker has it) but its delivery report carries `FATAL`; the error callback gets `FATAL` on the next poll; every
    later produce raises `KafkaException(FATAL)` as librdkafka's does after a fatal error."""

    def __init__(self, config: dict[str, Any], healthy: int, *, tripped: bool = False) -> None:
        self.real = Producer(config)
        self.error_cb: Callable[[KafkaError], None] = config["error_cb"]
        self.healthy = healthy
        self.produced = 0
        self.tripped = tripped
        self._report_error = False

    def produce(self, topic: str, **kwargs: Any) -> None:
        if self.tripped:
            raise KafkaException(FATAL)
        self.produced += 1
        if self.produced <= self.healthy:
            self.real.produce(topic, **kwargs)
            return
        report = kwargs.pop("on_delivery")
        self.real.produce(topic, **kwargs, on_delivery=lambda _error, message: report(FATAL, message))
        self.real.flush(30)  # written: only its report says it failed
        self.tripped = self._report_error = True

    def poll(self, timeout: float = 0) -> int:
        served = int(self.real.poll(timeout))
        if self._report_error:
            self._report_error = False
            self.error_cb(FATAL)
        return served

    def flush(self, timeout: float = 0) -> int:
        return int(self.real.flush(timeout))

    def purge(self, *args: Any, **kwargs: Any) -> None:
        self.real.purge(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.real)


class ProducerFactory:
    """The relay's producer factory: a `TrippingProducer` first; the replacement (a plain real producer) is made
    only once `release` is set, so the test can look at `/healthz` while the relay has no working producer."""

    def __init__(self, healthy: int) -> None:
        self.healthy = healthy
        self.release = threading.Event()
        self.made: list[Any] = []

    def __call__(self, config: dict[str, Any]) -> Any:
        if not self.made:
            producer: Any = TrippingProducer(config, self.healthy)
        else:
            self.release.wait(120)
            producer = Producer(config)
        self.made.append(producer)
        return producer


@dataclass(frozen=True)
class Consumed:
    """The parts of a consumed message a dead letter keeps."""

    source_topic: str
    source_key: bytes

    def value(self) -> bytes:
        return b"not avro"

    def key(self) -> bytes:
        return self.source_key

    def headers(self) -> list[tuple[str, bytes | None]]:
        return []

    def topic(self) -> str:
        return self.source_topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 41

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_CREATE_TIME, 1_795_000_000_000)


def test_the_dead_letter_publisher_replaces_a_producer_broken_by_a_fatal_error(kafka_bootstrap: str) -> None:
    dlq = unique_id("test.dlq")
    create_topic(kafka_bootstrap, dlq, partitions=1)
    made: list[Any] = []

    def factory(config: dict[str, Any]) -> Any:  # the first producer is already broken, the next one is real
        made.append(TrippingProducer(config, 0, tripped=True) if not made else Producer(config))
        return made[-1]

    publisher = DeadLetterPublisher({"bootstrap.servers": kafka_bootstrap}, topic=dlq, producer_factory=factory)
    message = Consumed("payroll.batches", b"ERP-GARBAGE")
    try:
        with pytest.raises(DeadLetterError, match="Producer fenced"):  # not acknowledged: the consumer retries
            publisher.publish(message, "undecodable: not avro")
        publisher.publish(message, "undecodable: not avro")  # the retry, through a new producer
    finally:
        publisher.close()
    assert len(made) == 2
    letters = read_topic(kafka_bootstrap, dlq, expect=1)
    assert [letter.key for letter in letters] == [b"ERP-GARBAGE"]


class RunningProcessor:
    """`Processor.run` on its own event loop in a thread (as `dispersion processor` runs it)."""

    def __init__(self, processor: Processor, sock: socket.socket) -> None:
        self.processor = processor
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.ready = threading.Event()
        self.exit_status: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._main, args=(sock,), daemon=True)
        self.thread.start()
        assert self.ready.wait(60), "the processor did not get ready"

    def _main(self, sock: socket.socket) -> None:
        async def serve() -> int:
            self.loop = asyncio.get_running_loop()
            return await self.processor.run(sock, ready=self.ready.set)

        self.exit_status = asyncio.run(serve())

    def stop(self) -> int | None:
        if self.loop is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.processor.stop)
        self.thread.join(60)
        return self.exit_status


def _health(url: str) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(f"{url}/healthz", timeout=10)
    return answer.status_code, answer.json()


def _wait_health(url: str, status: int, what: str, timeout: float = 60.0) -> dict[str, Any]:
    last: list[tuple[int, dict[str, Any]]] = []

    def answered() -> dict[str, Any] | None:
        last[:] = [_health(url)]
        code, body = last[0]
        return body if code == status else None

    try:
        body = eventually(answered, what=f"/healthz answering {status} ({what})", timeout=timeout, interval=0.1)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; last {last}") from None
    return body


@pytest.fixture
def store(postgres_target: StoreTarget, store_cipher: Cipher) -> Iterator[Store]:
    opened = postgres_target.open(store_cipher, pool_size=8)
    try:
        yield opened
    finally:
        opened.close()


def test_a_fatal_producer_error_is_survived_with_healthz_503_meanwhile_and_nothing_lost_or_doubled(
    kafka_bootstrap: str, store: Store, tmp_path: Path
) -> None:
    topics = topic_names("fatal")
    create_project_topics(kafka_bootstrap, topics, partitions=3)
    unserved = listening_socket()  # a bank address nobody answers (no batch here reaches the bank)
    bank = f"http://127.0.0.1:{unserved.getsockname()[1]}"
    unserved.close()
    config = Config(
        processor={"public_url": "http://127.0.0.1:8600"}, integrations={"sandbox": integration_table(bank)}
    )
    kafka = KafkaSettings(bootstrap=kafka_bootstrap, group_id=unique_id("fatal-group"), topics=topics)
    factory = ProducerFactory(healthy=2)
    processor = Processor(config, kafka, store, instance=unique_id("fatal"), grace=5, producer_factory=factory)
    running = RunningProcessor(processor, listening_socket())
    statuses = TopicLog(kafka_bootstrap, topics[STATUS_TOPIC], STATUS_TOPIC)
    producer = KafkaProducer(kafka_bootstrap, topics)
    batch_ids = [unique_id(f"ERP-FATAL-{i}") for i in range(6)]
    try:
        assert _health(running.url)[0] == 200
        for batch_id in batch_ids:  # an unknown integration: stored INVALID, an event each, no bank call
            producer.send(BATCHES_TOPIC, batch_id, {**payroll_batch(batch_id), "integration": "unknown-bank"})

        # The third event broke the producer: not ready, saying why, and the relay thread still alive.
        body = _wait_health(running.url, 503, "while the relay has no working producer")
        assert body["status"] == "unavailable"
        assert body["relay"].startswith("down: no working Kafka producer:")
        assert "Producer fenced by a newer instance (injected)" in body["reason"]
        assert body["consumer"] == "ok" and body["store"] == "ok"
        relay = processor.relay
        assert relay is not None and relay.problem is not None

        factory.release.set()  # the replacement producer may be made now
        body = _wait_health(running.url, 200, "after the producer was recreated")
        assert "reason" not in body and relay.problem is None
        assert len(factory.made) == 2

        invalid = lambda log: {e.key for e in log.events if e.status == "INVALID"} == set(batch_ids)  # noqa: E731
        statuses.wait_until(invalid, timeout=60, what="INVALID published for every batch")
    finally:
        factory.release.set()
        exit_status = running.stop()
        producer.producer.flush(10)
    assert exit_status == 0

    statuses.poll(2.0)  # anything published twice would show up by now
    counts = Counter(e.event_id for e in statuses.events)
    assert [event_id for event_id, n in counts.items() if n > 1] == []
    published = store.run(
        lambda tx: tx.raw.fetchall("SELECT event_id FROM outbox WHERE published_at IS NOT NULL"), write=False
    )
    assert {str(row["event_id"]) for row in published} <= set(counts)
    assert relay.stats.found_published >= 1  # the message written despite its failed report was not sent again
    statuses.close()
