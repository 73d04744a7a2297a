"""The flow state machines: legal moves, published statuses, statuses only moving forward."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.domain.file_states import (
    FILE_TABLE,
    STATUS_RANKS,
    BatchStatus,
    FlowState,
    IllegalTransitionError,
    move,
    outcome_of_bank_status,
)

HAPPY = [
    FlowState.RECEIVED,
    FlowState.CONSENT_CREATED,
    FlowState.AWAITING_AUTHORIZATION,
    FlowState.AUTHORIZED,
    FlowState.INITIATED,
    FlowState.COMPLETED,
]


def test_happy_path_publishes_each_status_once_in_order() -> None:
    published = [s for a, b in itertools.pairwise(HAPPY) if (s := move(a, b)) is not None]
    assert published == [
        BatchStatus.AUTHORIZATION_REQUIRED,
        BatchStatus.AUTHORIZED,
        BatchStatus.INITIATED,
        BatchStatus.COMPLETED,
    ]
    assert [FILE_TABLE[s].handler for s in HAPPY] == [
        "create_consent",
        "upload_file",
        "watch_authorization",
        "create_payment",
        "poll_payment",
        None,
    ]


def test_illegal_moves_are_refused() -> None:
    with pytest.raises(IllegalTransitionError):
        move(FlowState.RECEIVED, FlowState.AUTHORIZED)
    with pytest.raises(IllegalTransitionError):
        move(FlowState.COMPLETED, FlowState.FAILED)
    with pytest.raises(IllegalTransitionError):
        move(FlowState.AUTHORIZED, FlowState.AWAITING_AUTHORIZATION)


def test_a_lost_token_exchange_goes_back_for_a_new_consent_without_asking_twice() -> None:
    assert move(FlowState.AWAITING_AUTHORIZATION, FlowState.RECEIVED) is None
    assert move(FlowState.RECEIVED, FlowState.CONSENT_CREATED) is None
    assert move(FlowState.CONSENT_CREATED, FlowState.AWAITING_AUTHORIZATION, replacing=True) is None
    assert move(FlowState.CONSENT_CREATED, FlowState.AWAITING_AUTHORIZATION) is BatchStatus.AUTHORIZATION_REQUIRED
    with pytest.raises(IllegalTransitionError):
        move(FlowState.AUTHORIZED, FlowState.RECEIVED)  # once authorised (tokens stored), never a second consent


def test_terminal_states() -> None:
    assert {s for s in FlowState if FILE_TABLE[s].terminal} == {
        FlowState.COMPLETED,
        FlowState.FAILED,
        FlowState.REJECTED,
        FlowState.EXPIRED,
        FlowState.INVALID,
        FlowState.WITHDRAWN,
    }


@given(st.lists(st.sampled_from(list(FlowState)), max_size=12))
def test_any_legal_walk_publishes_strictly_increasing_statuses(targets: list[FlowState]) -> None:
    state = FlowState.RECEIVED
    ranks: list[int] = []
    asked = False  # AUTHORIZATION_REQUIRED went out: a replacement consent does not publish it again
    for target in targets:
        if target not in FILE_TABLE[state].moves:
            continue
        status = move(state, target, replacing=asked)
        asked = asked or status is BatchStatus.AUTHORIZATION_REQUIRED
        state = target
        if status is not None:
            ranks.append(STATUS_RANKS[status])
    assert ranks == sorted(set(ranks))


def test_bank_status_mapping() -> None:
    assert outcome_of_bank_status("InitiationCompleted") is FlowState.COMPLETED
    assert outcome_of_bank_status("InitiationFailed") is FlowState.FAILED
    assert outcome_of_bank_status("InitiationPending") is None
