"""A person's acts on a batch outside its steps: withdrawing it, confirming a held one, and what its links say.

    flow = withdraw_batch(store, "HEX-2026-11-B", by="ana", reason="corrected hours", now=now)
    flow = confirm_duplicate(store, "NOV-B", by="ana", now=now)

- **Withdraw** (`dispersion withdraw`, the console, `POST /admin/batches/{id}/withdraw`): a batch whose payment was
  never asked of the bank (RECEIVED, consent created, awaiting its approver, authorised and waiting) ends WITHDRAWN:
  its approval link answers "withdrawn by NAME at TIME: REASON", its consent is never used (the redirect no longer
  exchanges a code for it), a REJECTED status event says who, when and why (`withdrawn_by`), and its batch id may
  be submitted again with new content, as a new attempt. The flow's lease is taken first, so no step of a worker
  runs meanwhile (a step running now: `WithdrawError` 409, try again in a moment).
- **Confirm a duplicate** (`dispersion confirm-duplicate`, the console, `POST /admin/batches/{id}/confirm-duplicate`,
  `submit --allow-duplicate-of`): a batch held as a possible duplicate payroll goes on to the bank.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from processor.domain.file_states import WITHDRAWABLE_STATES, BatchStatus, FlowState, resubmit_hint
from processor.domain.roles import Actor
from processor.domain.time import iso_ms
from processor.engine.accounts import CHANGED_ACCOUNTS
from processor.engine.file_events import status_payload
from processor.engine.requests import Where, record_action
from processor.store import Flow, StatusEvent, Store, StoreTx
from processor.store.lifecycle import EarlierAttempt
from schemas.topics import STATUS_TOPIC

MAX_REASON = 500


class WithdrawError(Exception):
    """The act was refused; `status`: 404 unknown batch, 400 bad input, 409 not possible now."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def withdrawn_text(by: str | None, at: datetime | None, reason: str | None) -> str:
    """`withdrawn by NAME at TIME: REASON`."""
    return f"withdrawn by {by} at {iso_ms(at) if at else '?'}: {reason}"


def refusal_of(flow: Flow) -> tuple[str, str] | None:
    """What the approval link of `flow` answers besides its state's answer: withdrawn, or held."""
    if flow.state == FlowState.WITHDRAWN:
        text = withdrawn_text(flow.withdrawn_by, flow.withdrawn_at, flow.withdraw_reason)
        return "withdrawn", f"This payment was {text}. The link no longer works."
    if flow.duplicate_of is not None and flow.duplicate_confirmed_by is None and flow.state == FlowState.RECEIVED:
        return "held", (
            f"This payment is held as a possible duplicate payroll of batch {flow.duplicate_of}: "
            f"{flow.duplicate_note}. It goes to the bank once a person confirms it "
            f"(dispersion confirm-duplicate --batch {flow.batch_id}); then open this link again."
        )
    return None


def earlier_links(attempts: Sequence[EarlierAttempt]) -> tuple[tuple[str, str], ...]:
    """(approval token, answer) of each ended attempt: its link says what became of it."""
    answers: list[tuple[str, str]] = []
    for earlier in attempts:
        if earlier.state == FlowState.WITHDRAWN:
            ended = withdrawn_text(earlier.withdrawn_by, earlier.withdrawn_at, earlier.reason)
        else:
            ended = f"ended {earlier.state} at {iso_ms(earlier.ended_at)}"
        answers.append(
            (
                earlier.approval_token,
                f"This link belongs to attempt {earlier.attempt} of batch {earlier.batch_id}, {ended}. "
                "The link no longer works; a later attempt has a link of its own.",
            )
        )
    return tuple(answers)


Audit = Callable[[StoreTx, Flow], None]
"""Writes the act's audit entry in its transaction (processor.engine.requests.record_action)."""


def withdraw_batch(
    store: Store, batch_id: str, *, by: str, reason: str, now: datetime, audit: Audit | None = None
) -> Flow:
    """End a batch not yet initiated at the bank as WITHDRAWN (see the module docstring)."""
    reason = reason.strip()
    if not reason or len(reason) > MAX_REASON:
        raise WithdrawError(400, f"a reason is required (1-{MAX_REASON} characters)")
    owner = f"withdraw-{uuid.uuid4().hex[:12]}"

    def work(tx: StoreTx) -> Flow:
        flow = tx.flows.get(batch_id, for_update=True)
        if flow is None:
            raise WithdrawError(404, f"batch {batch_id} is unknown")
        if flow.state == FlowState.WITHDRAWN:
            raise WithdrawError(409, f"batch {batch_id} was already {_withdrawn(flow)}")
        if flow.state not in WITHDRAWABLE_STATES or tx.lifecycle.payment_asked(batch_id):
            raise WithdrawError(409, _not_withdrawable(flow))
        held = tx.flows.acquire(batch_id, owner=owner, now=now, lease_seconds=60)
        if held is None:
            raise WithdrawError(409, f"a step of batch {batch_id} is running right now; try again in a moment")
        text = withdrawn_text(by, now, reason)
        payload = status_payload(held, BatchStatus.REJECTED, now, reason=text, withdrawn_by=by)
        ended = tx.flows.transition(
            held,
            FlowState.WITHDRAWN,
            now=now,
            owner=owner,
            event=StatusEvent(BatchStatus.REJECTED.value, payload, STATUS_TOPIC),
            release_lease=True,
            next_action_at=None,
            withdrawn_by=by,
            withdrawn_at=now,
            withdraw_reason=reason,
        )
        if audit is not None:
            audit(tx, ended)
        return ended

    return store.run(work)


def _withdrawn(flow: Flow) -> str:
    return withdrawn_text(flow.withdrawn_by, flow.withdrawn_at, flow.withdraw_reason)


def _not_withdrawable(flow: Flow) -> str:
    if flow.state in (FlowState.AUTHORIZED, FlowState.INITIATED):
        return f"batch {flow.batch_id} is {flow.state}: its payment was asked of the bank; it cannot be withdrawn"
    if flow.terminal:
        again = f" (to pay it after all: {resubmit_hint(flow.batch_id)})" if flow.state != FlowState.COMPLETED else ""
        return f"batch {flow.batch_id} already ended {flow.state}; nothing to withdraw{again}"
    return f"batch {flow.batch_id} is {flow.state}: it cannot be withdrawn"


def confirm_duplicate(store: Store, batch_id: str, *, by: str, now: datetime, audit: Audit | None = None) -> Flow:
    """Let a batch held as a possible duplicate payroll go on to the bank."""

    def work(tx: StoreTx) -> Flow:
        flow = tx.flows.get(batch_id, for_update=True)
        if flow is None:
            raise WithdrawError(404, f"batch {batch_id} is unknown")
        if flow.duplicate_of is None:
            raise WithdrawError(409, f"batch {batch_id} is not held as a possible duplicate payroll")
        if flow.duplicate_confirmed_by is not None:
            raise WithdrawError(
                409,
                f"batch {batch_id} was already confirmed by {flow.duplicate_confirmed_by} at "
                f"{iso_ms(flow.duplicate_confirmed_at) if flow.duplicate_confirmed_at else '?'}",
            )
        if flow.state != FlowState.RECEIVED:
            raise WithdrawError(409, f"batch {batch_id} is {flow.state}: there is nothing to confirm")
        review = tx.requests.pending_for(batch_id, CHANGED_ACCOUNTS)  # its approval releases the batch then
        confirmed = tx.lifecycle.confirm_duplicate(flow, by=by, now=now, due=review is None)
        if audit is not None:
            audit(tx, confirmed)
        return confirmed

    return store.run(work)


def withdrawable(tx: StoreTx, flow: Flow) -> bool:
    """Whether `flow` may be withdrawn now (its payment never asked of the bank)."""
    return flow.state in WITHDRAWABLE_STATES and not tx.lifecycle.payment_asked(flow.batch_id)


def act_audit(action: str, actor: Actor, where: Where, now: datetime, **detail: Any) -> Audit:
    """The audit entry of a withdrawal or a confirmation, by `actor` from `where`."""

    def write(tx: StoreTx, flow: Flow) -> None:
        record_action(tx, action, actor, now, where, flow.batch_id, {"attempt": flow.attempt, **detail})

    return write


def lifecycle_detail(tx: StoreTx, batch_id: str) -> dict[str, Any]:
    """What the admin API and the console add to a batch: its attempt and earlier ones, a withdrawal, a
    duplicate-payroll hold, and conflicting submissions that arrived for its id."""
    flow = tx.flows.get(batch_id)
    if flow is None:
        return {}
    return {
        "attempt": flow.attempt,
        "withdrawable": withdrawable(tx, flow),
        "earlier_attempts": [
            {
                "attempt": earlier.attempt,
                "status": earlier.state,
                "reason": earlier.reason,
                "withdrawn_by": earlier.withdrawn_by,
                "ended_at": iso_ms(earlier.ended_at),
            }
            for earlier in tx.lifecycle.earlier(batch_id)
        ],
        "withdrawn": None
        if flow.withdrawn_by is None
        else {
            "by": flow.withdrawn_by,
            "at": iso_ms(flow.withdrawn_at) if flow.withdrawn_at else None,
            "reason": flow.withdraw_reason,
        },
        "duplicate_of": flow.duplicate_of,
        "duplicate_note": flow.duplicate_note,
        "duplicate_held": flow.duplicate_of is not None
        and flow.duplicate_confirmed_by is None
        and flow.state == FlowState.RECEIVED,
        "duplicate_confirmed_by": flow.duplicate_confirmed_by,
        "conflicting_submissions": [
            {
                "received_at": iso_ms(verdict.decided_at),
                "message": f"{verdict.topic}/{verdict.partition}/{verdict.offset}",
                "difference": verdict.detail,
            }
            for verdict in tx.lifecycle.verdicts_of(batch_id)
        ],
    }
