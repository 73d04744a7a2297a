"""Money counted once, from the bank's results (issue 20). Pure.

A payroll is a batch and its retry batches (`ID.retry-N`); a retry pays again only transfers of the original that
failed and that no other retry paid or holds, with the same amounts. So each transfer of a payroll is counted once,
in exactly one of:

- **paid**: the bank settled it, in the original or in a retry;
- **outstanding**: the bank rejected it (or the whole file failed) and no retry has paid it or holds it yet;
- **in progress**: its batch (the original, or the retry now holding it) has not ended yet; **scheduled** is the
  part of it approved and waiting for its `execute_on` day;
- **not paid**: the original ended without any payment being attempted (REJECTED by the approver, EXPIRED,
  INVALID, withdrawn): nothing to retry, it is submitted again.

**failed** is what the bank rejected in the original (each transfer once, however many retries it took), so
`failed = outstanding + what retries paid + what retries hold`. The payroll's control sum is
`paid + outstanding + in progress + not paid`.

`batch_amounts` reads one batch's results; `batch_share` is what one batch adds to its payroll's totals (a retry
takes what it pays or holds off the outstanding), and `payroll_totals` is the sum of its batches' shares (what the
status events say: the original's `amount_failed`, each batch's `amount_completed`, the control sums of batches
not ended). The store keeps each batch's share, written with the change that changes it, so a window's totals are
SQL sums of the same shares (`processor/store/money.py`). `transfer_outcomes` follows every transfer through the
retries (the batch page). Both give the same figures (tests/unit/domain/test_ledger.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from processor.domain.money import CENT

ENDED_PAID: Final = frozenset({"COMPLETED", "FAILED"})  # the bank ran the file (its results say what was paid)
NOT_ATTEMPTED: Final = frozenset({"REJECTED", "EXPIRED", "INVALID", "WITHDRAWN"})
BUCKETS: Final = ("paid", "failed", "outstanding", "in_progress", "scheduled", "not_paid")
ZERO: Final = Decimal("0.00")


@dataclass
class Bucket:
    """A number of transfers and their amount."""

    transfers: int = 0
    amount: Decimal = ZERO

    def add(self, transfers: int, amount: Decimal) -> None:
        """Count `transfers` more for `amount` (amounts of two decimals add up exactly: no rounding here)."""
        self.transfers += transfers
        self.amount += amount


@dataclass
class Totals:
    """The buckets of one currency (see the module docstring)."""

    currency: str
    paid: Bucket = field(default_factory=Bucket)
    failed: Bucket = field(default_factory=Bucket)
    outstanding: Bucket = field(default_factory=Bucket)
    in_progress: Bucket = field(default_factory=Bucket)
    scheduled: Bucket = field(default_factory=Bucket)
    not_paid: Bucket = field(default_factory=Bucket)
    batches: int = 0

    def merge(self, other: Totals) -> None:
        """Add another payroll's totals of the same currency."""
        self.batches += other.batches
        for name in BUCKETS:
            mine: Bucket = getattr(self, name)
            theirs: Bucket = getattr(other, name)
            mine.add(theirs.transfers, theirs.amount)

    def as_dict(self) -> dict[str, Any]:
        """Plain values: `{"currency", "batches", "paid": {"transfers", "amount"}, ...}` (amounts as text)."""
        body: dict[str, Any] = {"currency": self.currency, "batches": self.batches}
        for name in BUCKETS:
            bucket: Bucket = getattr(self, name)
            body[name] = {"transfers": bucket.transfers, "amount": format(bucket.amount.quantize(CENT), "f")}
        return body


@dataclass(frozen=True)
class BatchAmounts:
    """One batch's money by its own results: paid, failed (rejected by the bank), pending (not ended), not paid
    (ended before the bank ran it); each as (transfers, amount)."""

    batch_id: str
    currency: str
    state: str
    paid: tuple[int, Decimal]
    failed: tuple[int, Decimal]
    pending: tuple[int, Decimal]
    not_paid: tuple[int, Decimal]
    scheduled: bool = False


def _amount(value: Any) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def batch_amounts(
    batch_id: str,
    *,
    currency: str,
    state: str,
    control_sum: Decimal | None,
    transfers: int | None,
    results: Sequence[Mapping[str, Any]],
    scheduled: bool = False,
) -> BatchAmounts:
    """A batch's amounts from its state and the bank's per-transfer results (`transaction_results`): a batch
    the bank ran counts its lines (without lines: everything paid when COMPLETED, everything failed when FAILED);
    a batch not ended is pending as a whole; one that ended before the bank ran it was not paid."""
    whole = (transfers or 0, (control_sum or ZERO).quantize(CENT))
    none = (0, ZERO)
    if state in ENDED_PAID and results:
        counts = {"COMPLETED": 0, "FAILED": 0, "PENDING": 0}
        sums = {"COMPLETED": ZERO, "FAILED": ZERO, "PENDING": ZERO}
        for item in results:
            status = str(item.get("status"))
            key = status if status in counts else "PENDING"
            counts[key] += 1
            sums[key] += _amount(item.get("amount", 0))
        paid, failed, pending = ((counts[k], sums[k].quantize(CENT)) for k in ("COMPLETED", "FAILED", "PENDING"))
        return BatchAmounts(batch_id, currency, state, paid, failed, pending, none, scheduled)
    if state == "COMPLETED":
        return BatchAmounts(batch_id, currency, state, whole, none, none, none, scheduled)
    if state == "FAILED":
        return BatchAmounts(batch_id, currency, state, none, whole, none, none, scheduled)
    if state in NOT_ATTEMPTED:
        return BatchAmounts(batch_id, currency, state, none, none, none, whole, scheduled)
    return BatchAmounts(batch_id, currency, state, none, none, whole, none, scheduled)


def is_scheduled(state: str, execute_on: date | None) -> bool:
    """An approved batch waiting for its payday (`execute_on`)."""
    return state == "AUTHORIZED" and execute_on is not None


def batch_share(amounts: BatchAmounts, *, retry: bool) -> Totals:
    """What one batch adds to its payroll's totals. The original adds what it paid, what the bank rejected (failed,
    and outstanding until a retry pays or holds it), what is in progress and what was not paid; a retry adds what
    it paid and what it holds in progress, and takes both off the outstanding (its own failures and a retry that
    ended unpaid leave them outstanding). Only the outstanding of a retry is negative."""
    share = Totals(amounts.currency, batches=1)
    share.paid.add(*amounts.paid)
    share.in_progress.add(*amounts.pending)
    if amounts.scheduled:
        share.scheduled.add(*amounts.pending)
    if retry:
        share.outstanding.add(-(amounts.paid[0] + amounts.pending[0]), -(amounts.paid[1] + amounts.pending[1]))
    else:
        share.failed.add(*amounts.failed)
        share.outstanding.add(*amounts.failed)
        share.not_paid.add(*amounts.not_paid)
    return share


def payroll_totals(original: BatchAmounts, retries: Iterable[BatchAmounts]) -> Totals:
    """One payroll's totals: the sum of its batches' shares (see the module docstring)."""
    totals = batch_share(original, retry=False)
    for retry in retries:
        totals.merge(batch_share(retry, retry=True))
    return totals


# -- one transfer through the retries ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One batch of a payroll as `transfer_outcomes` reads it: its state, which original transfers it holds (in
    its own order; the original holds all) and its results by its own positions."""

    batch_id: str
    state: str
    indexes: Sequence[int]
    results: Mapping[int, Mapping[str, Any]]


@dataclass(frozen=True)
class Outcome:
    """A transfer's final outcome: `PAID` (by `by`), `OUTSTANDING`, `IN_PROGRESS` (in `by`), `NOT_PAID`; and
    whether the bank rejected it in the original, with the last reason the bank gave."""

    final: str
    by: str | None
    failed_in_original: bool
    reason: str | None


def _status_in(attempt: Attempt, position: int) -> tuple[str, str | None]:
    """COMPLETED, FAILED, PENDING or NOT_PAID for one transfer of one batch."""
    result = attempt.results.get(position)
    if attempt.state in ENDED_PAID and result is not None:
        status = str(result.get("status"))
        reason = result.get("reason")
        return (status if status in ("COMPLETED", "FAILED") else "PENDING"), (str(reason) if reason else None)
    if attempt.state == "COMPLETED":
        return "COMPLETED", None
    if attempt.state == "FAILED":
        return "FAILED", None
    if attempt.state in NOT_ATTEMPTED:
        return "NOT_PAID", None
    return "PENDING", None


def transfer_outcomes(original: Attempt, retries: Sequence[Attempt]) -> dict[int, Outcome]:
    """Every original transfer's final outcome (by original index), following the retries in their order."""
    outcomes: dict[int, Outcome] = {}
    for position, index in enumerate(original.indexes):
        status, reason = _status_in(original, position)
        final = {"COMPLETED": "PAID", "FAILED": "OUTSTANDING", "PENDING": "IN_PROGRESS"}.get(status, "NOT_PAID")
        by = original.batch_id if final in ("PAID", "IN_PROGRESS") else None
        outcomes[index] = Outcome(final, by, status == "FAILED", reason)
    for retry in retries:
        for position, index in enumerate(retry.indexes):
            before = outcomes.get(index)
            if before is None:
                continue
            status, reason = _status_in(retry, position)
            if status == "COMPLETED":
                outcomes[index] = Outcome("PAID", retry.batch_id, before.failed_in_original, None)
            elif status == "PENDING":
                outcomes[index] = Outcome("IN_PROGRESS", retry.batch_id, before.failed_in_original, before.reason)
            elif status == "FAILED":
                outcomes[index] = Outcome("OUTSTANDING", None, before.failed_in_original, reason or before.reason)
    return outcomes


# -- windows ------------------------------------------------------------------------------------------------------


def day_window(text: str) -> tuple[datetime, datetime]:
    """`2026-11-30` as `[that midnight UTC, the next)`; ValueError when it is not such a date."""
    start = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    return start, start + timedelta(days=1)


def month_window(text: str) -> tuple[datetime, datetime]:
    """`2026-11` as `[its first day's midnight UTC, the next month's)`; ValueError when it is not such a month."""
    start = datetime.strptime(text, "%Y-%m").replace(tzinfo=UTC)
    following = (start + timedelta(days=32)).replace(day=1)
    return start, following
