"""The flow state machines, pure: which states exist, which moves are legal, what each move publishes.

File payment (flow A), one per batch. The states are the store's `FlowState` (one definition, in
`processor.store.flows`); this module says which moves between them are legal:

    RECEIVED ──A1──▶ CONSENT_CREATED ──A2──▶ AWAITING_AUTHORIZATION ──redirect──▶ AUTHORIZED ──A3──▶ INITIATED
       │                  │                      │        │                          │              │
       └──▶ INVALID       └──▶ FAILED            │        └──▶ REJECTED              └──▶ FAILED    ├──▶ COMPLETED
       └──▶ FAILED                               └──▶ EXPIRED (authorization deadline passed)        └──▶ FAILED

(`FlowState.UPLOADED` and `FlowState.PAYMENT_CREATED` exist in the store's list but the engine does not use them:
the upload and the payment are recorded in the same transaction as the move they cause.)

One move goes back: AWAITING_AUTHORIZATION ──▶ RECEIVED when the bank holds the consent authorised but its
tokens never reached us (the answer to the code exchange was lost): the flow creates a fresh consent behind the
same approval link, and publishes nothing for it (AUTHORIZATION_REQUIRED went out once already).

The VRP state machines are in `processor.domain.vrp_states`.

Entering some states publishes a status event (DESIGN.md "Contracts"); statuses only move forward and each
is published once per batch, which the store enforces as well.
"""

from __future__ import annotations

from enum import StrEnum


class FlowState(StrEnum):
    """The file flow's states, as stored in the flows table's `state` column."""

    RECEIVED = "RECEIVED"
    CONSENT_CREATED = "CONSENT_CREATED"
    UPLOADED = "UPLOADED"
    AWAITING_AUTHORIZATION = "AWAITING_AUTHORIZATION"
    AUTHORIZED = "AUTHORIZED"
    PAYMENT_CREATED = "PAYMENT_CREATED"
    INITIATED = "INITIATED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    INVALID = "INVALID"


TERMINAL_FLOW_STATES = frozenset(
    {FlowState.COMPLETED, FlowState.FAILED, FlowState.REJECTED, FlowState.EXPIRED, FlowState.INVALID}
)


FileState = FlowState
"""Another name of `FlowState`, for readers of this module."""


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


class Step(StrEnum):
    """What the engine must do next for a flow in a given state."""

    CREATE_CONSENT = "create_consent"
    UPLOAD_FILE = "upload_file"
    WAIT_FOR_APPROVER = "wait_for_approver"
    CREATE_PAYMENT = "create_payment"
    POLL_PAYMENT = "poll_payment"
    NONE = "none"


FILE_MOVES: dict[FlowState, frozenset[FlowState]] = {
    FlowState.RECEIVED: frozenset({FlowState.CONSENT_CREATED, FlowState.INVALID, FlowState.FAILED}),
    FlowState.CONSENT_CREATED: frozenset({FlowState.AWAITING_AUTHORIZATION, FlowState.FAILED}),
    FlowState.AWAITING_AUTHORIZATION: frozenset(
        {FlowState.AUTHORIZED, FlowState.REJECTED, FlowState.EXPIRED, FlowState.RECEIVED}
    ),
    FlowState.AUTHORIZED: frozenset({FlowState.INITIATED, FlowState.FAILED}),
    FlowState.INITIATED: frozenset({FlowState.COMPLETED, FlowState.FAILED}),
    FlowState.UPLOADED: frozenset(),
    FlowState.PAYMENT_CREATED: frozenset(),
    FlowState.COMPLETED: frozenset(),
    FlowState.FAILED: frozenset(),
    FlowState.REJECTED: frozenset(),
    FlowState.EXPIRED: frozenset(),
    FlowState.INVALID: frozenset(),
}

FILE_PUBLISHES: dict[FlowState, BatchStatus] = {
    FlowState.INVALID: BatchStatus.INVALID,
    FlowState.AWAITING_AUTHORIZATION: BatchStatus.AUTHORIZATION_REQUIRED,
    FlowState.AUTHORIZED: BatchStatus.AUTHORIZED,
    FlowState.REJECTED: BatchStatus.REJECTED,
    FlowState.EXPIRED: BatchStatus.EXPIRED,
    FlowState.INITIATED: BatchStatus.INITIATED,
    FlowState.COMPLETED: BatchStatus.COMPLETED,
    FlowState.FAILED: BatchStatus.FAILED,
}

FILE_STEPS: dict[FlowState, Step] = {
    FlowState.RECEIVED: Step.CREATE_CONSENT,
    FlowState.CONSENT_CREATED: Step.UPLOAD_FILE,
    FlowState.AWAITING_AUTHORIZATION: Step.WAIT_FOR_APPROVER,
    FlowState.AUTHORIZED: Step.CREATE_PAYMENT,
    FlowState.INITIATED: Step.POLL_PAYMENT,
}

# Forward order of published statuses: a status may only follow one of lower rank.
STATUS_RANK: dict[BatchStatus, int] = {
    BatchStatus.AUTHORIZATION_REQUIRED: 1,
    BatchStatus.AUTHORIZED: 2,
    BatchStatus.REJECTED: 2,
    BatchStatus.EXPIRED: 2,
    BatchStatus.INITIATED: 3,
    BatchStatus.COMPLETED: 4,
    BatchStatus.FAILED: 4,
    BatchStatus.INVALID: 4,
}


def is_terminal(state: FlowState | str) -> bool:
    """Whether the flow has ended (the store's terminal set; no move leaves these states)."""
    return FlowState(state) in TERMINAL_FLOW_STATES


def move(current: FlowState | str, target: FlowState | str, *, replacing: bool = False) -> BatchStatus | None:
    """Check a move and return the status it publishes (None when it publishes nothing).

    `replacing`: the flow is on a replacement consent (it went back from AWAITING_AUTHORIZATION to RECEIVED),
    so reaching AWAITING_AUTHORIZATION again publishes nothing: the approval link already went out."""
    current, target = FlowState(current), FlowState(target)
    if target not in FILE_MOVES[current]:
        raise IllegalTransitionError(f"{current.value} -> {target.value} is not a legal move")
    if replacing and target == FlowState.AWAITING_AUTHORIZATION:
        return None
    return FILE_PUBLISHES.get(target)


def next_step(state: FlowState | str) -> Step:
    """The engine's next action for a flow in `state`."""
    return FILE_STEPS.get(FlowState(state), Step.NONE)


def outcome_of_bank_status(status: str) -> FlowState | None:
    """Map a file payment's bank status to the flow's end state (None while the bank is still working)."""
    if status == "InitiationCompleted":
        return FlowState.COMPLETED
    if status == "InitiationFailed":
        return FlowState.FAILED
    return None


def poll_delay(attempt: int, first: float = 1.0, cap: float = 60.0) -> float:
    """Seconds to wait before polling a pending payment again: doubling from `first`, capped."""
    return float(min(cap, first * (2 ** max(0, attempt))))
