"""Per-transfer views of batches for the operator: one batch with every transfer's result (the admin API), and
the reconciliation report of the batches that ended in a time window (`dispersion report`).

A transfer's status is the bank's line for it when the bank reported lines; otherwise the batch's own outcome
(every transfer of a COMPLETED batch paid, of a FAILED one failed) or PENDING while the batch runs. Totals per
batch and currency add up the same results the status event's `amount_completed` / `amount_failed` add up.
Account numbers are masked; amounts are decimal strings with two decimals.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from processor.domain.file_states import FlowState
from processor.domain.masking import mask_account
from processor.domain.money import money_text
from processor.domain.outcomes import outcome_totals, split_reason
from processor.domain.time import iso_ms
from processor.engine.file_events import results_of
from processor.engine.ledger import payroll_of, totals_between
from processor.store import StoreTx
from processor.store.operator import BatchRow
from processor.store.requests import RequestRow

REPORT_COLUMNS = (
    "batch_id",
    "index",
    "employee_reference",
    "amount",
    "currency",
    "status",
    "reason_code",
    "reason_text",
    "consent_id",
    "file_payment_id",
    "completed_at",
)


def batch_summary(row: BatchRow) -> dict[str, Any]:
    """A batch as the admin API lists it."""
    return {
        "batch_id": row.batch_id,
        "integration": row.integration,
        "status": row.state,
        "number_of_transactions": row.number_of_transactions,
        "control_sum": None if row.control_sum is None else money_text(row.control_sum),
        "consent_id": row.consent_id,
        "file_payment_id": row.file_payment_id,
        "bank_status": row.bank_status,
        "last_error": row.last_error,
        "retry_of": row.retry_of,
        "execute_on": None if row.execute_on is None else row.execute_on.isoformat(),
        "created_at": iso_ms(row.created_at),
        "updated_at": iso_ms(row.updated_at),
    }


def _default_status(state: str) -> str:
    if state == FlowState.COMPLETED:
        return "COMPLETED"
    if state in (FlowState.FAILED, FlowState.REJECTED, FlowState.EXPIRED, FlowState.INVALID):
        return "FAILED"
    return "PENDING"


def transfer_lines(tx: StoreTx, row: BatchRow) -> list[dict[str, Any]]:
    """One line per transfer of a batch (see the module docstring)."""
    document = tx.flows.payload_document(row.batch_id)
    if not isinstance(document, Mapping) or not isinstance(document.get("transactions"), list):
        return []
    origin = document.get("origin_account")
    currency = origin.get("currency") if isinstance(origin, Mapping) else None
    results = {int(r["index"]): r for r in results_of(tx.flows.report(row.batch_id))}
    ended = row.state in (FlowState.COMPLETED, FlowState.FAILED)
    made = tx.operator.retry(row.batch_id)
    numbers = made.transfer_indexes if made is not None else ()  # a retry keeps the original transfer numbers
    lines: list[dict[str, Any]] = []
    for position, item in enumerate(document["transactions"]):
        if not isinstance(item, Mapping):
            continue
        index = numbers[position] if position < len(numbers) else position
        result = results.get(position)
        destination = item.get("destination_account")
        account = destination.get("account_number") if isinstance(destination, Mapping) else None
        code, text = split_reason(result.get("reason") if result else None)
        try:
            amount = money_text(Decimal(str(item.get("amount"))))
        except ArithmeticError:
            amount = str(item.get("amount"))
        lines.append(
            {
                "batch_id": row.batch_id,
                "index": index,
                "employee_reference": item.get("employee_reference"),
                "account": mask_account(account if isinstance(account, str) else None),
                "amount": amount,
                "currency": currency,
                "status": str(result["status"]) if result else _default_status(row.state),
                "reason_code": code,
                "reason_text": text,
                "consent_id": row.consent_id,
                "file_payment_id": row.file_payment_id,
                "completed_at": iso_ms(row.updated_at) if ended else None,
            }
        )
    return lines


def batch_detail(tx: StoreTx, batch_id: str) -> dict[str, Any] | None:
    """One batch with every transfer's result and its retries, and its payroll (the original and its retries):
    totals counted once and each transfer's final outcome (`outcome`, `paid_by`); None for an unknown batch."""
    row = tx.operator.batch(batch_id)
    if row is None:
        return None
    lines = transfer_lines(tx, row)
    payroll = payroll_of(tx, batch_id)
    if payroll is not None:
        for line in lines:
            outcome = payroll.outcomes.get(line["index"])
            line["outcome"] = outcome.final if outcome else None
            line["paid_by"] = outcome.by if outcome and outcome.final == "PAID" else None
    known = [line for line in lines if line["status"] != "PENDING"] if lines else None
    totals = outcome_totals(known) if row.state in (FlowState.COMPLETED, FlowState.FAILED) else outcome_totals(None)
    return {
        **batch_summary(row),
        **{k: (money_text(v) if isinstance(v, Decimal) else v) for k, v in totals.items()},
        "transfers": lines,
        "payroll": None
        if payroll is None
        else {"original_batch_id": payroll.original, "totals": payroll.totals.as_dict()},
        "retries": [
            {"batch_id": r.retry_batch_id, "number": r.number, "transfer_indexes": list(r.transfer_indexes)}
            for r in tx.operator.retries_of(batch_id)
        ],
    }


def report(tx: StoreTx, since: datetime, until: datetime) -> dict[str, Any]:
    """Every transfer of the batches that ended (COMPLETED or FAILED) in [since, until), and totals per batch and
    currency: transfers, completed / failed counts and amounts; `grand_totals`: the payrolls submitted in the
    window (each original batch with its retries) per currency, each transfer counted once by its final outcome
    (paid, failed, outstanding, in progress, scheduled, not paid: `processor.domain.ledger`)."""
    lines: list[dict[str, Any]] = []
    totals: list[dict[str, Any]] = []
    for row in tx.operator.ended_between(since, until):
        batch_lines = transfer_lines(tx, row)
        lines.extend({k: line[k] for k in REPORT_COLUMNS} for line in batch_lines)
        by_currency: dict[str | None, list[dict[str, Any]]] = {}
        for line in batch_lines:
            by_currency.setdefault(line["currency"], []).append(line)
        for currency, group in by_currency.items():
            sums = outcome_totals(group)
            totals.append(
                {
                    "batch_id": row.batch_id,
                    "currency": currency,
                    "status": row.state,
                    "transfers": len(group),
                    "transfers_completed": sums["transfers_completed"],
                    "transfers_failed": sums["transfers_failed"],
                    "amount_completed": money_text(sums["amount_completed"]),
                    "amount_failed": money_text(sums["amount_failed"]),
                }
            )
    grand = [t.as_dict() for t in totals_between(tx, since, until)]
    ended = {row["batch_id"] for row in totals}
    reviews = [
        _review(r) for batch_id in sorted(ended) for r in tx.requests.of_batch(batch_id) if r.detail.get("changed")
    ]
    return {
        "since": iso_ms(since),
        "until": iso_ms(until),
        "lines": lines,
        "totals": totals,
        "grand_totals": grand,
        "reviews": reviews,
    }


def _review(request: RequestRow) -> dict[str, Any]:
    """A batch's changed-account review as the report gives it: the flagged transfers (masked) and who decided."""
    return {
        "batch_id": request.batch_id,
        "state": request.state,
        "reviewed_by": request.decided_by if request.state in ("APPROVED", "DECLINED") else None,
        "reviewed_at": iso_ms(request.decided_at) if request.decided_at and request.state != "FLAGGED" else None,
        "transfers": [
            {k: item.get(k) for k in ("index", "employee_reference", "old_account", "new_account")}
            for item in request.detail.get("changed", [])
        ],
    }
