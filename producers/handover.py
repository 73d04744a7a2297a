"""Which outbox events a relay that stopped (crashed, killed, closed with Kafka down) already got into Kafka.

A relay marks an event published only after the broker acknowledged it, so a relay that dies between the
acknowledgement and the mark leaves events that are in Kafka but unpublished in the outbox. The next owner of
their keys asks this module before producing anything for them: it reads the topic's partitions from the time
the previous owner first handed those keys' events to its producer (less a margin for clock skew) up to the
high watermark, and returns the `event_id` headers it finds for those keys. Those events are marked published
instead of being produced a second time.

    found = published_event_ids(config, "dispersion.status", {b"batch-1"}, since=handed_since)

Reading stops at each partition's high watermark taken at the start: with `acks=all` every acknowledged
message is below it. A relay that is still alive after losing its lease (a "zombie") could deliver after the
scan; leases are renewed on every relay round (0.2 s when idle) and last 60 s, so that needs a relay stalled
for a minute with messages queued.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

from confluent_kafka import OFFSET_END, KafkaError, KafkaException, TopicPartition

from processor.kafka.clients import new_consumer

# Producer-only librdkafka properties, dropped when a relay's producer configuration is reused for the scan.
_PRODUCER_ONLY = frozenset(
    {
        "enable.idempotence",
        "acks",
        "request.required.acks",
        "linger.ms",
        "queue.buffering.max.ms",
        "message.timeout.ms",
        "delivery.timeout.ms",
        "batch.size",
        "batch.num.messages",
        "compression.type",
        "compression.codec",
        "queue.buffering.max.messages",
        "queue.buffering.max.kbytes",
        "retries",
        "message.send.max.retries",
        "max.in.flight",
        "max.in.flight.requests.per.connection",
        "transactional.id",
        "partitioner",
        "dr_cb",
        "dr_msg_cb",
        "on_delivery",
    }
)
CLOCK_MARGIN = timedelta(seconds=60)


class HandoverScanError(RuntimeError):
    """The topic could not be read to the end in time; the keys must wait (nothing may be produced for them)."""


def scan_config(producer_config: Mapping[str, Any]) -> dict[str, Any]:
    """Consumer properties for the scan from a relay's producer properties (same broker, security, logger)."""
    config = {k: v for k, v in producer_config.items() if k not in _PRODUCER_ONLY}
    client_id = str(config.get("client.id", "dispersion-relay"))
    config.update(
        {
            "client.id": f"{client_id}-handover",
            "group.id": f"dispersion-handover-{uuid.uuid4().hex}",  # never joined: partitions are assigned
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,  # an end-of-partition event tells the scan it is done there
            "isolation.level": "read_committed",
        }
    )
    return config


def published_event_ids(
    config: Mapping[str, Any],
    topic: str,
    keys: Collection[bytes],
    *,
    since: datetime,
    timeout: float = 30.0,
) -> set[str]:
    """The `event_id` headers of `topic`'s messages keyed by one of `keys`, written since `since` (less
    `CLOCK_MARGIN`). `config`: consumer properties (`scan_config`). `HandoverScanError` when the topic cannot
    be read to its end within `timeout` seconds."""
    wanted = set(keys)
    found: set[str] = set()
    if not wanted:
        return found
    deadline = time.monotonic() + timeout
    start_ms = int((since - CLOCK_MARGIN).timestamp() * 1000)
    consumer = new_consumer(config)
    try:
        metadata = consumer.list_topics(topic, timeout=_left(deadline))
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            raise HandoverScanError(f"topic {topic} cannot be described: {described.error if described else 'absent'}")
        requests = [TopicPartition(topic, p, start_ms) for p in sorted(described.partitions)]
        starts = consumer.offsets_for_times(requests, timeout=_left(deadline))
        ends: dict[int, int] = {}
        assignment: list[TopicPartition] = []
        for start in starts:
            if start.error is not None:  # unknown is not "nothing there": the keys must wait
                raise HandoverScanError(f"{topic}[{start.partition}]: no offset for the start time: {start.error}")
            if start.offset == OFFSET_END or start.offset < 0:
                continue  # nothing written since then on this partition
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, start.partition), timeout=_left(deadline))
            if start.offset < high:
                ends[start.partition] = high
                assignment.append(TopicPartition(topic, start.partition, start.offset))
        if not assignment:
            return found
        consumer.assign(assignment)
        while ends:
            message = consumer.poll(min(1.0, _left(deadline)))
            if message is None:
                continue
            error = message.error()
            partition, offset = message.partition(), message.offset()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if partition is not None:
                        ends.pop(partition, None)
                    continue
                raise HandoverScanError(f"reading {topic}: {error}")
            if message.key() in wanted:
                event_id = dict(message.headers() or []).get("event_id")
                if isinstance(event_id, bytes):
                    found.add(event_id.decode())
            if partition is not None and offset is not None and offset + 1 >= ends.get(partition, offset + 2):
                del ends[partition]
        return found
    except KafkaException as exc:
        raise HandoverScanError(f"reading {topic}: {exc}") from exc
    finally:
        consumer.close()


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise HandoverScanError("the topic was not read to its end in time")
    return left
