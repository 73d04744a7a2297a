"""What the money totals read and keep (issue 20): the batches of payrolls (an original batch and its retry
batches) with their state, control sum, currency, payday and the bank's per-transfer results; and `batch_money`
(migration 12), each batch's share of its payroll's totals (`processor.domain.ledger.batch_share`).

A payroll belongs to the window its original batch was created in; its retries count with it whenever they were
made. The currency is cut out of the stored batch text with a bounded substring (as `store/console.py` does);
the results are the stored report's `transaction_results` (small for the usual batch).

`MoneyBook.book` writes a batch's share inside the transaction that stores the batch or changes its state, report
or sums (`FlowRepo`, `Lifecycle.restart`, `OperatorRepo.record_retry`), so `MoneyReads.totals_created` adds up a
window with one SQL `SUM` per currency, in whole cents (exact on both engines).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import orjson

from processor.domain.ledger import BUCKETS, ENDED_PAID, Bucket, Totals, batch_amounts, batch_share, is_scheduled
from processor.domain.money import CENT
from processor.domain.time import utc_ms
from processor.store.console import like_pattern
from processor.store.db import Row, Tx, to_datetime
from processor.store.values import load_json, read_money

_CURRENCY = re.compile(r'"currency"\s*:\s*"([A-Za-z]{3})"')
_COLUMNS = "f.batch_id, f.state, f.control_sum, f.number_of_transactions, f.report, f.execute_on"
_SHARES = tuple(f"{name}_{part}" for name in BUCKETS for part in ("transfers", "cents"))
_KEPT = ("batch_id", "payroll_id", "payroll_created_at", "currency", *_SHARES)
_UPSERT = (
    f"INSERT INTO batch_money ({', '.join(_KEPT)}) VALUES ({', '.join('?' for _ in _KEPT)})"  # noqa: S608
    f" ON CONFLICT (batch_id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in _KEPT[1:])}"
)
_UNREAD: Any = object()  # `MoneyBook.book`: the report was not handed over, read it when it counts


def currency_in(text: str) -> str:
    """The batch's currency, cut out of its text (its origin account's); "?" when there is none."""
    start = text.find('"origin_account"')
    found = _CURRENCY.search(text[start : start + 300]) if start >= 0 else None
    return found.group(1).upper() if found else "?"


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
    return _results_in(orjson.loads(str(text)))  # amounts are strings in the stored report: no float on the way


def _results_in(report: object) -> list[dict[str, Any]]:
    items = report.get("transaction_results") if isinstance(report, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _row(row: Row, original: str | None = None, indexes: Sequence[int] = ()) -> MoneyRow:
    count = row["number_of_transactions"]
    day = row["execute_on"]
    return MoneyRow(
        batch_id=str(row["batch_id"]),
        original=original,
        state=str(row["state"]),
        control_sum=read_money(row["control_sum"]),
        transfers=None if count is None else int(count),
        currency=currency_in(str(row["origin"] or "")),
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

    def totals_created(self, since: datetime, until: datetime) -> list[Totals]:
        """The payrolls whose original batch was created in `[since, until)`, added up per currency (by currency):
        the sums of their batches' shares."""
        sums = ", ".join(f"SUM({column}) AS {column}" for column in _SHARES)
        rows = self.tx.fetchall(
            f"SELECT currency, COUNT(*) AS batches, {sums} FROM batch_money"  # noqa: S608
            " WHERE payroll_created_at >= ? AND payroll_created_at < ? GROUP BY currency ORDER BY currency",
            (utc_ms(since), utc_ms(until)),
        )
        found: list[Totals] = []
        for row in rows:
            totals = Totals(str(row["currency"]), batches=int(row["batches"]))
            for name in BUCKETS:
                bucket: Bucket = getattr(totals, name)
                bucket.add(int(row[f"{name}_transfers"]), (Decimal(int(row[f"{name}_cents"])) / 100).quantize(CENT))
            found.append(totals)
        return found

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


def _cents(amount: Decimal) -> int:
    return int(amount.quantize(CENT) * 100)


class MoneyBook:
    """Each batch's share of its payroll's totals (`batch_money`), inside the caller's transaction."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def book(self, batch_id: str, *, text: str | None = None, report: Any = _UNREAD) -> None:
        """Write the share of `batch_id` as it is stored now in this transaction (nothing for an unknown batch).
        `text`: the batch text just stored (its currency); `report`: the report just stored (else read when the
        batch ended at the bank)."""
        row = self.tx.fetchone(
            "SELECT f.state, f.control_sum, f.number_of_transactions, f.execute_on, f.created_at,"
            " r.original_batch_id, o.created_at AS original_created_at, m.currency FROM flows f"
            " LEFT JOIN batch_retries r ON r.retry_batch_id = f.batch_id"
            " LEFT JOIN flows o ON o.batch_id = r.original_batch_id"
            " LEFT JOIN batch_money m ON m.batch_id = f.batch_id WHERE f.batch_id = ?",
            (batch_id,),
        )
        if row is None:
            return
        state = str(row["state"])
        if text is not None:
            currency = currency_in(text)
        elif row["currency"] is not None:
            currency = str(row["currency"])
        else:
            currency = self._stored_currency(batch_id)
        results: list[dict[str, Any]] = []
        if state in ENDED_PAID:
            if report is _UNREAD:
                report = self.tx.scalar("SELECT report FROM flows WHERE batch_id = ?", (batch_id,))
                results = _results(report)
            else:
                results = _results_in(report)
        count = row["number_of_transactions"]
        day = row["execute_on"]
        amounts = batch_amounts(
            batch_id,
            currency=currency,
            state=state,
            control_sum=read_money(row["control_sum"]),
            transfers=None if count is None else int(count),
            results=results,
            scheduled=is_scheduled(state, date.fromisoformat(str(day)) if day else None),
        )
        retry = row["original_batch_id"] is not None and row["original_created_at"] is not None
        share = batch_share(amounts, retry=retry)
        payroll = str(row["original_batch_id"]) if retry else batch_id
        created = to_datetime(row["original_created_at"] if retry else row["created_at"])
        figures: list[object] = []
        for name in BUCKETS:
            bucket: Bucket = getattr(share, name)
            figures += [bucket.transfers, _cents(bucket.amount)]
        self.tx.execute(_UPSERT, (batch_id, payroll, created, currency, *figures))

    def _stored_currency(self, batch_id: str) -> str:
        find = "instr" if self.tx.dialect == "sqlite" else "strpos"
        text = self.tx.scalar(
            f"SELECT substr(payload, {find}(payload, '\"origin_account\"'), 300) FROM flows WHERE batch_id = ?",  # noqa: S608
            (batch_id,),
        )
        return currency_in(str(text or ""))

    @staticmethod
    def book_all(tx: Tx) -> None:
        """Book every stored batch (migration 12: the batches stored before it)."""
        book = MoneyBook(tx)
        for row in tx.fetchall("SELECT batch_id FROM flows ORDER BY batch_id"):
            book.book(str(row["batch_id"]))
