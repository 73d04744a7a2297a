"""Money counted once, read from the store (issue 20): a window's payrolls added up per currency, and one payroll
with every transfer's final outcome. The rules are `processor.domain.ledger`'s; the console, the admin API and
`dispersion report` all call these, so they say the same figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from processor.domain.ledger import (
    Attempt,
    BatchAmounts,
    Outcome,
    Totals,
    batch_amounts,
    is_scheduled,
    payroll_totals,
    transfer_outcomes,
)
from processor.store import StoreTx
from processor.store.money import MoneyReads, MoneyRow


def amounts_of(row: MoneyRow) -> BatchAmounts:
    """One batch's amounts (an AUTHORIZED batch with a payday is scheduled)."""
    return batch_amounts(
        row.batch_id,
        currency=row.currency,
        state=row.state,
        control_sum=row.control_sum,
        transfers=row.transfers,
        results=row.results,
        scheduled=is_scheduled(row.state, row.execute_on),
    )


def totals_between(tx: StoreTx, since: datetime, until: datetime) -> list[Totals]:
    """The payrolls whose original batch was created in `[since, until)`, added up per currency: SQL sums of the
    batches' shares the store keeps (`processor.store.money.MoneyBook`)."""
    return MoneyReads(tx.raw).totals_created(since, until)


def totals_of(tx: StoreTx, batch_ids: Sequence[str]) -> dict[str, Totals]:
    """Each batch's totals as a payroll with its retries (a listing's rows); a retry batch counts alone."""
    return {t.batch_id: t.totals for t in _payrolls_named(MoneyReads(tx.raw).payrolls_of(batch_ids))}


@dataclass(frozen=True)
class _Named:
    batch_id: str
    totals: Totals


def _payrolls_named(rows: Sequence[MoneyRow]) -> list[_Named]:
    retries: dict[str, list[BatchAmounts]] = {}
    for row in rows:
        if row.original is not None:
            retries.setdefault(row.original, []).append(amounts_of(row))
    return [
        _Named(row.batch_id, payroll_totals(amounts_of(row), retries.get(row.batch_id, ())))
        for row in rows
        if row.original is None
    ]


@dataclass(frozen=True)
class Payroll:
    """One payroll: its original batch id, its totals and every original transfer's final outcome."""

    original: str
    totals: Totals
    outcomes: dict[int, Outcome]
    batches: list[MoneyRow]


def _attempt(row: MoneyRow) -> Attempt:
    indexes = row.indexes if row.original is not None else tuple(range(row.transfers or 0))
    results = {int(r["index"]): r for r in row.results if isinstance(r.get("index"), int)}
    return Attempt(row.batch_id, row.state, indexes, results)


def payroll_of(tx: StoreTx, batch_id: str) -> Payroll | None:
    """The payroll `batch_id` belongs to (it is its original or one of its retries); None when unknown."""
    original = original_of(tx, batch_id)
    rows = MoneyReads(tx.raw).payroll(original)
    if not rows:
        return None
    first, retries = rows[0], rows[1:]
    totals = payroll_totals(amounts_of(first), [amounts_of(r) for r in retries])
    outcomes = transfer_outcomes(_attempt(first), [_attempt(r) for r in retries])
    return Payroll(original, totals, outcomes, rows)


def original_of(tx: StoreTx, batch_id: str) -> str:
    """The original batch of a retry batch made by retry-failed; the batch itself otherwise."""
    made = tx.operator.retry(batch_id)
    return made.original_batch_id if made is not None else batch_id
