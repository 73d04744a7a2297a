"""The flow state machines: legal moves, published statuses, statuses only moving forward."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.domain.file_states import (
    FILE_MOVES,
    STATUS_RANK,
    BatchStatus,
    FileState,
    IllegalTransitionError,
    Step,
    is_terminal,
    move,
    next_step,
    outcome_of_bank_status,
    poll_delay,
)

HAPPY = [
    FileState.RECEIVED,
    FileState.CONSENT_CREATED,
    FileState.AWAITING_AUTHORIZATION,
    FileState.AUTHORIZED,
    FileState.INITIATED,
    FileState.COMPLETED,
]


def test_happy_path_publishes_each_status_once_in_order() -> None:
    published = [s for a, b in itertools.pairwise(HAPPY) if (s := move(a, b)) is not None]
    assert published == [
        BatchStatus.AUTHORIZATION_REQUIRED,
        BatchStatus.AUTHORIZED,
        BatchStatus.INITIATED,
        BatchStatus.COMPLETED,
    ]
    assert [next_step(s) for s in HAPPY] == [
        Step.CREATE_CONSENT,
        Step.UPLOAD_FILE,
        Step.WAIT_FOR_APPROVER,
        Step.CREATE_PAYMENT,
        Step.POLL_PAYMENT,
        Step.NONE,
    ]


def test_illegal_moves_are_refused() -> None:
    with pytest.raises(IllegalTransitionError):
        move(FileState.RECEIVED, FileState.AUTHORIZED)
    with pytest.raises(IllegalTransitionError):
        move(FileState.COMPLETED, FileState.FAILED)
    with pytest.raises(IllegalTransitionError):
        move(FileState.AUTHORIZED, FileState.AWAITING_AUTHORIZATION)


def test_a_lost_token_exchange_goes_back_for_a_new_consent_without_asking_twice() -> None:
    assert move(FileState.AWAITING_AUTHORIZATION, FileState.RECEIVED) is None
    assert move(FileState.RECEIVED, FileState.CONSENT_CREATED) is None
    assert move(FileState.CONSENT_CREATED, FileState.AWAITING_AUTHORIZATION, replacing=True) is None
    assert move(FileState.CONSENT_CREATED, FileState.AWAITING_AUTHORIZATION) is BatchStatus.AUTHORIZATION_REQUIRED
    with pytest.raises(IllegalTransitionError):
        move(FileState.AUTHORIZED, FileState.RECEIVED)  # once authorised (tokens stored), never a second consent


def test_terminal_states() -> None:
    assert {s for s in FileState if is_terminal(s)} == {
        FileState.COMPLETED,
        FileState.FAILED,
        FileState.REJECTED,
        FileState.EXPIRED,
        FileState.INVALID,
    }


@given(st.lists(st.sampled_from(list(FileState)), max_size=12))
def test_any_legal_walk_publishes_strictly_increasing_statuses(targets: list[FileState]) -> None:
    state = FileState.RECEIVED
    ranks: list[int] = []
    asked = False  # AUTHORIZATION_REQUIRED went out: a replacement consent does not publish it again
    for target in targets:
        if target not in FILE_MOVES[state]:
            continue
        status = move(state, target, replacing=asked)
        asked = asked or status is BatchStatus.AUTHORIZATION_REQUIRED
        state = target
        if status is not None:
            ranks.append(STATUS_RANK[status])
    assert ranks == sorted(set(ranks))


def test_bank_status_mapping_and_backoff() -> None:
    assert outcome_of_bank_status("InitiationCompleted") is FileState.COMPLETED
    assert outcome_of_bank_status("InitiationFailed") is FileState.FAILED
    assert outcome_of_bank_status("InitiationPending") is None
    assert [poll_delay(a) for a in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
