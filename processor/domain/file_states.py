"""The file payment's state machine (flow A), pure: its states, its state table, what each move publishes.

One flow per batch:

    RECEIVED ──A1──▶ CONSENT_CREATED ──A2──▶ AWAITING_AUTHORIZATION ──redirect──▶ AUTHORIZED ──A3──▶ INITIATED
       │                  │                      │        │                          │              │
       └──▶ INVALID       └──▶ FAILED            │        └──▶ REJECTED              └──▶ FAILED    ├──▶ COMPLETED
       └──▶ FAILED                               └──▶ EXPIRED (authorization deadline passed)        └──▶ FAILED
                                                 (REJECTED also when the consent reads Rejected at the bank)

A person may withdraw a flow before its payment is asked of the bank (`WITHDRAWABLE_STATES` ──▶ WITHDRAWN, published
as REJECTED with who, when and why). A batch id whose flow ended withdrawn, REJECTED, EXPIRED, INVALID or FAILED
before anything was paid may be submitted again: a new attempt of the same row (`attempt` 2, 3, ...), whose statuses
start over (processor.store.lifecycle).

A scheduled batch (`execute_on`) waits in AUTHORIZED until the start of its day in the integration's time zone
(`Wait.EXECUTE_ON`); the payment step itself refuses to run earlier (`processor.engine.file_schedule`).

One move goes back: AWAITING_AUTHORIZATION ──▶ RECEIVED when the bank holds the consent authorised but its
tokens never reached us (the answer to the code exchange was lost): the flow creates a fresh consent behind the
same approval link, and publishes nothing for it (AUTHORIZATION_REQUIRED went out once already).

`FILE_TABLE` (see `processor.domain.steps`) is what the engine dispatches on: the handler of each state, the
legal moves, how the flow waits. The VRP state machines are in `processor.domain.vrp_states`.

Entering some states publishes a status event (DESIGN.md "Contracts"); statuses only move forward and each
is published once per batch, which the store's outbox enforces with `STATUS_RANKS`.
"""

from __future__ import annotations

from enum import StrEnum

from processor.domain.steps import Approval, Rule, Wait


class FlowState(StrEnum):
    """The states of a file flow (the store's `flows.state` column holds these values)."""

    RECEIVED = "RECEIVED"
    CONSENT_CREATED = "CONSENT_CREATED"
    AWAITING_AUTHORIZATION = "AWAITING_AUTHORIZATION"
    AUTHORIZED = "AUTHORIZED"
    INITIATED = "INITIATED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    INVALID = "INVALID"
    WITHDRAWN = "WITHDRAWN"  # withdrawn by a person before anything was initiated; published as REJECTED


class IllegalTransitionError(ValueError):
    """A move the state machine does not allow."""


class BatchStatus(StrEnum):
    """Statuses published on `dispersion.status`."""

    INVALID = "INVALID"
    AUTHORIZATION_REQUIRED = "AUTHORIZATION_REQUIRED"
    AUTHORIZED = "AUTHORIZED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    INITIATED = "INITIATED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


_S = FlowState
FILE_TABLE: dict[FlowState, Rule[FlowState]] = {
    _S.RECEIVED: Rule("create_consent", frozenset({_S.CONSENT_CREATED, _S.INVALID, _S.FAILED})),
    _S.CONSENT_CREATED: Rule("upload_file", frozenset({_S.AWAITING_AUTHORIZATION, _S.FAILED})),
    _S.AWAITING_AUTHORIZATION: Rule(
        "watch_authorization",
        frozenset({_S.AUTHORIZED, _S.REJECTED, _S.EXPIRED, _S.RECEIVED}),
        Wait.WATCH,
        Approval.AWAITING,
    ),
    _S.AUTHORIZED: Rule("create_payment", frozenset({_S.INITIATED, _S.FAILED}), Wait.EXECUTE_ON, Approval.AUTHORIZED),
    _S.INITIATED: Rule("poll_payment", frozenset({_S.COMPLETED, _S.FAILED}), Wait.POLL, Approval.AUTHORIZED),
    _S.COMPLETED: Rule(None, frozenset(), approval=Approval.AUTHORIZED),
    _S.FAILED: Rule(None, frozenset(), approval=Approval.ENDED),
    _S.REJECTED: Rule(None, frozenset(), approval=Approval.REJECTED),
    _S.EXPIRED: Rule(None, frozenset(), approval=Approval.EXPIRED),
    _S.INVALID: Rule(None, frozenset(), approval=Approval.ENDED),
    _S.WITHDRAWN: Rule(None, frozenset(), approval=Approval.ENDED),
}

# Withdrawal (`dispersion withdraw`) is a person's act, not a step of the table: it may end a flow in these
# states, as long as no payment was asked of the bank (processor.engine.withdrawal checks that too).
WITHDRAWABLE_STATES = frozenset({_S.RECEIVED, _S.CONSENT_CREATED, _S.AWAITING_AUTHORIZATION, _S.AUTHORIZED})
# A batch id whose flow ended in one of these (FAILED only before anything was paid) may be submitted again as a
# new attempt (processor.store.lifecycle).
RESUBMITTABLE_STATES = frozenset({_S.WITHDRAWN, _S.REJECTED, _S.EXPIRED, _S.INVALID, _S.FAILED})


def resubmit_hint(batch_id: str) -> str:
    """The exact command that pays an ended batch id again (a new attempt)."""
    return f"dispersion submit EXPORT --batch-id {batch_id}"


TERMINAL_FLOW_STATES = frozenset(state for state, rule in FILE_TABLE.items() if rule.terminal)

FILE_PUBLISHES: dict[FlowState, BatchStatus] = {
    FlowState.INVALID: BatchStatus.INVALID,
    FlowState.AWAITING_AUTHORIZATION: BatchStatus.AUTHORIZATION_REQUIRED,
    FlowState.AUTHORIZED: BatchStatus.AUTHORIZED,
    FlowState.REJECTED: BatchStatus.REJECTED,
    FlowState.EXPIRED: BatchStatus.EXPIRED,
    FlowState.INITIATED: BatchStatus.INITIATED,
    FlowState.COMPLETED: BatchStatus.COMPLETED,
    FlowState.FAILED: BatchStatus.FAILED,
    FlowState.WITHDRAWN: BatchStatus.REJECTED,
}

# Order of the `dispersion.status` values (DESIGN.md), the only copy: a status may only follow one of lower
# rank. Terminal statuses share the top rank, so after one of them nothing more can be emitted for the batch.
STATUS_RANKS: dict[str, int] = {
    BatchStatus.AUTHORIZATION_REQUIRED: 10,
    BatchStatus.AUTHORIZED: 20,
    BatchStatus.INITIATED: 30,
    BatchStatus.COMPLETED: 100,
    BatchStatus.FAILED: 100,
    BatchStatus.REJECTED: 100,
    BatchStatus.EXPIRED: 100,
    BatchStatus.INVALID: 100,
}


def move(current: FlowState | str, target: FlowState | str, *, replacing: bool = False) -> BatchStatus | None:
    """Check a move and return the status it publishes (None when it publishes nothing).

    `replacing`: the flow is on a replacement consent (it went back from AWAITING_AUTHORIZATION to RECEIVED),
    so reaching AWAITING_AUTHORIZATION again publishes nothing: the approval link already went out."""
    current, target = FlowState(current), FlowState(target)
    if target not in FILE_TABLE[current].moves:
        raise IllegalTransitionError(f"{current.value} -> {target.value} is not a legal move")
    if replacing and target == FlowState.AWAITING_AUTHORIZATION:
        return None
    return FILE_PUBLISHES.get(target)


def outcome_of_bank_status(status: str) -> FlowState | None:
    """Map a file payment's bank status to the flow's end state (None while the bank is still working)."""
    if status == "InitiationCompleted":
        return FlowState.COMPLETED
    if status == "InitiationFailed":
        return FlowState.FAILED
    return None
