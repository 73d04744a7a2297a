"""Four eyes on where money goes (issue 19), and the audit of the people's actions on batches.

- A retry without corrections is a one-person action: the retry batch is made at once (`retry-failed`'s rules,
  `processor.engine.retries`) and recorded in the audit trail.
- A retry with corrected destination accounts becomes a pending request (`kind` "retry"); nothing is created
  until a different person with the `approver` or `admin` role approves it, and then the retry is planned again
  (the batch may have changed meanwhile) and made in the same transaction as the decision. Under
  `[controls] four_eyes = false` the requester's request is approved at once by the requester, and the audit
  trail says so.
- A batch held at intake for changed destination accounts (`kind` "changed_accounts") is released to the worker
  when approved, and ends FAILED (nothing was sent to the bank) when declined.

The requester may decline (withdraw) their own request but never approve it. Every step writes its audit entry in
the transaction that does it. A refused action raises `RetryError` with the HTTP status to answer (403, 404, 409).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from processor.domain.file_states import BatchStatus, FlowState
from processor.domain.masking import mask_account
from processor.domain.roles import Action, Actor, Controls
from processor.domain.validation import DEFAULT_LIMITS, ValidationLimits
from processor.engine.accounts import review_fields
from processor.engine.file_events import status_event
from processor.engine.retries import Correction, RetryError, RetryOutcome, RetryPlan, create, plan
from processor.store import ConstraintError, Store, StoreTx
from processor.store.requests import APPROVED, DECLINED, RequestRow

RETRY = "retry"  # a retry with corrected destination accounts (the other kind: accounts.CHANGED_ACCOUNTS)


@dataclass(frozen=True)
class Where:
    """Where an action came from, for the audit trail: the surface and the client's address."""

    via: str  # "console" or "admin-api"
    address: str | None = None


@dataclass(frozen=True)
class RetryAnswer:
    """What asking for a retry did: the retry outcome (a batch made, or why none), or the request that waits."""

    outcome: RetryOutcome
    request: RequestRow | None = None


def record_action(
    tx: StoreTx,
    action: str,
    actor: Actor,
    now: datetime,
    where: Where,
    subject: str | None,
    detail: Mapping[str, Any],
) -> None:
    """Append the audit entry of `actor`'s action (with their role, the surface and the address)."""
    tx.audit.record(
        action,
        actor=actor.name,
        role=actor.role.value,
        now=now,
        subject=subject,
        detail={"via": where.via, **detail},
        address=where.address,
    )


def corrections_shown(tx: StoreTx, planned: RetryPlan, corrections: Mapping[int, Correction]) -> list[dict[str, Any]]:
    """The corrections as a request shows them: each transfer's employee, amount and old -> new account masked."""
    document = tx.flows.payload_document(planned.outcome.original_batch_id)
    transfers = document.get("transactions") if isinstance(document, Mapping) else None
    transfers = transfers if isinstance(transfers, list) else []
    shown = []
    for index in sorted(corrections):
        item = transfers[index] if 0 <= index < len(transfers) else {}
        account = item.get("destination_account") or {}
        shown.append(
            {
                "index": index,
                "employee_reference": item.get("employee_reference"),
                "amount": str(item.get("amount")),
                "currency": account.get("currency"),
                "old_account": mask_account(account.get("account_number")),
                "new_account": mask_account(corrections[index].account_number),
            }
        )
    return shown


def _stored_corrections(corrections: Mapping[int, Correction]) -> dict[str, Any]:
    return {
        str(index): {"account_number": fix.account_number, "account_type": fix.account_type}
        for index, fix in sorted(corrections.items())
    }


def _read_corrections(detail: Mapping[str, Any]) -> dict[int, Correction]:
    stored = detail.get("accounts") or {}
    return {int(k): Correction(str(v["account_number"]), v.get("account_type")) for k, v in stored.items()}


async def ask_retry(
    store: Store,
    batch_id: str,
    corrections: Mapping[int, Correction] | None,
    *,
    actor: Actor,
    controls: Controls,
    where: Where,
    now: datetime,
    integrations: Collection[str] | None = None,
    limits: ValidationLimits = DEFAULT_LIMITS,
) -> RetryAnswer:
    """Retry `batch_id`'s failed transfers as `actor` (see the module docstring)."""
    if not actor.may(Action.RETRY):
        raise RetryError(403, f"{actor.name} has the {actor.role} role: retries need operator, approver or admin")
    fixes = dict(corrections or {})

    def work(tx: StoreTx) -> RetryAnswer:
        planned = plan(tx, batch_id, fixes, now=now, integrations=integrations, limits=limits)
        if planned.outcome.retry_batch_id is None:
            return RetryAnswer(planned.outcome)
        if not fixes:
            outcome = create(tx, planned, by=actor.name, now=now)
            made = {"retry_batch_id": outcome.retry_batch_id, "transfers": list(outcome.transfer_indexes)}
            record_action(tx, "retry", actor, now, where, batch_id, made)
            return RetryAnswer(outcome)
        shown = corrections_shown(tx, planned, fixes)
        detail: dict[str, Any] = {
            "corrections": shown,
            "accounts": _stored_corrections(fixes),
            "transfers": list(planned.outcome.transfer_indexes),
        }
        request = tx.requests.create(RETRY, batch_id, by=actor.name, now=now, detail=detail)
        record_action(tx, "retry_requested", actor, now, where, batch_id, {"request": request.id, "corrections": shown})
        if controls.four_eyes:
            message = (
                f"request {request.id}: the retry of {batch_id} with {len(fixes)} corrected account(s) waits for"
                " a second person (approver or admin); nothing is sent before"
            )
            waiting = RetryOutcome(batch_id, None, corrected=planned.outcome.corrected, message=message)
            return RetryAnswer(waiting, request)
        outcome = create(tx, planned, by=actor.name, now=now)
        tx.requests.decide(request.id, APPROVED, by=actor.name, now=now, outcome=outcome.retry_batch_id)
        note = {"request": request.id, "retry_batch_id": outcome.retry_batch_id, "four_eyes": False}
        record_action(tx, "request_approved", actor, now, where, batch_id, {**note, "approved_by_requester": True})
        return RetryAnswer(outcome, tx.requests.get(request.id))

    try:
        return await store.arun(work)
    except ConstraintError:
        raise RetryError(409, f"another retry of {batch_id} was created at the same moment: look again") from None


async def decide_request(
    store: Store,
    request_id: int,
    *,
    approve: bool,
    actor: Actor,
    where: Where,
    now: datetime,
    integrations: Collection[str] | None = None,
    limits: ValidationLimits = DEFAULT_LIMITS,
) -> RequestRow:
    """Approve or decline a pending request as `actor`; the request as decided."""

    def work(tx: StoreTx) -> RequestRow:
        request = tx.requests.get(request_id)
        if request is None:
            raise RetryError(404, f"request {request_id} is unknown")
        own = request.requested_by == actor.name
        if approve and own:
            raise RetryError(403, f"{actor.name} made request {request_id}: another approver or admin must approve it")
        if not own and not actor.may(Action.DECIDE):
            raise RetryError(403, f"{actor.name} has the {actor.role} role: deciding needs approver or admin")
        if request.state != "PENDING":
            raise RetryError(409, f"request {request_id} was {request.state.lower()} already by {request.decided_by}")
        outcome = _carry_out(
            tx, request, approve=approve, actor=actor, now=now, integrations=integrations, limits=limits
        )
        if not tx.requests.decide(
            request_id, APPROVED if approve else DECLINED, by=actor.name, now=now, outcome=outcome
        ):
            raise RetryError(409, f"request {request_id} was decided by someone else at the same moment")
        detail = {"request": request_id, "kind": request.kind, "requested_by": request.requested_by, "outcome": outcome}
        record_action(
            tx, "request_approved" if approve else "request_declined", actor, now, where, request.batch_id, detail
        )
        decided = tx.requests.get(request_id)
        assert decided is not None
        return decided

    try:
        return await store.arun(work)
    except ConstraintError:
        raise RetryError(409, f"request {request_id} raced another action: look again") from None


def _carry_out(
    tx: StoreTx,
    request: RequestRow,
    *,
    approve: bool,
    actor: Actor,
    now: datetime,
    integrations: Collection[str] | None,
    limits: ValidationLimits,
) -> str | None:
    """Do what an approval means (or a decline, for a held batch); the outcome to record with the request."""
    if request.kind == RETRY:
        if not approve:
            return None
        fixes = _read_corrections(request.detail)
        planned = plan(tx, request.batch_id, fixes, now=now, integrations=integrations, limits=limits)
        if planned.outcome.retry_batch_id is None:
            message = planned.outcome.message
            raise RetryError(409, f"request {request.id} cannot be carried out any more: {message}")
        made: str | None = create(tx, planned, by=request.requested_by, now=now).retry_batch_id
        return made
    flow = tx.flows.get(request.batch_id)
    if flow is None or flow.state != FlowState.RECEIVED:
        raise RetryError(409, f"batch {request.batch_id} is no longer waiting for this review")
    if approve:  # the worker creates its consent next (unless a duplicate-payroll hold still waits for its own)
        due = None if flow.duplicate_held else now
        tx.flows.update(request.batch_id, expected_version=flow.version, now=now, next_action_at=due)
        return "released"
    reason = f"the changed destination accounts were declined by {actor.name} (request {request.id})"
    event = status_event(
        flow, FlowState.FAILED, now, reason=reason, **review_fields(tx, flow.batch_id, reviewed_by=actor.name)
    )
    tx.flows.transition(flow, FlowState.FAILED, now=now, event=event, next_action_at=None, last_error=reason)
    return str(BatchStatus.FAILED)
