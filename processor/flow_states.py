"""The flow state machines, pure: which states exist, which moves are legal, what each move publishes.

File payment (flow A), one per batch:

    RECEIVED ──▶ CONSENT_CREATED ──▶ AWAITING_AUTHORIZATION ──▶ AUTHORIZED ──▶ INITIATED ──▶ COMPLETED
       │                                   │        │                               └──────▶ FAILED
       └──▶ INVALID                        │        └──▶ REJECTED
                                           └──▶ EXPIRED   (authorization deadline passed)

VRP mandate (flow B consent): REQUESTED ──▶ AWAITING_AUTHORIZATION ──▶ AUTHORIZED | REJECTED | EXPIRED
VRP payment: RECEIVED ──▶ SUBMITTED ──▶ COMPLETED | REJECTED, or RECEIVED ──▶ LIMIT_EXCEEDED | INVALID

Entering some states publishes a status event (DESIGN.md "Contracts"); statuses only move forward and each
is published once per batch, which the store enforces as well.
"""

from __future__ import annotations

from enum import StrEnum


class IllegalTransitionError(ValueError):
    """A move the state machine does not allow."""


class FileState(StrEnum):
    """States of a file-payment flow."""

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


FILE_MOVES: dict[FileState, frozenset[FileState]] = {
    FileState.RECEIVED: frozenset({FileState.CONSENT_CREATED, FileState.INVALID}),
    FileState.CONSENT_CREATED: frozenset({FileState.AWAITING_AUTHORIZATION, FileState.FAILED}),
    FileState.AWAITING_AUTHORIZATION: frozenset({FileState.AUTHORIZED, FileState.REJECTED, FileState.EXPIRED}),
    FileState.AUTHORIZED: frozenset({FileState.INITIATED, FileState.FAILED}),
    FileState.INITIATED: frozenset({FileState.COMPLETED, FileState.FAILED}),
    FileState.COMPLETED: frozenset(),
    FileState.FAILED: frozenset(),
    FileState.REJECTED: frozenset(),
    FileState.EXPIRED: frozenset(),
    FileState.INVALID: frozenset(),
}

FILE_PUBLISHES: dict[FileState, BatchStatus] = {
    FileState.INVALID: BatchStatus.INVALID,
    FileState.AWAITING_AUTHORIZATION: BatchStatus.AUTHORIZATION_REQUIRED,
    FileState.AUTHORIZED: BatchStatus.AUTHORIZED,
    FileState.REJECTED: BatchStatus.REJECTED,
    FileState.EXPIRED: BatchStatus.EXPIRED,
    FileState.INITIATED: BatchStatus.INITIATED,
    FileState.COMPLETED: BatchStatus.COMPLETED,
    FileState.FAILED: BatchStatus.FAILED,
}

FILE_STEPS: dict[FileState, Step] = {
    FileState.RECEIVED: Step.CREATE_CONSENT,
    FileState.CONSENT_CREATED: Step.UPLOAD_FILE,
    FileState.AWAITING_AUTHORIZATION: Step.WAIT_FOR_APPROVER,
    FileState.AUTHORIZED: Step.CREATE_PAYMENT,
    FileState.INITIATED: Step.POLL_PAYMENT,
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


def is_terminal(state: FileState) -> bool:
    """Whether no move leaves this state."""
    return not FILE_MOVES[state]


def move(current: FileState, target: FileState) -> BatchStatus | None:
    """Check a move and return the status it publishes (None when it publishes nothing)."""
    if target not in FILE_MOVES[current]:
        raise IllegalTransitionError(f"{current.value} -> {target.value} is not a legal move")
    return FILE_PUBLISHES.get(target)


def next_step(state: FileState) -> Step:
    """The engine's next action for a flow in `state`."""
    return FILE_STEPS.get(state, Step.NONE)


def outcome_of_bank_status(status: str) -> FileState | None:
    """Map a file payment's bank status to the flow's end state (None while the bank is still working)."""
    if status == "InitiationCompleted":
        return FileState.COMPLETED
    if status == "InitiationFailed":
        return FileState.FAILED
    return None


def poll_delay(attempt: int, first: float = 1.0, cap: float = 60.0) -> float:
    """Seconds to wait before polling a pending payment again: doubling from `first`, capped."""
    return float(min(cap, first * (2 ** max(0, attempt))))


class MandateState(StrEnum):
    """States of a VRP mandate (the consent)."""

    REQUESTED = "REQUESTED"
    AWAITING_AUTHORIZATION = "AWAITING_AUTHORIZATION"
    AUTHORIZED = "AUTHORIZED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    INVALID = "INVALID"


MANDATE_MOVES: dict[MandateState, frozenset[MandateState]] = {
    MandateState.REQUESTED: frozenset({MandateState.AWAITING_AUTHORIZATION, MandateState.INVALID}),
    MandateState.AWAITING_AUTHORIZATION: frozenset(
        {MandateState.AUTHORIZED, MandateState.REJECTED, MandateState.EXPIRED}
    ),
    MandateState.AUTHORIZED: frozenset(),
    MandateState.REJECTED: frozenset(),
    MandateState.EXPIRED: frozenset(),
    MandateState.INVALID: frozenset(),
}


class VrpPaymentState(StrEnum):
    """States of one payment under a mandate."""

    RECEIVED = "RECEIVED"
    SUBMITTED = "SUBMITTED"
    COMPLETED = "COMPLETED"
    REJECTED = "REJECTED"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    INVALID = "INVALID"


VRP_PAYMENT_MOVES: dict[VrpPaymentState, frozenset[VrpPaymentState]] = {
    VrpPaymentState.RECEIVED: frozenset(
        {VrpPaymentState.SUBMITTED, VrpPaymentState.LIMIT_EXCEEDED, VrpPaymentState.INVALID, VrpPaymentState.REJECTED}
    ),
    VrpPaymentState.SUBMITTED: frozenset({VrpPaymentState.COMPLETED, VrpPaymentState.REJECTED}),
    VrpPaymentState.COMPLETED: frozenset(),
    VrpPaymentState.REJECTED: frozenset(),
    VrpPaymentState.LIMIT_EXCEEDED: frozenset(),
    VrpPaymentState.INVALID: frozenset(),
}


def move_mandate(current: MandateState, target: MandateState) -> None:
    """Check a mandate move."""
    if target not in MANDATE_MOVES[current]:
        raise IllegalTransitionError(f"mandate {current.value} -> {target.value} is not a legal move")


def move_vrp_payment(current: VrpPaymentState, target: VrpPaymentState) -> None:
    """Check a VRP payment move."""
    if target not in VRP_PAYMENT_MOVES[current]:
        raise IllegalTransitionError(f"VRP payment {current.value} -> {target.value} is not a legal move")
