"""The consumer's attempt log in the store (`tx.attempts`, migration 8) on both engines, through the adapter the
processor injects into its consumer loop (`consumers.attempts.StoreAttempts`): counts survive a new `Store` on the
same database (a restarted process), a retracted attempt is taken back, and a commit clears the partition's
messages below the committed offset only."""

from __future__ import annotations

from datetime import UTC, datetime

from store_fixtures import StoreTarget

from consumers.attempts import StoreAttempts
from processor.store import Cipher, Store


def _now() -> datetime:
    return datetime.now(UTC)


def _rows(store: Store) -> list[tuple[str, int, int, int]]:
    rows = store.run(
        lambda tx: tx.raw.fetchall(
            "SELECT topic, source_partition, source_offset, attempts FROM delivery_attempts"
            " ORDER BY topic, source_partition, source_offset"
        ),
        write=False,
    )
    return [(r["topic"], int(r["source_partition"]), int(r["source_offset"]), int(r["attempts"])) for r in rows]


def test_attempts_are_counted_across_restarts_retracted_and_cleared(
    store: Store, store_target: StoreTarget, store_cipher: Cipher
) -> None:
    log = StoreAttempts(store, _now)
    assert log.begin("batches", 0, 7) == 1
    assert log.begin("batches", 0, 7) == 2
    assert log.begin("batches", 1, 7) == 1  # another partition, another message

    restarted = store_target.open(store_cipher)  # a new process on the same database
    try:
        again = StoreAttempts(restarted, _now)
        assert again.begin("batches", 0, 7) == 3
        again.retract("batches", 0, 7)  # that one ended in a passing failure
        assert again.begin("batches", 0, 7) == 3
        assert again.begin("batches", 0, 9) == 1
        again.retract("batches", 0, 9)  # the only attempt taken back: no row left
        assert _rows(restarted) == [("batches", 0, 7, 3), ("batches", 1, 7, 1)]

        again.begin("batches", 0, 8)
        again.clear("batches", 0, 8)  # offsets below 8 of partition 0 committed
        assert _rows(restarted) == [("batches", 0, 8, 1), ("batches", 1, 7, 1)]
    finally:
        restarted.close()
