"""What a file flow publishes and reports: its `dispersion.status` events and the per-transaction results.

`status_event` builds the event a move publishes (checked against the state table); `transaction_results` and
`report_summary` turn the bank's report-file into the event's `transaction_results` and its `reason` line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from processor.bank.models import FilePaymentReport
from processor.domain.batch import Transfer
from processor.domain.file_states import BatchStatus, FlowState, move
from processor.domain.outcomes import outcome_totals
from processor.domain.time import iso_ms
from processor.store import Flow, StatusEvent, StoreTx
from schemas.topics import STATUS_TOPIC

# -- status events ----------------------------------------------------------------------------------------------


def status_payload(
    flow: Flow,
    status: BatchStatus | str,
    now: datetime,
    *,
    currency: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The `dispersion.status` event for `flow` (fields of schemas/dispersion_status.v3.avsc, minus `event_id`,
    which the outbox assigns). Values come from the flow row; `overrides` replace them (e.g. the new ids). The
    outcome fields (transfers and amounts completed / failed) follow from `transaction_results`."""
    payload: dict[str, Any] = {
        "batch_id": flow.batch_id,
        "status": str(status),
        "occurred_at": iso_ms(now),
        "consent_id": flow.consent_id,
        "file_payment_id": flow.file_payment_id,
        "authorization_url": None,
        "number_of_transactions": flow.number_of_transactions,
        "control_sum": flow.control_sum,
        "currency": currency if flow.control_sum is not None or currency else None,
        "bank_status": flow.bank_status,
        "reason": None,
        "transaction_results": None,
        "retry_of": flow.retry_of,  # from the retry record, never the id
        "execute_on": flow.execute_on,  # a scheduled batch's day, on every event of it
        "attempt": flow.attempt,  # v3: a batch id submitted again after it ended counts its attempts
        "withdrawn_by": flow.withdrawn_by,
        "duplicate_of": flow.duplicate_of,  # v3: held as a possible duplicate payroll of that batch
        "duplicate_confirmed_by": flow.duplicate_confirmed_by,
    }
    payload.update(overrides)
    payload.update(outcome_totals(payload["transaction_results"]))
    return payload


def status_event(
    flow: Flow,
    target: FlowState,
    now: datetime,
    *,
    currency: str | None = None,
    replacing: bool = False,
    **overrides: Any,
) -> StatusEvent | None:
    """The event a move of `flow` to `target` publishes (None when it publishes nothing); checks the move.
    `replacing`: the flow is on a replacement consent (see `processor.domain.file_states.move`)."""
    status = move(flow.state, target, replacing=replacing)
    if status is None:
        return None
    payload = status_payload(flow, status, now, currency=currency, **overrides)
    return StatusEvent(status.value, payload, STATUS_TOPIC)


# The batch's `origin_account` is a flat object; in JSON text an unescaped `"origin_account"` followed by `:` can
# only be a member name (inside a string value its quotes would be escaped).
_ORIGIN_ACCOUNT = re.compile(r'"origin_account"\s*:\s*(\{[^{}]*\})')


def origin_currency(payload_text: str) -> str | None:
    """The origin account's currency from the stored batch text, without parsing the whole batch (a
    100,000-transfer batch is 24 MB of JSON)."""
    found = _ORIGIN_ACCOUNT.search(payload_text)
    try:
        origin = orjson.loads(found.group(1)) if found else orjson.loads(payload_text)["origin_account"]
        value = origin["currency"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None


# -- the per-transaction report ---------------------------------------------------------------------------------

_LINE_STATUS = {"settled": "COMPLETED", "rejected": "FAILED", "pending": "PENDING"}


def transaction_results(report: FilePaymentReport, transfers: Sequence[Transfer]) -> list[dict[str, Any]] | None:
    """The report's lines as the status event's `transaction_results` (batch order; `transfers`, the batch's, give
    each transfer's employee reference and amount), or None when the bank's report is not in a format we can
    read."""
    if not report.lines:
        return None
    # The results hold new ints and strs, none of the report's: the report's are parsed among its other objects,
    # and one kept object keeps its whole pymalloc arena. Sharing the lines' indexes kept about 30 MiB of a
    # 100,000-line report in memory after the report was dropped, through the completion's transaction.
    results: list[dict[str, Any]] = []
    for line in sorted(report.lines, key=lambda item: item.index):
        transfer = transfers[line.index] if 0 <= line.index < len(transfers) else None
        # Joined after an empty part and sliced: a join of one part would give back that part, the report's str.
        reason = " ".join(["", *(part for part in (line.reason_code, line.reason) if part)])[1:] or None
        results.append(
            {
                "index": line.index + 0,  # a new int (CPython shares only those up to 256)
                "employee_reference": transfer.employee_reference if transfer else None,
                "amount": transfer.amount if transfer else line.amount,
                "status": _LINE_STATUS.get(line.status.lower(), "PENDING"),
                "reason": reason,
            }
        )
    return results


def report_summary(results: list[dict[str, Any]] | None) -> str | None:
    """`2 of 3 transfers settled; 1 rejected (AC04 ...)`: a reason line for COMPLETED and FAILED events."""
    if not results:
        return None
    done = sum(1 for r in results if r["status"] == "COMPLETED")
    failed = [r for r in results if r["status"] == "FAILED"]
    text = f"{done} of {len(results)} transfers settled"
    if failed:
        codes = sorted({(r["reason"] or "no reason").split(" ")[0] for r in failed})
        text += f"; {len(failed)} rejected ({', '.join(codes)})"
    return text


def currency_in_tx(tx: StoreTx, flow: Flow) -> str | None:
    """The origin currency of a flow's batch, read in `tx`."""
    text = tx.flows.payload(flow.batch_id)
    return None if text is None else origin_currency(text)


def results_of(report: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The stored report's `transaction_results` (amounts as strings), or an empty list."""
    if not isinstance(report, Mapping):
        return []
    results = report.get("transaction_results")
    return list(results) if isinstance(results, list) else []
