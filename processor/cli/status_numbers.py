"""`dispersion status --details` of a retry batch: its transfers by their numbers in the original batch (issue 20).

A retry batch's status event lists its transfers by their positions in the retry (#0, #1); their numbers in the
original batch (#17, #142, as the console shows them) are on `dispersion.transfers`, whose events of a retry batch
carry `original_index` and are published in the same transaction as its final status. `OriginalNumbers` reads that
topic (every partition from the start, no group, nothing committed) when the details of a retry batch are first
printed, and reads on from where it stopped for a later one. The outbox may relay the transfer events a moment after
the status: it waits up to `wait` seconds for them, then the positions are printed and said to be positions.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from processor.domain.outcomes import RETRY_SUFFIX

if TYPE_CHECKING:
    from confluent_kafka import Consumer

    from processor.kafka.settings import KafkaSettings


class OriginalNumbers:
    """Retry batches' transfer numbers in their original batch, read from `dispersion.transfers`."""

    def __init__(self, settings: KafkaSettings, *, wait: float = 5.0) -> None:
        self.settings = settings
        self.wait = wait
        self._known: dict[str, dict[int, int]] = {}
        self._consumer: Consumer | None = None
        self._partitions = 0
        self._at_end: set[int] = set()
        self._caught_up = False  # every partition was read to its end once
        self._unreadable = False  # the topic is not there (or Kafka did not answer): positions are printed

    def of(self, batch_id: str, count: int) -> dict[int, int]:
        """Position in the retry -> number in the original, for the `count` transfers of retry batch `batch_id`
        (fewer, or none, when its transfer events are not on the topic within the wait)."""
        deadline = time.monotonic() + self.wait
        while len(self._known.get(batch_id, {})) < count and time.monotonic() < deadline:
            if not self._read_on(deadline):
                break
        return dict(self._known.get(batch_id, {}))

    def _read_on(self, deadline: float) -> bool:
        """Read what the topic holds now: the first time until every partition reported its end, later until
        nothing more arrives for a moment (or the deadline); False when the topic cannot be read."""
        from confluent_kafka import KafkaError

        consumer = self._open(deadline)
        if consumer is None:
            return False
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                if self._caught_up:
                    return True
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._at_end.add(message.partition() or 0)
                    if len(self._at_end) >= self._partitions and not self._caught_up:
                        self._caught_up = True
                        return True
                continue
            self._keep(message.key(), message.value())
        return True

    def _keep(self, key: bytes | None, value: bytes | None) -> None:
        import schemas
        from processor.kafka.wire import RegistryUnavailableError, WireCodec
        from schemas.topics import TRANSFERS_TOPIC

        batch_id = key.decode("utf-8", errors="replace") if key else ""
        if RETRY_SUFFIX.match(batch_id) is None or value is None:
            return  # only retry batches' events carry an original number (the record says; the id only filters)
        topic = self.settings.topic(TRANSFERS_TOPIC)
        try:
            record: dict[str, Any] = WireCodec(TRANSFERS_TOPIC, self.settings.wire).decode(value, topic)
        except (schemas.DecodeError, RegistryUnavailableError):
            return
        original = record.get("original_index")
        if original is not None and record.get("batch_id") == batch_id:
            self._known.setdefault(batch_id, {})[int(record["index"])] = int(original)

    def _open(self, deadline: float) -> Consumer | None:
        if self._consumer is not None or self._unreadable:
            return self._consumer
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        from processor.kafka.clients import new_consumer, reader_config
        from schemas.topics import TRANSFERS_TOPIC

        topic = self.settings.topic(TRANSFERS_TOPIC)
        consumer = new_consumer(reader_config(self.settings, "status-transfers", **{"enable.partition.eof": True}))
        try:
            metadata = consumer.list_topics(topic, timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException:
            metadata = None
        info = None if metadata is None else metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            consumer.close()
            self._unreadable = True
            return None
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in info.partitions])
        self._consumer, self._partitions = consumer, len(info.partitions)
        return consumer

    def close(self) -> None:
        """Close the topic's reader (when one was opened)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
