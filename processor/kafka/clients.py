"""The one Kafka client factory: every confluent-kafka `Producer`, `Consumer` and `AdminClient` of the project is
built here, from the deployment's settings (`processor.kafka.settings.KafkaSettings`: bootstrap, `[kafka.client]`)
through one of the configurations below.

    producer = new_producer(producer_config(settings, "submit"))     # idempotent, acks=all, murmur2_random
    consumer = new_consumer(consumer_config(settings, "processor", instance="processor-1"))   # the group
    reader = new_consumer(reader_config(settings, "status"))         # assigned partitions, no group commits
    admin = new_admin(settings.config())

Every producer gets librdkafka's `murmur2_random` partitioner whatever its configuration says (`PARTITIONER`), so
a key lands where a Java client puts it, and a batch's events stay in one partition. Every client logs librdkafka's
own lines through a `dispersion.kafka.<name>` logger (the commands a person runs collapse their repeats:
`processor.cli.kafka_noise`). confluent-kafka is imported when the first client is built, not with this module
(its admin part alone takes ~90 ms), so a command that never talks to Kafka does not pay for it. A house test
(`tests/unit/house/test_kafka_clients.py`) checks that no other module constructs a client.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from processor.kafka.settings import MAX_MESSAGE_BYTES, PARTITIONER, KafkaSettings

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient


def librdkafka_logger(name: str) -> logging.Logger:
    """A stdlib logger for librdkafka's own log lines (passed as the client's `logger`)."""
    return logging.getLogger(f"dispersion.kafka.{name}")


def producer_config(settings: KafkaSettings, name: str, **extra: Any) -> dict[str, Any]:
    """An idempotent producer: `acks=all`, no duplicates on retry, order kept per partition, keys partitioned
    as the Java client does (`PARTITIONER`). Every producer of the project is configured here."""
    return settings.config(
        **{
            "enable.idempotence": True,
            "acks": "all",
            "message.max.bytes": MAX_MESSAGE_BYTES + 1024 * 1024,
            "client.id": f"dispersion-{name}",
            "logger": librdkafka_logger(name),
            **extra,
            "partitioner": PARTITIONER,
        }
    )


def consumer_config(settings: KafkaSettings, name: str, *, instance: str | None = None, **extra: Any) -> dict[str, Any]:
    """A member of the processor's consumer group: manual commits, earliest start for a new group, large messages
    allowed; with `instance` (a name unique among the live members) and `settings.static_membership`, static
    membership."""
    membership = {"group.instance.id": instance} if instance and settings.static_membership else {}
    return settings.config(
        **{
            "group.id": settings.group_id,
            **membership,
            "client.id": f"dispersion-{name}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "max.poll.interval.ms": 300_000,
            "max.partition.fetch.bytes": MAX_MESSAGE_BYTES,
            "fetch.max.bytes": MAX_MESSAGE_BYTES,
            "statistics.interval.ms": 15_000,
            "logger": librdkafka_logger(name),
            **extra,
        }
    )


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


def new_producer(config: Mapping[str, Any]) -> Producer:
    """A producer with `config` (usually `producer_config`) and the Java client's partitioner."""
    from confluent_kafka import Producer

    return Producer({**config, "partitioner": PARTITIONER})


def new_consumer(config: Mapping[str, Any]) -> Consumer:
    """A consumer with `config` (`consumer_config` for the group, `reader_config` for a reader)."""
    from confluent_kafka import Consumer

    return Consumer(dict(config))


def new_admin(config: Mapping[str, Any]) -> AdminClient:
    """An admin client with `config` (bootstrap and `[kafka.client]`), logging through our logger."""
    from confluent_kafka.admin import AdminClient

    settings: dict[str, Any] = {"logger": librdkafka_logger("admin"), **config}
    return AdminClient(settings)
