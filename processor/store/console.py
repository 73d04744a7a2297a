"""What the operator console reads (issue 14): batches filtered, counted and paged newest first, a day's totals per
status and currency, the oldest batches waiting for approval, the retry batches of a batch. Read-only; every
instance reads the same shared store, so any instance serves the same console.

Only small columns are read for listings; a batch's currency is cut out of its stored text with a bounded
substring (the origin account object is flat, so 300 characters after its name hold it) instead of parsing
the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from processor.domain.time import utc_ms
from processor.store.db import Row, Tx, to_datetime
from processor.store.values import read_money
from processor.store.work import RETRY_OF_SQL

_COLUMNS = (
    "batch_id, integration, state, file_reference, number_of_transactions, control_sum, created_at, updated_at,"
    f" execute_on, ({RETRY_OF_SQL.format(row='flows')}) AS retry_of"
)


@dataclass(frozen=True)
class BatchSummary:
    """One batch as a listing shows it (no payload, no secrets)."""

    batch_id: str
    integration: str
    state: str
    file_reference: str | None
    number_of_transactions: int | None
    control_sum: Decimal | None
    created_at: datetime
    updated_at: datetime
    execute_on: date | None = None  # a scheduled batch's payday
    retry_of: str | None = None  # the batch it retries, from its retry record (never from its id)


@dataclass(frozen=True)
class BatchFilter:
    """The batches page's filters; empty fields do not filter. `text` matches batch id or file reference
    (case-insensitive substring); the time range is on creation, `[since, until)`."""

    states: tuple[str, ...] = ()
    integration: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    text: str | None = None

    def where(self, text_columns: tuple[str, ...], *, with_states: bool = True) -> tuple[str, list[Any]]:
        """The WHERE clause (or "") and its parameters; `text` is looked for in any of `text_columns`."""
        where: list[str] = []
        params: list[Any] = []
        if with_states and self.states:
            where.append(f"state IN ({', '.join('?' for _ in self.states)})")
            params.extend(self.states)
        if self.integration:
            where.append("integration = ?")
            params.append(self.integration)
        for clause, moment in (("created_at >= ?", self.since), ("created_at < ?", self.until)):
            if moment is not None:
                where.append(clause)
                params.append(utc_ms(moment))
        if self.text:
            where.append("(" + " OR ".join(f"lower({c}) LIKE ? ESCAPE '\\'" for c in text_columns) + ")")
            params.extend([like_pattern(self.text)] * len(text_columns))
        return (f" WHERE {' AND '.join(where)}" if where else ""), params


def _summary(row: Row) -> BatchSummary:
    created, updated = to_datetime(row["created_at"]), to_datetime(row["updated_at"])
    assert created is not None and updated is not None
    count = row["number_of_transactions"]
    return BatchSummary(
        batch_id=str(row["batch_id"]),
        integration=str(row["integration"]),
        state=str(row["state"]),
        file_reference=row["file_reference"],
        number_of_transactions=None if count is None else int(count),
        control_sum=read_money(row["control_sum"]),
        created_at=created,
        updated_at=updated,
        execute_on=date.fromisoformat(str(row["execute_on"])) if row["execute_on"] else None,
        retry_of=None if row["retry_of"] is None else str(row["retry_of"]),
    )


def _escaped(text: str) -> str:
    """`text` for a LIKE pattern, its wildcards taken literally (ESCAPE '\\')."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def like_pattern(text: str) -> str:
    """A LIKE pattern matching `text` (lower case) anywhere."""
    return f"%{_escaped(text.lower())}%"


class ConsoleReads:
    """The console's queries inside one (read) transaction."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def _where(self, wanted: BatchFilter, *, with_states: bool = True) -> tuple[str, list[Any]]:
        return wanted.where(("batch_id", "file_reference"), with_states=with_states)

    def batches(self, wanted: BatchFilter, *, offset: int = 0, limit: int = 50) -> list[BatchSummary]:
        """Matching batches, newest first (then by batch id), one page."""
        clause, params = self._where(wanted)
        rows = self.tx.fetchall(
            f"SELECT {_COLUMNS} FROM flows{clause} ORDER BY created_at DESC, batch_id DESC LIMIT ? OFFSET ?",  # noqa: S608
            (*params, limit, offset),
        )
        return [_summary(row) for row in rows]

    def state_counts(self, wanted: BatchFilter) -> dict[str, int]:
        """How many batches match the filter's other fields, per state (the counts at the top of the page)."""
        clause, params = self._where(wanted, with_states=False)
        rows = self.tx.fetchall(f"SELECT state, COUNT(*) AS n FROM flows{clause} GROUP BY state", params)  # noqa: S608
        return {str(row["state"]): int(row["n"]) for row in rows}

    def integrations(self) -> list[str]:
        """The integrations batches were stored for."""
        rows = self.tx.fetchall("SELECT DISTINCT integration FROM flows ORDER BY integration")
        return [str(row["integration"]) for row in rows]

    def states_created(self, since: datetime, until: datetime) -> dict[str, int]:
        """How many batches created in `[since, until)` are in each state (counted over the listing index)."""
        rows = self.tx.fetchall(
            "SELECT state, COUNT(*) AS n FROM flows WHERE created_at >= ? AND created_at < ? GROUP BY state",
            (utc_ms(since), utc_ms(until)),
        )
        return {str(row["state"]): int(row["n"]) for row in rows}

    def oldest_in(self, states: tuple[str, ...], *, limit: int = 10) -> list[BatchSummary]:
        """The oldest batches in one of `states` (those still waiting for approval, say)."""
        marks = ", ".join("?" for _ in states)
        rows = self.tx.fetchall(
            f"SELECT {_COLUMNS} FROM flows WHERE state IN ({marks}) ORDER BY created_at, batch_id LIMIT ?",  # noqa: S608
            (*states, limit),
        )
        return [_summary(row) for row in rows]

    def scheduled(self, *, limit: int = 20) -> list[BatchSummary]:
        """Approved batches waiting for their payday (`execute_on`), the nearest first."""
        rows = self.tx.fetchall(
            f"SELECT {_COLUMNS} FROM flows WHERE state = 'AUTHORIZED' AND execute_on IS NOT NULL"  # noqa: S608
            " ORDER BY execute_on, batch_id LIMIT ?",
            (limit,),
        )
        return [_summary(row) for row in rows]

    def retries_of(self, batch_id: str) -> list[BatchSummary]:
        """The retry batches of a batch, by their retry records (a batch merely named `ID.retry-N` is none)."""
        rows = self.tx.fetchall(
            f"SELECT {_COLUMNS} FROM flows WHERE batch_id IN"  # noqa: S608
            " (SELECT retry_batch_id FROM batch_retries WHERE original_batch_id = ?) ORDER BY created_at, batch_id",
            (batch_id,),
        )
        return [_summary(row) for row in rows]
