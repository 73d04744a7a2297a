"""How many times each consumed Kafka message was handed to its handler without being done (issue 10).

The consumer loop counts an attempt *before* it hands a message to the handler, so an attempt that kills the
process (out of memory, a segfault in a library, SIGKILL from a supervisor) still counts; a message handled (or
dead-lettered) is cleared. A message whose count passes the loop's `poison_attempts` is dead-lettered without
being handed over again: a message that crashes the process cannot crash every restart for ever. Reached from a
transaction as `tx.attempts`; rows are keyed by where the message was read (topic, partition, offset).
"""

from __future__ import annotations

from datetime import datetime

from processor.domain.time import utc_ms
from processor.store.db import Tx


class DeliveryAttempts:
    """The `delivery_attempts` table (migration 8)."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def begin(self, topic: str, partition: int, offset: int, *, now: datetime) -> int:
        """Count one more attempt at the message; returns the attempts so far, this one included."""
        attempts = self.tx.scalar(
            "INSERT INTO delivery_attempts (topic, source_partition, source_offset, attempts, first_at, last_at)"
            " VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (topic, source_partition, source_offset)"
            " DO UPDATE SET attempts = delivery_attempts.attempts + 1, last_at = excluded.last_at RETURNING attempts",
            (topic, partition, offset, utc_ms(now), utc_ms(now)),
        )
        return int(attempts)

    def retract(self, topic: str, partition: int, offset: int) -> None:
        """Take back the last attempt: it ended in a passing failure (the store or the dead-letter topic was
        down), which says nothing against the message."""
        where = " WHERE topic = ? AND source_partition = ? AND source_offset = ?"
        self.tx.execute(f"DELETE FROM delivery_attempts{where} AND attempts <= 1", (topic, partition, offset))  # noqa: S608
        self.tx.execute(f"UPDATE delivery_attempts SET attempts = attempts - 1{where}", (topic, partition, offset))  # noqa: S608

    def clear(self, topic: str, partition: int, *, below: int) -> int:
        """Forget the partition's messages before offset `below` (handled and committed); how many rows went."""
        return self.tx.execute(
            "DELETE FROM delivery_attempts WHERE topic = ? AND source_partition = ? AND source_offset < ?",
            (topic, partition, below),
        )
