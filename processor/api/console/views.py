"""What each console page shows, read from the store in one read transaction (no HTTP here): plain values for the
templates, account numbers already masked, no token other than the waiting batch's approval link.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar

from processor.domain.file_states import FILE_PUBLISHES, FlowState
from processor.domain.kinds import Kind
from processor.domain.ledger import Outcome, Totals
from processor.domain.masking import mask_account
from processor.domain.outcomes import outcome_totals
from processor.domain.time import iso_ms
from processor.engine.authorization import approval_link
from processor.engine.file_events import results_of
from processor.engine.finding import Wanted, find_transfers
from processor.engine.ledger import payroll_of, totals_between, totals_of
from processor.store import StoreTx
from processor.store.console import BatchFilter, BatchSummary, ConsoleReads
from schemas.topics import STATUS_TOPIC

PAGE_SIZE = 50
TRANSFER_PAGE = 500
WAITING = (FlowState.AWAITING_AUTHORIZATION.value,)
# Who or what moves a batch to each published status (docs/architecture.md, "Where a batch's life is decided").
MOVED_BY: Mapping[str, str] = {
    "INVALID": "intake: the batch failed validation",
    "AUTHORIZATION_REQUIRED": "worker: consent created and file uploaded at the bank",
    "AUTHORIZED": "approver: authorised at the bank (redirect received)",
    "REJECTED": "approver: rejected at the bank",
    "EXPIRED": "worker: the approval deadline passed",
    "INITIATED": "worker: file payment created at the bank",
    "COMPLETED": "bank: payment report received",
    "FAILED": "bank or worker: the payment failed",
}
SORTS = ("index", "employee", "amount", "status")


def shown_status(state: str) -> str:
    """The status an operator knows (the published one: AUTHORIZATION_REQUIRED, not AWAITING_AUTHORIZATION)."""
    try:
        published = FILE_PUBLISHES.get(FlowState(state))
    except ValueError:
        return state
    return published.value if published is not None else state


# Every status the filter offers, and the stored states each covers.
STATUS_STATES: Mapping[str, tuple[str, ...]] = {
    status: tuple(s.value for s in FlowState if shown_status(s.value) == status)
    for status in dict.fromkeys(shown_status(s.value) for s in FlowState)
}


def money_text(amount: Decimal | None) -> str:
    """An amount with two decimals and thousands separators (`12,000.00`); blank when unknown."""
    return "" if amount is None else f"{amount:,.2f}"


def payday_text(day: date | None) -> str:
    """A payday as people write it: `28 Nov 2026` (blank when none)."""
    return "" if day is None else f"{day.day} {day:%b %Y}"


R = TypeVar("R")


@dataclass(frozen=True)
class ListingPage(Generic[R]):
    """A listing page (batches, mandates): one page of rows, the counts per shown status, how many match."""

    rows: list[R]
    counts: dict[str, int]
    total: int
    integrations: list[str]
    has_next: bool


def status_counts(
    by_state: Mapping[str, int], shown: Callable[[str], str], wanted: tuple[str, ...]
) -> tuple[dict[str, int], int]:
    """The counts per shown status (of every stored state), and how many rows the wanted states hold (all: none)."""
    counts: dict[str, int] = {}
    for state, n in by_state.items():
        counts[shown(state)] = counts.get(shown(state), 0) + n
    total = sum(n for state, n in by_state.items() if not wanted or state in wanted)
    return counts, total


@dataclass(frozen=True)
class BatchesPage(ListingPage[BatchSummary]):
    """The Batches page."""

    money: dict[str, Totals] = field(default_factory=dict)  # each row's payroll (a retry: itself)
    retry_ids: frozenset[str] = frozenset()
    transfers: list[dict[str, Any]] = field(default_factory=list)  # transfers matching the search text


def batches_page(tx: StoreTx, wanted: BatchFilter, page: int) -> BatchesPage:
    """One page of batches matching the filter, with the counts per status."""
    reads = ConsoleReads(tx.raw)
    rows = reads.batches(wanted, offset=page * PAGE_SIZE, limit=PAGE_SIZE + 1)
    counts, total = status_counts(reads.state_counts(wanted), shown_status, wanted.states)
    shown = rows[:PAGE_SIZE]
    money = totals_of(tx, [row.batch_id for row in shown])
    retry_ids = frozenset(row.batch_id for row in shown if row.retry_of)
    found = find_transfers(tx, Wanted(text=wanted.text), limit=PAGE_SIZE) if wanted.text else []
    return BatchesPage(shown, counts, total, reads.integrations(), len(rows) > PAGE_SIZE, money, retry_ids, found)


@dataclass(frozen=True)
class TimelineEntry:
    """One status event of a batch."""

    at: str
    status: str
    moved_by: str
    reason: str | None


@dataclass(frozen=True)
class TransferRow:
    """One transfer with its result (account masked)."""

    index: int
    employee_reference: str
    account: str
    amount: Decimal
    currency: str
    concept: str
    status: str
    reason: str
    outcome: str = ""  # the final outcome across the payroll's retries: PAID, OUTSTANDING, IN_PROGRESS, NOT_PAID
    outcome_by: str = ""  # the batch that paid it (or holds it now)


@dataclass
class BatchPage:
    """The Batch page."""

    batch: BatchSummary
    status: str
    currency: str
    consent_id: str | None
    file_payment_id: str | None
    last_error: str | None
    approval_url: str | None
    deadline: str | None
    timeline: list[TimelineEntry]
    transfers: list[TransferRow]
    transfers_total: int
    failed_count: int
    totals: dict[str, Any]
    retry_of: str | None
    retries: list[BatchSummary]
    terminal: bool
    requested_by: str | None = None
    retryable: list[TransferRow] = field(default_factory=list)
    payroll: Totals | None = None
    original: str = ""
    execute_on: date | None = None


def _transfer_rows(
    document: Any, results: Sequence[Mapping[str, Any]], state: str, numbers: Sequence[int] = ()
) -> list[TransferRow]:
    """The batch's transfers with their results; without a per-line report a transfer has its batch's outcome
    (a file that failed whole failed every transfer; one that completed paid every transfer, as retries count).
    `numbers`: a retry batch's transfers keep their numbers in the original batch."""
    items = document.get("transactions") if isinstance(document, Mapping) else None
    if not isinstance(items, list):
        return []
    by_index = {int(r["index"]): r for r in results if isinstance(r.get("index"), int)}
    rows: list[TransferRow] = []
    for position, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        index = numbers[position] if position < len(numbers) else position
        account = item.get("destination_account") if isinstance(item.get("destination_account"), Mapping) else {}
        result = by_index.get(position)
        if result is not None:
            status, reason = str(result.get("status") or ""), str(result.get("reason") or "")
        else:
            status, reason = (state if state in (FlowState.COMPLETED, FlowState.FAILED) else ""), ""
        rows.append(
            TransferRow(
                index=index,
                employee_reference=str(item.get("employee_reference") or ""),
                account=mask_account(account.get("account_number") if isinstance(account, Mapping) else None),
                amount=Decimal(str(item.get("amount", "0"))).quantize(Decimal("0.01")),
                currency=str(item.get("currency") or ""),
                concept=str(item.get("concept") or ""),
                status=status,
                reason=reason,
            )
        )
    return rows


def _sorted(rows: list[TransferRow], sort: str, descending: bool) -> list[TransferRow]:
    keys = {
        "index": lambda r: (r.index,),
        "employee": lambda r: (r.employee_reference, r.index),
        "amount": lambda r: (r.amount, r.index),
        "status": lambda r: (r.status, r.index),
    }
    return sorted(rows, key=keys.get(sort, keys["index"]), reverse=descending)


def batch_page(
    tx: StoreTx, batch_id: str, *, public_url: str, only_failed: bool, sort: str, descending: bool
) -> BatchPage | None:
    """The batch, its timeline and transfers; None when unknown."""
    flow = tx.flows.get(batch_id)
    if flow is None:
        return None
    reads = ConsoleReads(tx.raw)
    summary = BatchSummary(
        flow.batch_id,
        flow.integration,
        flow.state,
        flow.file_reference,
        flow.number_of_transactions,
        flow.control_sum,
        flow.created_at,
        flow.updated_at,
        flow.execute_on,
    )
    document = tx.flows.payload_document(batch_id)
    source = document.get("source") if isinstance(document, Mapping) else None
    made = tx.operator.retry(batch_id)
    by = f"retry of {made.original_batch_id} requested by {made.requested_by}" if made else None
    timeline = [TimelineEntry(iso_ms(flow.created_at), "RECEIVED", by or f"submitted by {source or 'unknown'}", None)]
    for event in tx.outbox.events(STATUS_TOPIC, batch_id):
        if event.status is None:
            continue
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        reason = payload.get("reason")
        timeline.append(
            TimelineEntry(
                iso_ms(event.created_at),
                event.status,
                MOVED_BY.get(event.status, "processor"),
                str(reason) if reason else None,
            )
        )
    for retry in tx.operator.retries_of(batch_id):  # the operator's actions on this batch, with their names
        moved = f"{retry.requested_by} asked to retry {len(retry.transfer_indexes)} failed transfer(s)"
        timeline.append(TimelineEntry(iso_ms(retry.created_at), "RETRY", moved, retry.retry_batch_id))
    timeline.sort(key=lambda entry: entry.at)
    results = results_of(tx.flows.report(batch_id))
    rows = _transfer_rows(document, results, flow.state, made.transfer_indexes if made else ())
    payroll = payroll_of(tx, batch_id)
    if payroll is not None:
        rows = [_with_outcome(row, payroll.outcomes.get(row.index)) for row in rows]
    currency = ""
    origin = document.get("origin_account") if isinstance(document, Mapping) else None
    if isinstance(origin, Mapping):
        currency = str(origin.get("currency") or "")
    failed = [r for r in rows if r.status == "FAILED"]
    shown = failed if only_failed else rows
    status = shown_status(flow.state)
    waiting = flow.state == FlowState.AWAITING_AUTHORIZATION
    page = BatchPage(
        batch=summary,
        status=status,
        currency=currency,
        consent_id=flow.consent_id,
        file_payment_id=flow.file_payment_id,
        last_error=flow.last_error,
        approval_url=approval_link(public_url, Kind.FILE, batch_id, flow.approval_token) if waiting else None,
        deadline=iso_ms(flow.authorization_deadline) if waiting and flow.authorization_deadline else None,
        timeline=timeline,
        transfers=_sorted(shown, sort, descending)[:TRANSFER_PAGE],
        transfers_total=len(shown),
        failed_count=len(failed),
        totals=outcome_totals(results) if results else {},
        retry_of=flow.retry_of,
        retries=reads.retries_of(payroll.original if payroll else batch_id),
        terminal=flow.terminal,
        payroll=payroll.totals if payroll else None,
        original=payroll.original if payroll else batch_id,
        execute_on=flow.execute_on,
    )
    if flow.terminal and flow.state in (FlowState.COMPLETED, FlowState.FAILED):
        page.retryable = [r for r in failed if r.outcome == "OUTSTANDING"][:TRANSFER_PAGE]
    return page


def _with_outcome(row: TransferRow, outcome: Outcome | None) -> TransferRow:
    if outcome is None:
        return row
    return replace(row, outcome=outcome.final, outcome_by=outcome.by or "")


@dataclass(frozen=True)
class Bar:
    """One bar of the overview chart (SVG coordinates computed here, drawn by the template)."""

    label: str
    count: int
    y: float
    width: float


@dataclass(frozen=True)
class OverviewPage:
    """The Month-end overview: a day, a month or a range of days."""

    label: str
    day: str
    month: str
    since: str
    until: str
    bars: list[Bar]
    height: int
    money: list[Totals]
    waiting: list[BatchSummary]
    scheduled: list[BatchSummary]


CHART_WIDTH, BAR_HEIGHT, BAR_GAP, LABEL_WIDTH = 560.0, 22, 10, 200.0


def overview_page(
    tx: StoreTx, since: datetime, until: datetime, *, label: str, form: Mapping[str, str]
) -> OverviewPage:
    """Batches per status created in `[since, until)` as chart bars, the money of the payrolls submitted then
    (each transfer counted once: `engine.ledger`), the oldest batches awaiting approval and the scheduled ones."""
    reads = ConsoleReads(tx.raw)
    per_status: dict[str, int] = {}
    for state, count in reads.states_created(since, until).items():
        status = shown_status(state)
        per_status[status] = per_status.get(status, 0) + count
    widest = max(per_status.values(), default=0) or 1
    bars = [
        Bar(status, count, position * (BAR_HEIGHT + BAR_GAP), max(1.0, CHART_WIDTH * count / widest))
        for position, (status, count) in enumerate(sorted(per_status.items()))
    ]
    return OverviewPage(
        label=label,
        day=form.get("day", ""),
        month=form.get("month", ""),
        since=form.get("from", ""),
        until=form.get("to", ""),
        bars=bars,
        height=max(1, len(bars)) * (BAR_HEIGHT + BAR_GAP),
        money=totals_between(tx, since, until),
        waiting=reads.oldest_in(WAITING, limit=10),
        scheduled=reads.scheduled(limit=20),
    )
