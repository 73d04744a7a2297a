"""The VRP state machines (flow B), pure: states, legal moves and the `vrp.status` each move publishes.

Mandate (one VRP consent, authorised once), keyed by `mandate_id`:

    RECEIVED ──B1──▶ AWAITING_AUTHORIZATION ──▶ AUTHORIZED
       │                   │      │
       └──▶ INVALID        │      └──▶ REJECTED   (approver refused, or the bank reports the consent Rejected)
                           └──▶ EXPIRED           (authorization deadline passed)
                           └──▶ RECEIVED          (consent authorised at the bank, tokens lost: a new consent)

A request that fails validation is stored directly as INVALID.

Payment (one domestic VRP under a mandate), keyed by `payment_id`:

    RECEIVED ──▶ SUBMITTED ──B2──▶ PENDING ──▶ COMPLETED
     (parked      │   │               └──────▶ REJECTED
      until the   │   └──▶ COMPLETED / REJECTED / FAILED
      mandate is  │
      authorised) └ (checked client-side on entry; REFUSED instead when outside the mandate's limits)

    RECEIVED ──▶ REFUSED | REJECTED | INVALID

New payments enter at RECEIVED (mandate not yet authorised), SUBMITTED (checked and within limits), REFUSED
(limits), REJECTED (mandate ended) or INVALID (bad instruction). SUBMITTED, PENDING and COMPLETED payments
count against the periodic limits; the others never reached the bank or were refused by it.

The states match the store's suggested names (`processor.store.MandateState` / `VrpPaymentState`, free text
columns), plus INVALID for payments.
"""

from __future__ import annotations

from enum import StrEnum


class IllegalMoveError(ValueError):
    """A move the state machine does not allow."""


class Mandate(StrEnum):
    """States of a VRP mandate."""

    RECEIVED = "RECEIVED"
    AWAITING_AUTHORIZATION = "AWAITING_AUTHORIZATION"
    AUTHORIZED = "AUTHORIZED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    INVALID = "INVALID"


class Payment(StrEnum):
    """States of a payment under a mandate."""

    RECEIVED = "RECEIVED"
    SUBMITTED = "SUBMITTED"
    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    REFUSED = "REFUSED"
    REJECTED = "REJECTED"
    FAILED = "FAILED"
    INVALID = "INVALID"


class VrpStatus(StrEnum):
    """The `vrp.status` codes (schemas/vrp_status.v1.avsc)."""

    AUTHORIZATION_REQUIRED = "AUTHORIZATION_REQUIRED"
    AUTHORIZED = "AUTHORIZED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    PAYMENT_PENDING = "PAYMENT_PENDING"
    PAYMENT_COMPLETED = "PAYMENT_COMPLETED"
    PAYMENT_REJECTED = "PAYMENT_REJECTED"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    INVALID = "INVALID"


MANDATE_MOVES: dict[Mandate, frozenset[Mandate]] = {
    Mandate.RECEIVED: frozenset({Mandate.AWAITING_AUTHORIZATION, Mandate.INVALID}),
    # Back to RECEIVED (publishing nothing) to replace a consent authorised at the bank whose tokens were lost.
    Mandate.AWAITING_AUTHORIZATION: frozenset(
        {Mandate.AUTHORIZED, Mandate.REJECTED, Mandate.EXPIRED, Mandate.RECEIVED}
    ),
    Mandate.AUTHORIZED: frozenset(),
    Mandate.REJECTED: frozenset(),
    Mandate.EXPIRED: frozenset(),
    Mandate.INVALID: frozenset(),
}

MANDATE_PUBLISHES: dict[Mandate, VrpStatus] = {
    Mandate.AWAITING_AUTHORIZATION: VrpStatus.AUTHORIZATION_REQUIRED,
    Mandate.AUTHORIZED: VrpStatus.AUTHORIZED,
    Mandate.REJECTED: VrpStatus.REJECTED,
    Mandate.EXPIRED: VrpStatus.EXPIRED,
    Mandate.INVALID: VrpStatus.INVALID,
}

# Mandate statuses only move forward on their key (the outbox enforces it with these ranks); payment
# statuses share the mandate's key and are unranked: a payment's own order is kept by its state machine.
MANDATE_STATUS_RANKS: dict[VrpStatus, int] = {
    VrpStatus.AUTHORIZATION_REQUIRED: 10,
    VrpStatus.AUTHORIZED: 20,
    VrpStatus.REJECTED: 100,
    VrpStatus.EXPIRED: 100,
    VrpStatus.INVALID: 100,
}

PAYMENT_MOVES: dict[Payment, frozenset[Payment]] = {
    Payment.RECEIVED: frozenset({Payment.SUBMITTED, Payment.REFUSED, Payment.REJECTED, Payment.INVALID}),
    Payment.SUBMITTED: frozenset({Payment.PENDING, Payment.COMPLETED, Payment.REJECTED, Payment.FAILED}),
    Payment.PENDING: frozenset({Payment.COMPLETED, Payment.REJECTED}),
    Payment.COMPLETED: frozenset(),
    Payment.REFUSED: frozenset(),
    Payment.REJECTED: frozenset(),
    Payment.FAILED: frozenset(),
    Payment.INVALID: frozenset(),
}

# What entering a payment state may publish. REJECTED publishes LIMIT_EXCEEDED when the bank refused the
# payment for its control parameters, PAYMENT_REJECTED otherwise.
PAYMENT_PUBLISHES: dict[Payment, frozenset[VrpStatus]] = {
    Payment.RECEIVED: frozenset(),
    Payment.SUBMITTED: frozenset(),
    Payment.PENDING: frozenset({VrpStatus.PAYMENT_PENDING}),
    Payment.COMPLETED: frozenset({VrpStatus.PAYMENT_COMPLETED}),
    Payment.REFUSED: frozenset({VrpStatus.LIMIT_EXCEEDED}),
    Payment.REJECTED: frozenset({VrpStatus.PAYMENT_REJECTED, VrpStatus.LIMIT_EXCEEDED}),
    Payment.FAILED: frozenset({VrpStatus.PAYMENT_REJECTED}),
    Payment.INVALID: frozenset({VrpStatus.INVALID}),
}

# Payments that count against the mandate's periodic limits.
COUNTED_PAYMENT_STATES: frozenset[Payment] = frozenset({Payment.SUBMITTED, Payment.PENDING, Payment.COMPLETED})

# Where new payments may start.
PAYMENT_ENTRY_STATES: frozenset[Payment] = frozenset(
    {Payment.RECEIVED, Payment.SUBMITTED, Payment.REFUSED, Payment.REJECTED, Payment.INVALID}
)

# Bank statuses of a domestic VRP (Open Banking v3.1) and where they lead.
SETTLED = "AcceptedSettlementCompleted"
BANK_REJECTED = "Rejected"


def mandate_terminal(state: str) -> bool:
    """Whether no move leaves this mandate state."""
    return not MANDATE_MOVES[Mandate(state)]


def payment_terminal(state: str) -> bool:
    """Whether no move leaves this payment state."""
    return not PAYMENT_MOVES[Payment(state)]


def move_mandate(current: str, target: Mandate, *, replacing: bool = False) -> VrpStatus | None:
    """Check a mandate move; the status it publishes. `replacing`: the mandate is on a replacement consent,
    so reaching AWAITING_AUTHORIZATION again publishes nothing (its approval link already went out)."""
    if target not in MANDATE_MOVES[Mandate(current)]:
        raise IllegalMoveError(f"mandate {current} -> {target.value} is not a legal move")
    if replacing and target is Mandate.AWAITING_AUTHORIZATION:
        return None
    return MANDATE_PUBLISHES.get(target)


def move_payment(current: str, target: Payment, status: VrpStatus | None) -> None:
    """Check a payment move and the status published with it (None: nothing)."""
    if target not in PAYMENT_MOVES[Payment(current)]:
        raise IllegalMoveError(f"VRP payment {current} -> {target.value} is not a legal move")
    allowed = PAYMENT_PUBLISHES[target]
    if status is None and allowed and target is not Payment.SUBMITTED:
        raise IllegalMoveError(f"entering {target.value} must publish one of {sorted(allowed)}")
    if status is not None and status not in allowed:
        raise IllegalMoveError(f"entering {target.value} cannot publish {status.value}")


def enter_payment(target: Payment, status: VrpStatus | None) -> None:
    """Check the state a new payment is stored in, and what it publishes."""
    if target not in PAYMENT_ENTRY_STATES:
        raise IllegalMoveError(f"a new VRP payment cannot start in {target.value}")
    allowed = PAYMENT_PUBLISHES[target]
    if (status is None) != (not allowed) or (status is not None and status not in allowed):
        raise IllegalMoveError(f"a new VRP payment in {target.value} cannot publish {status}")


def payment_state_of_bank_status(bank_status: str) -> Payment:
    """Where a domestic VRP's bank status leads: COMPLETED, REJECTED, or PENDING while the bank works."""
    if bank_status == SETTLED:
        return Payment.COMPLETED
    if bank_status == BANK_REJECTED:
        return Payment.REJECTED
    return Payment.PENDING


def backoff(attempt: int, first: float, cap: float) -> float:
    """Seconds before the next try: doubling from `first` per attempt (attempt 0 waits `first`), capped."""
    return float(min(cap, first * (2 ** min(max(0, attempt), 30))))
