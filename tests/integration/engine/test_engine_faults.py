"""Flow A through the whole engine against a misbehaving bank (sandbox fault plans, docs/sandbox-faults.md), on
SQLite and PostgreSQL. The sandbox runs under uvicorn on loopback, so dropped connections are real.

What the client-level tests (test_bank_client_faults.py, test_bank_client_uvicorn.py) prove for one call, these
prove for the flow: on each creating call (A1 consent, A2 upload, A3 payment) added latency, a 5xx, a dropped
connection, a 429 whose Retry-After the client does not wait for (the engine reschedules the step no earlier
than it asks), and a commit-then-fail whose retries run out (the engine records the call AMBIGUOUS and resolves it
later with the same key, or by reading) still end COMPLETED with exactly one consent and one payment at the bank,
one idempotency key per operation and each status once, in order. A semantic 4xx is not retried: the flow ends
FAILED after one call.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from engine_support import Rig, batch, engine_rig

from processor.domain.file_states import FlowState
from processor.engine.file_payloads import FilePayloads
from processor.store import EffectStatus, Operation, Store

STORY = ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
OPERATIONS = {
    "file-payment-consents.create": (Operation.CREATE_CONSENT, "/file-payment-consents"),
    "file-payment-consents.upload": (Operation.UPLOAD, "/file"),
    "file-payments.create": (Operation.CREATE_PAYMENT, "/file-payments"),
}


def hostile_plan(operation: str) -> list[dict[str, object]]:
    """Every call of the flow is slower; `operation` then fails every way in turn (the rig's client makes three
    attempts per step and does not wait for a Retry-After):

    step 1: 503, dropped connection, 429 Retry-After 5   -> the step is rescheduled (>= 5 s later)
    step 2: commit-then-fail, 502, 502                    -> AMBIGUOUS: the bank holds the resource, we do not know
    step 3: 502, then success                             -> the same key gives back the one resource
    """
    return [
        {"operation": "*", "fault": "latency", "latency_ms": 5, "jitter_ms": 10},
        {"operation": operation, "fault": "error", "status": 503, "times": 1},
        {"operation": operation, "fault": "drop", "times": 1},
        {"operation": operation, "fault": "rate_limit", "retry_after": 5, "times": 1},
        {"operation": operation, "fault": "commit_then_fail", "times": 1},
        {"operation": operation, "fault": "error", "status": 502, "times": 3},
    ]


async def approve_when_asked(rig: Rig, batch_id: str) -> None:
    await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
    approval = await rig.approve(rig.approval_url(batch_id))
    assert approval.callback is not None and approval.callback.status_code == 200


@pytest.mark.parametrize("operation", list(OPERATIONS))
async def test_a_hostile_bank_on_each_creating_call_still_pays_exactly_once(store: Store, operation: str) -> None:
    async with engine_rig(store) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        rig.faults(hostile_plan(operation))
        op, path = OPERATIONS[operation]

        # Step 1 ends in the 429: the step is rescheduled, no earlier than the bank's Retry-After.
        target = FlowState.AUTHORIZED if op is Operation.CREATE_PAYMENT else FlowState.RECEIVED
        if op is Operation.UPLOAD:
            target = FlowState.CONSENT_CREATED
        if op is Operation.CREATE_PAYMENT:
            await approve_when_asked(rig, batch_id)
        started = rig.clock.now()
        await rig.run_round()
        flow = rig.flow(batch_id)
        assert flow.state == target and flow.attempts == 1 and "RateLimited" in (flow.last_error or "")
        assert flow.next_action_at is not None and flow.next_action_at >= started + timedelta(seconds=5)

        # Step 2: the resource is created but the answer is lost: recorded AMBIGUOUS, same state.
        rig.clock.advance((flow.next_action_at - rig.clock.now()).total_seconds())
        await rig.run_round()
        flow = rig.flow(batch_id)
        assert flow.state == target and flow.attempts == 2
        effect = store.run(lambda tx: tx.side_effects.get(batch_id, op), write=False)
        assert effect is not None and effect.status is EffectStatus.AMBIGUOUS
        kind = "file_payment" if op is Operation.CREATE_PAYMENT else "file_consent"
        assert rig.count(kind) == 1  # the bank did act

        # Step 3 onwards: resolved, and the flow goes on to its end.
        if op is Operation.CREATE_PAYMENT:
            flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        else:
            await approve_when_asked(rig, batch_id)
            flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        assert flow.state == FlowState.COMPLETED, flow
        assert rig.count("file_consent") == 1 and rig.count("file_payment") == 1
        assert rig.statuses(batch_id) == STORY
        done = store.run(lambda tx: tx.side_effects.get(batch_id, op), write=False)
        assert done is not None and done.status is EffectStatus.DONE and done.attempts >= 3
        assert rig.keys_used(path) == {done.idempotency_key}
        fired: dict[str, int] = {}
        for rule in rig.bank.faults.rules:
            fired[rule.fault] = fired.get(rule.fault, 0) + rule.fired
        assert fired["drop"] == fired["rate_limit"] == fired["commit_then_fail"] == 1, fired
        assert fired["error"] >= 3, fired  # (a resumed upload is resolved by reading: one 502 fewer)


async def test_latency_and_random_5xx_everywhere_still_pay_exactly_once(store: Store) -> None:
    async with engine_rig(store) as rig:
        rig.faults(
            [
                {"operation": "*", "fault": "latency", "latency_ms": 10, "jitter_ms": 20},
                {"operation": "file-*", "fault": "error", "status": 503, "probability": 0.3},
                {"operation": "file-*.create", "fault": "commit_then_fail", "probability": 0.3},
            ]
        )
        documents = [batch() for _ in range(3)]
        for document in documents:
            await rig.submit(document)
        for document in documents:
            await approve_when_asked(rig, document["batch_id"])
        for document in documents:
            flow = await rig.to_state(document["batch_id"], FlowState.COMPLETED, FlowState.FAILED)
            assert flow.state == FlowState.COMPLETED, flow
            assert rig.statuses(document["batch_id"]) == STORY
        assert rig.count("file_consent") == 3 and rig.count("file_payment") == 3
        assert sum(r.fired for r in rig.bank.faults.rules if r.fault != "latency") > 0


async def test_a_semantic_refusal_is_not_retried(store: Store) -> None:
    # The payment call carries x-fapi-financial-id; this integration's is wrong, so A3 gets 400
    # UK.OBIE.Header.Invalid (consent creation and upload do not send it and succeed).
    async with engine_rig(store, integration_options={"financial_id": "0015800000WRONGAAA"}) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        rig.faults([{"operation": "*", "fault": "latency", "latency_ms": 5}])
        await approve_when_asked(rig, batch_id)
        flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        assert flow.state == FlowState.FAILED
        assert len(rig.sent.to("/file-payments", "POST")) == 1  # one call, no retry inside or outside the client
        effect = store.run(lambda tx: tx.side_effects.get(batch_id, Operation.CREATE_PAYMENT), write=False)
        assert effect is not None and effect.status is EffectStatus.FAILED
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "FAILED"]
        assert "Header.Invalid" in (rig.events(batch_id)[-1].payload["reason"] or "")
        assert rig.count("file_payment") == 0
        assert await rig.run_round() == 0  # nothing more happens


async def test_a_payment_that_may_exist_is_never_reported_failed_for_want_of_a_token(store: Store) -> None:
    # A3 committed at the bank, every answer lost (AMBIGUOUS); then the consent's tokens are gone. Repeating A3
    # needs a token, and the consent reads Consumed (a payment exists), so the flow is not ended FAILED.
    async with engine_rig(store) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        await approve_when_asked(rig, batch_id)
        rig.faults(
            [
                {"operation": "file-payments.create", "fault": "commit_then_fail", "times": 1},
                {"operation": "file-payments.create", "fault": "error", "status": 502, "times": 3},
            ]
        )
        await rig.run_round()
        flow = rig.flow(batch_id)
        assert flow.state == FlowState.AUTHORIZED and flow.consent_id is not None
        assert rig.count("file_payment") == 1
        consent_id = flow.consent_id
        store.run(lambda tx: tx.tokens.delete(consent_id))

        for _ in range(3):
            flow = rig.flow(batch_id)
            assert flow.next_action_at is not None
            rig.clock.advance(max(0.0, (flow.next_action_at - rig.clock.now()).total_seconds()))
            await rig.run_round()
        flow = rig.flow(batch_id)
        assert flow.state == FlowState.AUTHORIZED and "no tokens" in (flow.last_error or "")
        effect = store.run(lambda tx: tx.side_effects.get(batch_id, Operation.CREATE_PAYMENT), write=False)
        assert effect is not None and effect.status is EffectStatus.AMBIGUOUS
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]
        assert rig.count("file_payment") == 1


async def test_a_payment_that_may_exist_is_never_reported_failed_when_its_batch_no_longer_builds(
    store: Store,
) -> None:
    # The same lost A3, then the stored batch no longer builds a payload (say a stricter validation deployed):
    # the request cannot be rebuilt, the consent reads Consumed, so the flow is not ended FAILED.
    async with engine_rig(store) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        await approve_when_asked(rig, batch_id)
        rig.faults(
            [
                {"operation": "file-payments.create", "fault": "commit_then_fail", "times": 1},
                {"operation": "file-payments.create", "fault": "error", "status": 502, "times": 3},
            ]
        )
        await rig.run_round()
        assert rig.flow(batch_id).state == FlowState.AUTHORIZED and rig.count("file_payment") == 1
        store.run(lambda tx: tx.raw.execute("UPDATE flows SET payload = ? WHERE batch_id = ?", ('{"x": 1}', batch_id)))
        rig.engine.file_flow.payloads = FilePayloads(store)  # a new process: nothing cached

        flow = rig.flow(batch_id)
        assert flow.next_action_at is not None
        rig.clock.advance(max(0.0, (flow.next_action_at - rig.clock.now()).total_seconds()))
        await rig.run_round()
        flow = rig.flow(batch_id)
        assert flow.state == FlowState.AUTHORIZED and "no longer" in (flow.last_error or "")
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]
