"""Side-effect records: written before the bank call, completed after, a crash in between detected on resume."""

from __future__ import annotations

import multiprocessing

import pytest
from store_fixtures import T0, StoreTarget, at, worker_begin_then_die

from processor.domain.file_states import FlowState
from processor.store import (
    Cipher,
    ConstraintError,
    EffectStatus,
    Operation,
    SideEffectMismatchError,
    Store,
    generate_key,
)


def test_first_begin_records_a_pending_call_with_a_bounded_key(store: Store) -> None:
    with store.transaction() as tx:
        effect = tx.side_effects.begin("b-1", Operation.CREATE_CONSENT, now=T0, request_sha256="abc")
    assert effect.status is EffectStatus.PENDING
    assert effect.previous_status is None and not effect.resumed and not effect.done
    assert 1 <= len(effect.idempotency_key) <= 40
    assert effect.attempts == 1
    with store.transaction(write=False) as tx:
        stored = tx.side_effects.get("b-1", "create_consent")
    assert stored is not None and stored.idempotency_key == effect.idempotency_key
    assert stored.request_sha256 == "abc"


def test_completion_is_recorded_with_the_state_change_and_stops_further_calls(store: Store) -> None:
    with store.transaction() as tx:
        flow = tx.flows.create("b-1", "bank", "{}", now=T0).row
        key = tx.side_effects.begin("b-1", Operation.CREATE_CONSENT, now=T0).idempotency_key
    with store.transaction() as tx:  # after the bank answered 201
        tx.side_effects.complete("b-1", Operation.CREATE_CONSENT, "pay-fi-1", now=at(1))
        tx.flows.transition(flow, FlowState.CONSENT_CREATED, now=at(1), consent_id="pay-fi-1")
    with store.transaction() as tx:  # a later resume asks again
        again = tx.side_effects.begin("b-1", Operation.CREATE_CONSENT, now=at(2))
    assert again.done and again.resource_id == "pay-fi-1"
    assert again.idempotency_key == key
    assert again.attempts == 1 and again.previous_status is EffectStatus.DONE and not again.resumed
    with store.transaction() as tx:  # the same completion twice is harmless; a different one is refused
        tx.side_effects.complete("b-1", Operation.CREATE_CONSENT, "pay-fi-1", now=at(3))
        with pytest.raises(SideEffectMismatchError):
            tx.side_effects.complete("b-1", Operation.CREATE_CONSENT, "pay-fi-2", now=at(3))
        with pytest.raises(SideEffectMismatchError):
            tx.side_effects.mark_ambiguous("b-1", Operation.CREATE_CONSENT, "late timeout", now=at(3))


def test_a_crash_between_record_and_outcome_is_detected_and_the_key_reused(
    store_target: StoreTarget, store_cipher: Cipher
) -> None:
    with store_target.open(store_cipher):  # migrate before the child runs
        pass
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=worker_begin_then_die, args=(store_target, generate_key(), "b-1", T0.isoformat()))
    child.start()
    child.join(60)
    assert child.exitcode == 17  # died right after committing the record, before any outcome
    with store_target.open(store_cipher) as store:
        with store.transaction(write=False) as tx:
            left = tx.side_effects.get("b-1", Operation.CREATE_CONSENT)
            assert [e.operation for e in tx.side_effects.unresolved(before=at(60))] == ["create_consent"]
        assert left is not None and left.status is EffectStatus.PENDING
        with store.transaction() as tx:
            resumed = tx.side_effects.begin("b-1", Operation.CREATE_CONSENT, now=at(60))
    assert resumed.resumed and resumed.previous_status is EffectStatus.PENDING
    assert resumed.idempotency_key == left.idempotency_key  # the retry carries the same key
    assert resumed.attempts == 2


def test_ambiguous_and_failed_outcomes_keep_the_key(store: Store) -> None:
    with store.transaction() as tx:
        key = tx.side_effects.begin("b-1", Operation.CREATE_PAYMENT, now=T0).idempotency_key
        tx.side_effects.mark_ambiguous("b-1", Operation.CREATE_PAYMENT, "read timeout", now=at(1))
    with store.transaction(write=False) as tx:
        assert [e.scope_id for e in tx.side_effects.unresolved(before=at(2))] == ["b-1"]
        assert tx.side_effects.unresolved(before=at(1)) == []  # only records last touched before the time
    with store.transaction() as tx:
        retry = tx.side_effects.begin("b-1", Operation.CREATE_PAYMENT, now=at(5))
        assert retry.resumed and retry.previous_status is EffectStatus.AMBIGUOUS
        assert retry.idempotency_key == key
        failed = tx.side_effects.fail("b-1", Operation.CREATE_PAYMENT, "400 UK.OBIE.Resource.InvalidFormat", now=at(6))
        assert failed.status is EffectStatus.FAILED and failed.reason is not None
        third = tx.side_effects.begin("b-1", Operation.CREATE_PAYMENT, now=at(7))
    assert not third.resumed and third.previous_status is EffectStatus.FAILED
    assert third.idempotency_key == key and third.attempts == 3


def test_a_resumed_call_gets_the_request_its_first_attempt_recorded(store: Store) -> None:
    first = b'{"Data":{"Instruction":{"Amount":"250.00"}},"Risk":{}}'
    with store.transaction() as tx:
        begun = tx.side_effects.begin("p-1", Operation.CREATE_VRP, now=T0, request_body=first)
        tx.side_effects.mark_ambiguous("p-1", Operation.CREATE_VRP, "HTTP 502", now=at(1))
    assert begun.request_body == first and begun.request_sha256 is not None
    with store.transaction() as tx:
        # A deploy between the attempts builds another body: the record keeps (and returns) the first one.
        again = tx.side_effects.begin("p-1", Operation.CREATE_VRP, now=at(5), request_body=b'{"other":1}')
    assert again.resumed and again.request_body == first and again.request_sha256 == begun.request_sha256
    with store.transaction() as tx:
        # A record begun before any request was known takes the first one given.
        tx.side_effects.begin("p-2", Operation.CREATE_VRP, now=T0)
        tx.side_effects.mark_ambiguous("p-2", Operation.CREATE_VRP, "HTTP 502", now=at(1))
        later = tx.side_effects.begin("p-2", Operation.CREATE_VRP, now=at(5), request_body=first)
    assert later.request_body == first and later.request_sha256 == begun.request_sha256


def test_records_are_per_flow_and_operation(store: Store) -> None:
    with store.transaction() as tx:
        a = tx.side_effects.begin("b-1", Operation.CREATE_CONSENT, now=T0)
        b = tx.side_effects.begin("b-1", Operation.UPLOAD, now=at(1))
        c = tx.side_effects.begin("b-2", Operation.CREATE_CONSENT, now=at(2))
        assert len({a.idempotency_key, b.idempotency_key, c.idempotency_key}) == 3
        found = {op: tx.side_effects.get("b-1", op) for op in Operation}
        assert [op.value for op, e in found.items() if e is not None] == ["create_consent", "upload"]
        assert tx.side_effects.get("b-2", Operation.CREATE_CONSENT) == c
        with pytest.raises(SideEffectMismatchError):
            tx.side_effects.complete("b-3", Operation.CREATE_CONSENT, "x", now=at(3))
        with pytest.raises(ValueError, match="make_coffee"):
            tx.side_effects.begin("b-1", "make_coffee", now=at(3))


def test_the_database_itself_refuses_overlong_or_shared_keys(store: Store) -> None:
    with pytest.raises(ConstraintError), store.transaction() as tx:
        tx.raw.execute(
            "INSERT INTO side_effects (scope_id, operation, idempotency_key, status, created_at, updated_at)"
            " VALUES (?, ?, ?, 'PENDING', ?, ?)",
            ("b-1", "upload", "k" * 41, T0, T0),
        )
    with store.transaction() as tx:
        tx.side_effects.begin("b-1", Operation.UPLOAD, now=T0, idempotency_key="shared-key")
    with pytest.raises(ConstraintError), store.transaction() as tx:
        tx.side_effects.begin("b-2", Operation.UPLOAD, now=T0, idempotency_key="shared-key")
    with pytest.raises(ValueError, match="40"), store.transaction() as tx:
        tx.side_effects.begin("b-3", Operation.UPLOAD, now=T0, idempotency_key="k" * 41)


def test_retired_records_move_aside_and_the_calls_begin_afresh(store: Store) -> None:
    with store.transaction() as tx:
        consent = tx.side_effects.begin("b-1", Operation.CREATE_CONSENT, now=T0)
        tx.side_effects.complete("b-1", Operation.CREATE_CONSENT, "pay-fi-1", now=at(1))
        upload = tx.side_effects.begin("b-1", Operation.UPLOAD, now=at(2))
        payment = tx.side_effects.begin("b-1", Operation.CREATE_PAYMENT, now=at(3))
    with store.transaction() as tx:
        into = tx.side_effects.retire("b-1", (Operation.CREATE_CONSENT, Operation.UPLOAD), resource_id="pay-fi-1")
    assert into == "b-1/replaced/pay-fi-1"
    with store.transaction() as tx:
        kept_consent = tx.side_effects.get(into, Operation.CREATE_CONSENT)
        kept_upload = tx.side_effects.get(into, Operation.UPLOAD)
        assert kept_consent is not None and kept_upload is not None
        assert kept_consent.resource_id == "pay-fi-1"
        assert kept_consent.idempotency_key == consent.idempotency_key
        assert kept_upload.idempotency_key == upload.idempotency_key
        assert tx.side_effects.get(into, Operation.CREATE_PAYMENT) is None
        again = tx.side_effects.begin("b-1", Operation.CREATE_CONSENT, now=at(4))
        assert again.previous_status is None and again.idempotency_key != consent.idempotency_key
        left = tx.side_effects.get("b-1", Operation.CREATE_PAYMENT)  # not retired
        assert left is not None and left.idempotency_key == payment.idempotency_key
