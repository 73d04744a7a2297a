"""The consumer loop's attempt log kept in the processor's store (`consumers.loop.AttemptLog`, issue 10): the
count of attempts at a message outlives the process, so a message that kills the process is dead-lettered after
`poison_attempts` restarts instead of killing every restart.

    consumer = AtLeastOnceConsumer(config, topics, handler, dead_letters, attempts=StoreAttempts(store, clock.now))

Each call is one short transaction; a `StoreError` reaches the loop, which then retries the message later
without handing it over (the store being down is a passing failure).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from processor.store import Store


class StoreAttempts:
    """`AttemptLog` over `tx.attempts` (the `delivery_attempts` table)."""

    def __init__(self, store: Store, now: Callable[[], datetime]) -> None:
        self.store = store
        self.now = now

    def begin(self, topic: str, partition: int, offset: int) -> int:
        """Count one more attempt, before the handler runs; the attempts so far."""
        moment = self.now()
        return self.store.run(lambda tx: tx.attempts.begin(topic, partition, offset, now=moment))

    def retract(self, topic: str, partition: int, offset: int) -> None:
        """Take back the attempt just begun (it ended in a passing failure)."""
        self.store.run(lambda tx: tx.attempts.retract(topic, partition, offset))

    def clear(self, topic: str, partition: int, below: int) -> None:
        """Forget the partition's messages before offset `below` (done)."""
        self.store.run(lambda tx: tx.attempts.clear(topic, partition, below=below))
