"""Keys land in the partition the Java client would pick: our producers (`processor.kafka.clients.producer_config`,
used by the relay, the dead-letter publisher and `dispersion submit`) produce to a real 12-partition topic, and each
message's partition, as the broker acknowledged it, equals Java's `toPositive(murmur2(key)) % 12`, computed here by
an independent implementation of Kafka's `Utils.murmur2` (checked first against the Java test vectors)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from kafka_fixtures import create_topic
from murmur2_support import java_murmur2, java_partition

from processor.kafka.clients import new_producer, producer_config
from processor.kafka.settings import KafkaSettings

pytestmark = pytest.mark.kafka

PARTITIONS = 12
# Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
# Batch ids, mandate ids and some odd keys: every tail length (len % 4), non-ASCII bytes, one byte, long keys.
KEYS = [
    *(f"NOV-2026-{i:04d}".encode() for i in range(40)),
    *(f"demo-20261123-013723-{uuid.UUID(int=i).hex[:4]}".encode() for i in range(12)),
    *(f"mandate-{'x' * n}".encode() for n in range(8)),
    "nómina-diciembre-ñ".encode(),
    b"\x00",
    b"\xff\xfe\xfd",
    bytes(range(256)),
]


def produced_partitions(
    config: Mapping[str, Any], topic: str, keys: Iterable[bytes], *, factory: bool = True
) -> dict[bytes, int]:
    """Produce one message per key (through the project's client factory, or a bare librdkafka producer as an
    ERP might use); the partition of each, from the broker's acknowledgement."""
    chosen: dict[bytes, int] = {}
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
        else:
            chosen[message.key() or b""] = message.partition() or 0

    producer = new_producer(config) if factory else Producer(dict(config))
    for key in keys:
        producer.produce(topic, key=key, value=b"{}", on_delivery=delivered)
    assert producer.flush(60) == 0, "messages left unacknowledged"
    assert errors == []
    return chosen


def test_the_independent_murmur2_reproduces_the_java_test_vectors() -> None:
    assert {data: java_murmur2(data) for data in JAVA_VECTORS} == JAVA_VECTORS


def test_our_producers_put_every_key_where_the_java_client_does(kafka_bootstrap: str) -> None:
    topic = f"test.partitions.{uuid.uuid4().hex[:10]}"
    create_topic(kafka_bootstrap, topic, partitions=PARTITIONS)
    settings = KafkaSettings(bootstrap=kafka_bootstrap)
    # A deployment's [kafka.client] and a caller's extra properties cannot switch the partitioner back.
    overridden = KafkaSettings(bootstrap=kafka_bootstrap, client={"partitioner": "consistent_random"})

    expected = {key: java_partition(key, PARTITIONS) for key in KEYS}
    assert len(set(expected.values())) == PARTITIONS  # the keys spread over every partition
    ours = produced_partitions(producer_config(settings, "partition-test"), topic, KEYS)
    assert ours == expected
    assert produced_partitions(producer_config(overridden, "partition-test", partitioner="random"), topic, KEYS) == (
        expected
    )
    # The factory itself insists, whatever configuration it is handed.
    assert produced_partitions({"bootstrap.servers": kafka_bootstrap, "partitioner": "random"}, topic, KEYS) == expected

    # The test can tell: librdkafka's default partitioner (CRC32) puts most of these keys elsewhere.
    default = produced_partitions({"bootstrap.servers": kafka_bootstrap}, topic, KEYS, factory=False)
    moved = sorted(key for key in KEYS if default[key] != expected[key])
    print(f"{len(moved)} of {len(KEYS)} keys land elsewhere with librdkafka's default partitioner")
    assert len(moved) > len(KEYS) // 2
