"""What the money totals read (issue 20): the batches of payrolls (an original batch and its retry batches) with
their state, control sum, currency, payday and the bank's per-transfer results. Read-only.

A payroll belongs to the window its original batch was created in; its retries count with it whenever they were
made. The currency is cut out of the stored batch text with a bounded substring (as `store/console.py` does);
the results are the stored report's `transaction_results` (small for the usual batch).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import orjson

from processor.domain.time import utc_ms
from processor.store.console import like_pattern
from processor.store.db import Row, Tx, to_datetime
from processor.store.values import load_json, read_money

_CURRENCY = re.compile(r'"currency"\s*:\s*"([A-Za-z]{3})"')
_COLUMNS = "f.batch_id, f.state, f.control_sum, f.number_of_transactions, f.report, f.execute_on"


@dataclass(frozen=True)
class MoneyRow:
    """One batch of a payroll: `original` is the batch it retries (None for an original batch); `indexes` the
    original transfers a retry holds, in its order."""

    batch_id: str
    original: str | None
    state: str
    control_sum: Decimal | None
    transfers: int | None
    currency: str
    results: list[dict[str, Any]]
    execute_on: date | None
    indexes: tuple[int, ...] = ()


def _results(text: object) -> list[dict[str, Any]]:
    if text is None:
        return []
    report = orjson.loads(str(text))  # amounts are strings in the stored report: no float on the way
    items = report.get("transaction_results") if isinstance(report, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _row(row: Row, original: str | None = None, indexes: Sequence[int] = ()) -> MoneyRow:
    found = _CURRENCY.search(str(row["origin"] or ""))
    count = row["number_of_transactions"]
    day = row["execute_on"]
    return MoneyRow(
        batch_id=str(row["batch_id"]),
        original=original,
        state=str(row["state"]),
        control_sum=read_money(row["control_sum"]),
        transfers=None if count is None else int(count),
        currency=found.group(1).upper() if found else "?",
        results=_results(row["report"]),
        execute_on=date.fromisoformat(str(day)) if day else None,
        indexes=tuple(indexes),
    )


class MoneyReads:
    """The money totals' queries inside one (read) transaction."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def _origin(self) -> str:
        find = "instr" if self.tx.dialect == "sqlite" else "strpos"
        return f"substr(f.payload, {find}(f.payload, '\"origin_account\"'), 300) AS origin"

    def payrolls_created(self, since: datetime, until: datetime) -> list[MoneyRow]:
        """The original batches created in `[since, until)` and all their retry batches."""
        window = "f.created_at >= ? AND f.created_at < ?"
        not_retry = "NOT EXISTS (SELECT 1 FROM batch_retries r WHERE r.retry_batch_id = f.batch_id)"
        originals = self.tx.fetchall(
            f"SELECT {_COLUMNS}, {self._origin()} FROM flows f WHERE {window} AND {not_retry}",  # noqa: S608
            (utc_ms(since), utc_ms(until)),
        )
        retries = self.tx.fetchall(
            f"SELECT {_COLUMNS}, {self._origin()}, r.original_batch_id, r.transfer_indexes FROM batch_retries r"  # noqa: S608
            " JOIN flows f ON f.batch_id = r.retry_batch_id JOIN flows o ON o.batch_id = r.original_batch_id"
            " WHERE o.created_at >= ? AND o.created_at < ? ORDER BY r.original_batch_id, r.number",
            (utc_ms(since), utc_ms(until)),
        )
        return [_row(row) for row in originals] + [
            _row(row, str(row["original_batch_id"]), load_json(str(row["transfer_indexes"]))) for row in retries
        ]

    def payrolls_of(self, batch_ids: Sequence[str]) -> list[MoneyRow]:
        """The batches `batch_ids` (as originals) and the retry batches of each."""
        if not batch_ids:
            return []
        marks = ", ".join("?" for _ in batch_ids)
        firsts = self.tx.fetchall(
            f"SELECT {_COLUMNS}, {self._origin()} FROM flows f WHERE f.batch_id IN ({marks})",  # noqa: S608
            tuple(batch_ids),
        )
        retries = self.tx.fetchall(
            f"SELECT {_COLUMNS}, {self._origin()}, r.original_batch_id, r.transfer_indexes FROM batch_retries r"  # noqa: S608
            f" JOIN flows f ON f.batch_id = r.retry_batch_id WHERE r.original_batch_id IN ({marks})"
            " ORDER BY r.original_batch_id, r.number",
            tuple(batch_ids),
        )
        return [_row(row) for row in firsts] + [
            _row(row, str(row["original_batch_id"]), load_json(str(row["transfer_indexes"]))) for row in retries
        ]

    def payroll(self, original_batch_id: str) -> list[MoneyRow]:
        """One payroll's batches: the original first, then its retries by number (empty for an unknown batch)."""
        first = self.tx.fetchall(
            f"SELECT {_COLUMNS}, {self._origin()} FROM flows f WHERE f.batch_id = ?",  # noqa: S608
            (original_batch_id,),
        )
        retries = self.tx.fetchall(
            f"SELECT {_COLUMNS}, {self._origin()}, r.original_batch_id, r.transfer_indexes FROM batch_retries r"  # noqa: S608
            " JOIN flows f ON f.batch_id = r.retry_batch_id WHERE r.original_batch_id = ? ORDER BY r.number",
            (original_batch_id,),
        )
        if not first:
            return []
        return [_row(first[0])] + [
            _row(row, str(row["original_batch_id"]), load_json(str(row["transfer_indexes"]))) for row in retries
        ]

    def containing(self, terms: Sequence[str], *, limit: int) -> list[tuple[str, str, datetime]]:
        """Original batches (no retry batches) whose stored text holds one of `terms` (lower case, any place):
        (batch id, batch text, created at), newest first. The caller checks each transfer exactly."""
        if not terms:
            return []
        likes = " OR ".join("lower(f.payload) LIKE ? ESCAPE '\\'" for _ in terms)
        not_retry = "NOT EXISTS (SELECT 1 FROM batch_retries r WHERE r.retry_batch_id = f.batch_id)"
        rows = self.tx.fetchall(
            f"SELECT f.batch_id, f.payload, f.created_at FROM flows f WHERE ({likes}) AND {not_retry}"  # noqa: S608
            " ORDER BY f.created_at DESC, f.batch_id DESC LIMIT ?",
            (*(like_pattern(term) for term in terms), limit),
        )
        found: list[tuple[str, str, datetime]] = []
        for row in rows:
            created = to_datetime(row["created_at"])
            assert created is not None
            found.append((str(row["batch_id"]), str(row["payload"]), created))
        return found
