"""The one Kafka client factory: every confluent-kafka `Producer`, `Consumer` and `AdminClient` of the project is
built here, from the deployment's settings (`producers.kafka.KafkaSettings`: bootstrap, `[kafka.client]`) or from a
configuration that was made from them.

    producer = new_producer(producer_config(settings, "submit"))     # idempotent, acks=all, murmur2_random
    consumer = new_consumer(reader_config(settings, "status"))       # assigned partitions, no group commits
    admin = new_admin(settings.config())

Every producer gets librdkafka's `murmur2_random` partitioner whatever its configuration says (`PARTITIONER`), so
a key lands where a Java client puts it, and a batch's events stay in one partition. A house test
(`tests/unit/house/test_kafka_clients.py`) checks that no other module constructs a client.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from producers.kafka import PARTITIONER, KafkaSettings, librdkafka_logger


def new_producer(config: Mapping[str, Any]) -> Producer:
    """A producer with `config` (usually `producers.kafka.producer_config`) and the Java client's partitioner."""
    return Producer({**config, "partitioner": PARTITIONER})


def new_consumer(config: Mapping[str, Any]) -> Consumer:
    """A consumer with `config` (`consumers.loop.consumer_config` for the group, `reader_config` for a reader)."""
    return Consumer(dict(config))


def new_admin(config: Mapping[str, Any]) -> AdminClient:
    """An admin client with `config` (bootstrap and `[kafka.client]`), logging through our logger."""
    settings: dict[str, Any] = {"logger": librdkafka_logger("admin"), **config}
    return AdminClient(settings)


def reader_config(settings: KafkaSettings | Mapping[str, Any], name: str, **extra: Any) -> dict[str, Any]:
    """A consumer that reads assigned partitions and never joins a group or commits (status, demo, replay): a
    throw-away group id, no auto commit."""
    base = settings.config() if isinstance(settings, KafkaSettings) else dict(settings)
    return {
        **base,
        "group.id": f"dispersion-{name}-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "client.id": f"dispersion-{name}",
        "logger": librdkafka_logger(name),
        **extra,
    }
