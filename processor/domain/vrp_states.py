"""The VRP state machines (flow B), pure: states, legal moves and the `vrp.status` each move publishes.

Mandate (one VRP consent, authorised once), keyed by `mandate_id`:

    RECEIVED ──B1──▶ AWAITING_AUTHORIZATION ──▶ AUTHORIZED
       │                   │      │
       └──▶ INVALID        │      └──▶ REJECTED   (approver refused, or the bank reports the consent Rejected)
                           └──▶ EXPIRED           (authorization deadline passed)
                           └──▶ RECEIVED          (consent authorised at the bank, tokens lost: a new consent)

    AUTHORIZED ──▶ REAUTHORIZATION_REQUIRED ──▶ AUTHORIZED   (tokens could not be refreshed: the approver again)
        │                  │
        └──────────────────┴──▶ REVOKED | REJECTED | EXPIRED  (the consent read Revoked / Rejected / Expired at
                                                              the bank; past valid_to; no re-authorization in time)

A request that fails validation is stored directly as INVALID. An AUTHORIZED mandate's consent is read every
`mandate_watch_interval` (and before a payment when the last read is older); REAUTHORIZATION_REQUIRED is watched
like AWAITING_AUTHORIZATION (its approval link works; its deadline is `authorization_deadline` from entering it).

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

The store's `state` columns hold these values. `MANDATE_TABLE` and `PAYMENT_TABLE` (`processor.domain.steps`) are
what the engine dispatches on.
"""

from __future__ import annotations

from enum import StrEnum

from processor.domain.steps import Approval, Rule, Wait


class IllegalMoveError(ValueError):
    """A move the state machine does not allow."""


class Mandate(StrEnum):
    """States of a VRP mandate."""

    RECEIVED = "RECEIVED"
    AWAITING_AUTHORIZATION = "AWAITING_AUTHORIZATION"
    AUTHORIZED = "AUTHORIZED"
    REAUTHORIZATION_REQUIRED = "REAUTHORIZATION_REQUIRED"
    REVOKED = "REVOKED"
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


_M = Mandate
MANDATE_TABLE: dict[Mandate, Rule[Mandate]] = {
    _M.RECEIVED: Rule("create_consent", frozenset({_M.AWAITING_AUTHORIZATION, _M.INVALID})),
    # Back to RECEIVED (publishing nothing) to replace a consent authorised at the bank whose tokens were lost.
    _M.AWAITING_AUTHORIZATION: Rule(
        "watch_authorization",
        frozenset({_M.AUTHORIZED, _M.REJECTED, _M.EXPIRED, _M.RECEIVED}),
        Wait.WATCH,
        Approval.AWAITING,
    ),
    _M.AUTHORIZED: Rule(
        "watch_mandate",
        frozenset({_M.REAUTHORIZATION_REQUIRED, _M.REVOKED, _M.REJECTED, _M.EXPIRED}),
        Wait.MANDATE,
        Approval.AUTHORIZED,
    ),
    _M.REAUTHORIZATION_REQUIRED: Rule(
        "watch_reauthorization",
        frozenset({_M.AUTHORIZED, _M.REVOKED, _M.REJECTED, _M.EXPIRED}),
        Wait.WATCH,
        Approval.AWAITING,
    ),
    _M.REVOKED: Rule(None, frozenset(), approval=Approval.ENDED),
    _M.REJECTED: Rule(None, frozenset(), approval=Approval.REJECTED),
    _M.EXPIRED: Rule(None, frozenset(), approval=Approval.EXPIRED),
    _M.INVALID: Rule(None, frozenset(), approval=Approval.ENDED),
}

MANDATE_PUBLISHES: dict[Mandate, VrpStatus] = {
    Mandate.AWAITING_AUTHORIZATION: VrpStatus.AUTHORIZATION_REQUIRED,
    Mandate.AUTHORIZED: VrpStatus.AUTHORIZED,
    Mandate.REAUTHORIZATION_REQUIRED: VrpStatus.AUTHORIZATION_REQUIRED,
    Mandate.REVOKED: VrpStatus.REJECTED,  # the reason and bank_status `Revoked` say it was revoked
    Mandate.REJECTED: VrpStatus.REJECTED,
    Mandate.EXPIRED: VrpStatus.EXPIRED,
    Mandate.INVALID: VrpStatus.INVALID,
}

# Mandate statuses only move forward on their key (the outbox enforces it with these ranks); payment
# statuses share the mandate's key and are unranked: a payment's own order is kept by its state machine. So are
# the re-authorization's AUTHORIZATION_REQUIRED and the AUTHORIZED after it (`mandate_move_ranked`): they repeat
# statuses already published, and the end (rank 100) still comes after them.
MANDATE_STATUS_RANKS: dict[VrpStatus, int] = {
    VrpStatus.AUTHORIZATION_REQUIRED: 10,
    VrpStatus.AUTHORIZED: 20,
    VrpStatus.REJECTED: 100,
    VrpStatus.EXPIRED: 100,
    VrpStatus.INVALID: 100,
}

_P = Payment
PAYMENT_TABLE: dict[Payment, Rule[Payment]] = {
    # Parked until its mandate is authorised: checked again now and then (and at once when it is).
    _P.RECEIVED: Rule("recheck_parked", frozenset({_P.SUBMITTED, _P.REFUSED, _P.REJECTED, _P.INVALID}), Wait.CHECK),
    _P.SUBMITTED: Rule("create_vrp", frozenset({_P.PENDING, _P.COMPLETED, _P.REJECTED, _P.FAILED})),
    _P.PENDING: Rule("read_vrp", frozenset({_P.COMPLETED, _P.REJECTED}), Wait.POLL),
    _P.COMPLETED: Rule(None, frozenset()),
    _P.REFUSED: Rule(None, frozenset()),
    _P.REJECTED: Rule(None, frozenset()),
    _P.FAILED: Rule(None, frozenset()),
    _P.INVALID: Rule(None, frozenset()),
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
    return MANDATE_TABLE[Mandate(state)].terminal


def payment_terminal(state: str) -> bool:
    """Whether no move leaves this payment state."""
    return PAYMENT_TABLE[Payment(state)].terminal


def move_mandate(current: str, target: Mandate, *, replacing: bool = False) -> VrpStatus | None:
    """Check a mandate move; the status it publishes. `replacing`: the mandate is on a replacement consent,
    so reaching AWAITING_AUTHORIZATION again publishes nothing (its approval link already went out)."""
    if target not in MANDATE_TABLE[Mandate(current)].moves:
        raise IllegalMoveError(f"mandate {current} -> {target.value} is not a legal move")
    if replacing and target is Mandate.AWAITING_AUTHORIZATION:
        return None
    return MANDATE_PUBLISHES.get(target)


def mandate_move_ranked(current: str, target: Mandate) -> bool:
    """Whether the status of this mandate move is ranked (False: the re-authorization's repeated statuses)."""
    return not (
        target is Mandate.REAUTHORIZATION_REQUIRED
        or (current == Mandate.REAUTHORIZATION_REQUIRED and target is Mandate.AUTHORIZED)
    )


def move_payment(current: str, target: Payment, status: VrpStatus | None) -> None:
    """Check a payment move and the status published with it (None: nothing)."""
    if target not in PAYMENT_TABLE[Payment(current)].moves:
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
