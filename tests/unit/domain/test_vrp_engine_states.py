"""The VRP state machines: legal moves, what each publishes, terminal states."""

from __future__ import annotations

import pytest

import schemas
from processor.domain.vrp_states import (
    COUNTED_PAYMENT_STATES,
    MANDATE_STATUS_RANKS,
    MANDATE_TABLE,
    PAYMENT_TABLE,
    IllegalMoveError,
    Mandate,
    Payment,
    VrpStatus,
    enter_payment,
    mandate_move_ranked,
    mandate_terminal,
    move_mandate,
    move_payment,
    payment_state_of_bank_status,
    payment_terminal,
)


def test_mandate_moves_publish_their_status() -> None:
    assert move_mandate("RECEIVED", Mandate.AWAITING_AUTHORIZATION) is VrpStatus.AUTHORIZATION_REQUIRED
    assert move_mandate("AWAITING_AUTHORIZATION", Mandate.AUTHORIZED) is VrpStatus.AUTHORIZED
    assert move_mandate("AWAITING_AUTHORIZATION", Mandate.EXPIRED) is VrpStatus.EXPIRED
    assert move_mandate("RECEIVED", Mandate.AWAITING_AUTHORIZATION, replacing=True) is None  # asked once only
    assert move_mandate("AWAITING_AUTHORIZATION", Mandate.RECEIVED) is None  # a new consent (tokens lost)
    with pytest.raises(IllegalMoveError):
        move_mandate("AUTHORIZED", Mandate.RECEIVED)  # an authorised mandate keeps its consent
    with pytest.raises(IllegalMoveError):
        move_mandate("RECEIVED", Mandate.AUTHORIZED)  # never authorised without a consent
    with pytest.raises(IllegalMoveError):
        move_mandate("REJECTED", Mandate.AUTHORIZED)
    # An authorised mandate is watched: it may end at the bank, or ask its approver again.
    assert move_mandate("AUTHORIZED", Mandate.REVOKED) is VrpStatus.REJECTED
    assert move_mandate("AUTHORIZED", Mandate.EXPIRED) is VrpStatus.EXPIRED
    assert move_mandate("AUTHORIZED", Mandate.REAUTHORIZATION_REQUIRED) is VrpStatus.AUTHORIZATION_REQUIRED
    assert move_mandate("REAUTHORIZATION_REQUIRED", Mandate.AUTHORIZED) is VrpStatus.AUTHORIZED
    with pytest.raises(IllegalMoveError):
        move_mandate("REVOKED", Mandate.AUTHORIZED)
    assert [s for s in Mandate if mandate_terminal(s)] == [
        Mandate.REVOKED,
        Mandate.REJECTED,
        Mandate.EXPIRED,
        Mandate.INVALID,
    ]


def test_mandate_statuses_only_move_forward() -> None:
    for state, rule in MANDATE_TABLE.items():
        for target in rule.moves:
            published = move_mandate(state, target)
            if target is Mandate.RECEIVED:  # back for a new consent (tokens lost): publishes nothing
                assert (state, published) == (Mandate.AWAITING_AUTHORIZATION, None)
                continue
            assert published is not None
            if not mandate_move_ranked(state, target):  # the re-authorization repeats statuses, unranked
                assert published in (VrpStatus.AUTHORIZATION_REQUIRED, VrpStatus.AUTHORIZED)
                continue
            before = {
                "RECEIVED": 0,
                "AWAITING_AUTHORIZATION": MANDATE_STATUS_RANKS[VrpStatus.AUTHORIZATION_REQUIRED],
                "AUTHORIZED": MANDATE_STATUS_RANKS[VrpStatus.AUTHORIZED],
                "REAUTHORIZATION_REQUIRED": MANDATE_STATUS_RANKS[VrpStatus.AUTHORIZED],
            }[state.value]
            assert MANDATE_STATUS_RANKS[published] > before


def test_payment_moves_and_their_statuses() -> None:
    move_payment("SUBMITTED", Payment.PENDING, VrpStatus.PAYMENT_PENDING)
    move_payment("SUBMITTED", Payment.REJECTED, VrpStatus.LIMIT_EXCEEDED)  # the bank's FailsControlParameters
    move_payment("PENDING", Payment.COMPLETED, VrpStatus.PAYMENT_COMPLETED)
    move_payment("RECEIVED", Payment.SUBMITTED, None)
    with pytest.raises(IllegalMoveError):
        move_payment("PENDING", Payment.COMPLETED, None)  # entering COMPLETED must publish
    with pytest.raises(IllegalMoveError):
        move_payment("PENDING", Payment.COMPLETED, VrpStatus.PAYMENT_REJECTED)
    with pytest.raises(IllegalMoveError):
        move_payment("COMPLETED", Payment.REJECTED, VrpStatus.PAYMENT_REJECTED)
    with pytest.raises(IllegalMoveError):
        move_payment("REFUSED", Payment.SUBMITTED, None)  # a refused payment is never sent later
    assert {s for s in Payment if payment_terminal(s)} == {
        Payment.COMPLETED,
        Payment.REFUSED,
        Payment.REJECTED,
        Payment.FAILED,
        Payment.INVALID,
    }
    assert all(PAYMENT_TABLE[s].terminal for s in Payment if payment_terminal(s))


def test_new_payments_enter_where_allowed() -> None:
    enter_payment(Payment.SUBMITTED, None)
    enter_payment(Payment.REFUSED, VrpStatus.LIMIT_EXCEEDED)
    enter_payment(Payment.RECEIVED, None)
    with pytest.raises(IllegalMoveError):
        enter_payment(Payment.PENDING, VrpStatus.PAYMENT_PENDING)  # only after B2
    with pytest.raises(IllegalMoveError):
        enter_payment(Payment.REFUSED, None)


def test_counted_payments_and_bank_statuses() -> None:
    assert {Payment.SUBMITTED, Payment.PENDING, Payment.COMPLETED} == COUNTED_PAYMENT_STATES
    assert payment_state_of_bank_status("AcceptedSettlementCompleted") is Payment.COMPLETED
    assert payment_state_of_bank_status("Rejected") is Payment.REJECTED
    assert payment_state_of_bank_status("Pending") is Payment.PENDING
    assert payment_state_of_bank_status("AcceptedSettlementInProcess") is Payment.PENDING


def test_published_statuses_exist_in_the_schema() -> None:
    symbols = set(schemas.schema("vrp.status").schema["fields"][3]["type"]["symbols"])
    assert {s.value for s in VrpStatus} == symbols
