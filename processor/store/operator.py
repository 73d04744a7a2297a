"""What the operator's tools read and write (issue 11): batches listed by status and time, dead letters and their
audited replays, retry batches of failed transfers. Reached from a transaction as `tx.operator`.

Dead letters are recorded here by the dead-letter publisher once the broker acknowledged them (where each one
sits on the DLQ topic, where the message was read, why); the original bytes stay on the DLQ topic, so a
100,000-transfer batch is not copied into the database. A replay is recorded before it is produced (the row
locks the dead letter against a concurrent replay) and completed with where it landed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from processor.domain.time import utc_ms
from processor.store.db import Row, Tx, to_datetime
from processor.store.money import MoneyBook
from processor.store.values import read_money
from processor.store.work import RETRY_OF_SQL

# -- batches --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchRow:
    """One flow as the admin API lists it (no payload, no secrets)."""

    batch_id: str
    integration: str
    state: str
    number_of_transactions: int | None
    control_sum: Decimal | None
    consent_id: str | None
    file_payment_id: str | None
    bank_status: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    execute_on: date | None = None  # a scheduled batch's payday
    retry_of: str | None = None  # the batch it retries, from its retry record (never from its id)


_BATCH_COLUMNS = (
    "batch_id, integration, state, number_of_transactions, control_sum, consent_id, file_payment_id, bank_status,"
    f" last_error, created_at, updated_at, execute_on, ({RETRY_OF_SQL.format(row='flows')}) AS retry_of"
)


def _batch(row: Row) -> BatchRow:
    created, updated = to_datetime(row["created_at"]), to_datetime(row["updated_at"])
    assert created is not None and updated is not None
    return BatchRow(
        batch_id=str(row["batch_id"]),
        integration=str(row["integration"]),
        state=str(row["state"]),
        number_of_transactions=None if row["number_of_transactions"] is None else int(row["number_of_transactions"]),
        control_sum=read_money(row["control_sum"]),
        consent_id=row["consent_id"],
        file_payment_id=row["file_payment_id"],
        bank_status=row["bank_status"],
        last_error=row["last_error"],
        created_at=created,
        updated_at=updated,
        execute_on=date.fromisoformat(str(row["execute_on"])) if row["execute_on"] else None,
        retry_of=None if row["retry_of"] is None else str(row["retry_of"]),
    )


# -- dead letters ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeadLetterRow:
    """A recorded dead letter: where it sits on the DLQ topic, where its message was read, why, and whether that
    message was itself a replay of an earlier dead letter (`replay_of`, as `topic/partition/offset`)."""

    id: int
    dlq_topic: str
    dlq_partition: int
    dlq_offset: int
    source_topic: str
    source_partition: int
    source_offset: int
    batch_id: str | None
    reason: str
    replay_of: str | None
    created_at: datetime

    @property
    def coordinates(self) -> str:
        """`topic/partition/offset` of the dead letter on the DLQ topic."""
        return f"{self.dlq_topic}/{self.dlq_partition}/{self.dlq_offset}"


@dataclass(frozen=True)
class ReplayRow:
    """One audited replay of a dead letter (`target_offset` None: recorded, not yet acknowledged)."""

    id: int
    dead_letter_id: int
    replayed_by: str
    reason: str
    target_topic: str
    target_partition: int | None
    target_offset: int | None
    replayed_at: datetime


def _letter(row: Row) -> DeadLetterRow:
    created = to_datetime(row["created_at"])
    assert created is not None
    return DeadLetterRow(
        id=int(row["id"]),
        dlq_topic=str(row["dlq_topic"]),
        dlq_partition=int(row["dlq_partition"]),
        dlq_offset=int(row["dlq_offset"]),
        source_topic=str(row["source_topic"]),
        source_partition=int(row["source_partition"]),
        source_offset=int(row["source_offset"]),
        batch_id=row["batch_id"],
        reason=str(row["reason"]),
        replay_of=row["replay_of"],
        created_at=created,
    )


def _replay(row: Row) -> ReplayRow:
    at = to_datetime(row["replayed_at"])
    assert at is not None
    return ReplayRow(
        id=int(row["id"]),
        dead_letter_id=int(row["dead_letter_id"]),
        replayed_by=str(row["replayed_by"]),
        reason=str(row["reason"]),
        target_topic=str(row["target_topic"]),
        target_partition=None if row["target_partition"] is None else int(row["target_partition"]),
        target_offset=None if row["target_offset"] is None else int(row["target_offset"]),
        replayed_at=at,
    )


# -- retries --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryRow:
    """A retry batch: which transfers of the original batch it pays again (original indexes, in its order)."""

    retry_batch_id: str
    original_batch_id: str
    number: int
    transfer_indexes: tuple[int, ...]
    requested_by: str
    created_at: datetime


def _retry(row: Row) -> RetryRow:
    created = to_datetime(row["created_at"])
    assert created is not None
    return RetryRow(
        retry_batch_id=str(row["retry_batch_id"]),
        original_batch_id=str(row["original_batch_id"]),
        number=int(row["number"]),
        transfer_indexes=tuple(int(i) for i in json.loads(str(row["transfer_indexes"]))),
        requested_by=str(row["requested_by"]),
        created_at=created,
    )


class OperatorRepo:
    """The operator's queries and records (see the module docstring)."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    # batches

    def batches(
        self,
        *,
        states: tuple[str, ...] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        after: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> list[BatchRow]:
        """Flows by creation time then batch id, optionally of some states and created in [since, until); `after`
        is the (created_at, batch_id) of the last row of the previous page."""
        where: list[str] = []
        params: list[Any] = []
        if states:
            where.append(f"state IN ({', '.join('?' for _ in states)})")
            params.extend(states)
        if since is not None:
            where.append("created_at >= ?")
            params.append(utc_ms(since))
        if until is not None:
            where.append("created_at < ?")
            params.append(utc_ms(until))
        if after is not None:
            where.append("(created_at > ? OR (created_at = ? AND batch_id > ?))")
            params.extend([utc_ms(after[0]), utc_ms(after[0]), after[1]])
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self.tx.fetchall(
            f"SELECT {_BATCH_COLUMNS} FROM flows{clause} ORDER BY created_at, batch_id LIMIT ?",  # noqa: S608
            (*params, limit),
        )
        return [_batch(row) for row in rows]

    def ended_between(self, since: datetime, until: datetime) -> list[BatchRow]:
        """Flows that reached a final state (last change) in [since, until), oldest first (the report)."""
        rows = self.tx.fetchall(
            f"SELECT {_BATCH_COLUMNS} FROM flows WHERE state IN ('COMPLETED', 'FAILED') AND updated_at >= ?"  # noqa: S608
            " AND updated_at < ? ORDER BY updated_at, batch_id",
            (utc_ms(since), utc_ms(until)),
        )
        return [_batch(row) for row in rows]

    def batch(self, batch_id: str) -> BatchRow | None:
        """One flow, or None."""
        row = self.tx.fetchone(f"SELECT {_BATCH_COLUMNS} FROM flows WHERE batch_id = ?", (batch_id,))  # noqa: S608
        return None if row is None else _batch(row)

    # dead letters

    def record_dead_letter(
        self,
        *,
        dlq: tuple[str, int, int],
        source: tuple[str, int, int],
        batch_id: str | None,
        reason: str,
        replay_of: str | None,
        now: datetime,
    ) -> DeadLetterRow:
        """Record a dead letter the broker acknowledged; a message dead-lettered again (a consumer that retried
        after a failed record) keeps its first record."""
        row = self.tx.fetchone(
            "INSERT INTO dead_letters (dlq_topic, dlq_partition, dlq_offset, source_topic, source_partition,"
            " source_offset, batch_id, reason, replay_of, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (source_topic, source_partition, source_offset) DO NOTHING RETURNING *",
            (*dlq, *source, batch_id, reason, replay_of, utc_ms(now)),
        )
        if row is not None:
            return _letter(row)
        existing = self.tx.fetchone(
            "SELECT * FROM dead_letters WHERE source_topic = ? AND source_partition = ? AND source_offset = ?", source
        )
        assert existing is not None
        return _letter(existing)

    def dead_letters(
        self, *, since: datetime | None = None, batch_id: str | None = None, after_id: int = 0, limit: int = 100
    ) -> list[DeadLetterRow]:
        """Dead letters in the order they were recorded, after the id `after_id` (pagination)."""
        where: list[str] = ["id > ?"]
        params: list[Any] = [after_id]
        if since is not None:
            where.append("created_at >= ?")
            params.append(utc_ms(since))
        if batch_id is not None:
            where.append("batch_id = ?")
            params.append(batch_id)
        rows = self.tx.fetchall(
            f"SELECT * FROM dead_letters WHERE {' AND '.join(where)} ORDER BY id LIMIT ?",  # noqa: S608
            (*params, limit),
        )
        return [_letter(row) for row in rows]

    def dead_letter(self, letter_id: int, *, for_update: bool = False) -> DeadLetterRow | None:
        """One dead letter; `for_update` locks it (PostgreSQL) so two replays of it are serialised."""
        lock = " FOR UPDATE" if for_update and self.tx.dialect == "postgresql" else ""
        row = self.tx.fetchone(f"SELECT * FROM dead_letters WHERE id = ?{lock}", (letter_id,))  # noqa: S608
        return None if row is None else _letter(row)

    def dead_letters_replaying(self, coordinates: str) -> list[DeadLetterRow]:
        """Dead letters whose message was a replay of the dead letter at `coordinates` (the chain, one step)."""
        rows = self.tx.fetchall("SELECT * FROM dead_letters WHERE replay_of = ? ORDER BY id", (coordinates,))
        return [_letter(row) for row in rows]

    def replays(self, letter_id: int) -> list[ReplayRow]:
        """The replays of a dead letter, oldest first."""
        rows = self.tx.fetchall("SELECT * FROM dead_letter_replays WHERE dead_letter_id = ? ORDER BY id", (letter_id,))
        return [_replay(row) for row in rows]

    def begin_replay(self, letter_id: int, *, by: str, reason: str, target_topic: str, now: datetime) -> ReplayRow:
        """Record a replay about to be produced."""
        row = self.tx.fetchone(
            "INSERT INTO dead_letter_replays (dead_letter_id, replayed_by, reason, target_topic, replayed_at)"
            " VALUES (?, ?, ?, ?, ?) RETURNING *",
            (letter_id, by, reason, target_topic, utc_ms(now)),
        )
        assert row is not None
        return _replay(row)

    def complete_replay(self, replay_id: int, partition: int, offset: int) -> None:
        """Where the replayed message landed."""
        self.tx.execute(
            "UPDATE dead_letter_replays SET target_partition = ?, target_offset = ? WHERE id = ?",
            (partition, offset, replay_id),
        )

    def drop_replay(self, replay_id: int) -> None:
        """Forget a replay the broker did not take (nothing was re-published)."""
        self.tx.execute("DELETE FROM dead_letter_replays WHERE id = ? AND target_offset IS NULL", (replay_id,))

    # retries

    def retries_of(self, original_batch_id: str) -> list[RetryRow]:
        """The retry batches of a batch, by number."""
        rows = self.tx.fetchall(
            "SELECT * FROM batch_retries WHERE original_batch_id = ? ORDER BY number", (original_batch_id,)
        )
        return [_retry(row) for row in rows]

    def retry(self, retry_batch_id: str) -> RetryRow | None:
        """The retry record of a retry batch, or None."""
        row = self.tx.fetchone("SELECT * FROM batch_retries WHERE retry_batch_id = ?", (retry_batch_id,))
        return None if row is None else _retry(row)

    def record_retry(
        self, retry_batch_id: str, original_batch_id: str, number: int, indexes: list[int], *, by: str, now: datetime
    ) -> RetryRow:
        """Record a retry batch (a concurrent one with the same number fails with `ConstraintError`)."""
        row = self.tx.fetchone(
            "INSERT INTO batch_retries (retry_batch_id, original_batch_id, number, transfer_indexes, requested_by,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
            (retry_batch_id, original_batch_id, number, json.dumps(indexes), by, utc_ms(now)),
        )
        assert row is not None
        MoneyBook(self.tx).book(retry_batch_id)  # its share counts with the original's payroll (when stored first)
        return _retry(row)
