"""Never a second consent or a second VRP: the sandbox commits and then fails (B1, B2), the engine aborts between
recording a call and recording its outcome, a process is killed mid-payment; each time the work resumes from the
store (the same idempotency key) and the bank holds exactly one resource. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_support import worker_round
from paths import child_pythonpath
from sandbox_process import SandboxProcess
from store_fixtures import StoreTarget
from vrp_engine_support import (
    Crash,
    mandate_request,
    payment_request,
    vrp_rig,
    vrp_sandbox,  # noqa: F401  (module fixture)
)

from processor.store import Cipher, EffectStatus, Operation, SideEffect, Store, generate_key

B1 = "domestic-vrp-consents.create"
B2 = "domestic-vrps.create"
HERE = Path(__file__).parent


def _effect(store: Store, scope: str, operation: Operation) -> SideEffect:
    found = store.run(lambda tx: tx.side_effects.get(scope, operation), write=False)
    assert found is not None, f"{operation} of {scope} was never recorded"
    return found


async def test_commit_then_fail_on_consent_creation_leaves_one_consent(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        before = await rig.counts()
        # The first B1 commits and answers 500; the client's four retries (same key) get 503: the outcome is
        # unknown when the call gives up.
        await rig.faults(
            [
                {"operation": B1, "fault": "commit_then_fail", "times": 1},
                {"operation": B1, "fault": "error", "status": 503, "times": 4},
            ]
        )
        request = mandate_request(now=rig.clock.now())
        mandate_id = request["mandate_id"]
        outcome = await rig.vrp.submit_mandate(request)
        assert outcome.created and outcome.mandate.state == "RECEIVED"
        assert outcome.mandate.last_error is not None and "503" in outcome.mandate.last_error
        effect = _effect(store, mandate_id, Operation.CREATE_VRP_CONSENT)
        assert effect.status is EffectStatus.AMBIGUOUS
        key = effect.idempotency_key
        assert (await rig.counts())["vrp_consent"] - before["vrp_consent"] == 1  # the bank did create it
        assert rig.statuses(mandate_id) == []

        # Later, a worker of the assembled engine (any instance) repeats B1 with the same key.
        await rig.advance(rig.settings.retry_max + 1)
        assert await worker_round(rig.engine.worker()) >= 1
        mandate = rig.mandate(mandate_id)
        assert mandate.state == "AWAITING_AUTHORIZATION" and mandate.consent_id is not None
        done = _effect(store, mandate_id, Operation.CREATE_VRP_CONSENT)
        assert done.status is EffectStatus.DONE and done.idempotency_key == key
        assert done.resource_id == mandate.consent_id
        assert (await rig.counts())["vrp_consent"] - before["vrp_consent"] == 1
        assert rig.statuses(mandate_id) == ["AUTHORIZATION_REQUIRED"]


async def test_commit_then_fail_on_payment_creation_leaves_one_vrp(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate()
        before = await rig.counts()
        await rig.faults(
            [
                {"operation": B2, "fault": "commit_then_fail", "times": 1},
                {"operation": B2, "fault": "error", "status": 502, "times": 4},
            ]
        )
        outcome = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "42.00"))
        assert outcome.payment is not None and outcome.payment.state == "SUBMITTED"
        payment_id = outcome.payment.payment_id
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1
        effect = _effect(store, payment_id, Operation.CREATE_VRP)
        assert effect.status is EffectStatus.AMBIGUOUS
        assert rig.payment(payment_id).idempotency_key == effect.idempotency_key

        done = await rig.vrp.follow_payment(payment_id, max_seconds=120)  # waits its retry, repeats B2, follows
        assert done.state == "COMPLETED" and done.domestic_vrp_id is not None
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1
        assert rig.statuses(mandate.mandate_id, payment_id) == ["PAYMENT_PENDING", "PAYMENT_COMPLETED"]


async def test_a_configuration_change_between_attempts_still_creates_one_consent(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        before = await rig.counts()
        await rig.faults(
            [
                {"operation": B1, "fault": "commit_then_fail", "times": 1},
                {"operation": B1, "fault": "error", "status": 503, "times": 4},
            ]
        )
        request = mandate_request(now=rig.clock.now())  # no description: B1's names the TPP (the convention)
        mandate_id = request["mandate_id"]
        assert (await rig.vrp.submit_mandate(request)).mandate.state == "RECEIVED"
        assert (await rig.counts())["vrp_consent"] - before["vrp_consent"] == 1  # created, the answer lost

        # A deploy renames the TPP: the body the configuration builds now differs from the one first sent.
        engine, _ = rig.new_engine(tpp_name="Renamed Payments Ltd")
        await rig.advance(rig.settings.retry_max + 1)
        assert await worker_round(engine.worker()) >= 1
        mandate = rig.mandate(mandate_id)
        assert mandate.state == "AWAITING_AUTHORIZATION", mandate.last_error
        assert _effect(store, mandate_id, Operation.CREATE_VRP_CONSENT).resource_id == mandate.consent_id
        assert (await rig.counts())["vrp_consent"] - before["vrp_consent"] == 1
        assert rig.statuses(mandate_id) == ["AUTHORIZATION_REQUIRED"]


async def test_a_configuration_change_between_attempts_is_never_reported_rejected(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    # The audit's reproduction: B2 committed at the bank, every answer lost, the TPP renamed by a deploy, the
    # payment resumed. Rebuilding the body would send another request under the same key ("already used with
    # a different body") and report a paid payment REJECTED; the bytes first sent are sent again instead.
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate()
        before = await rig.counts()
        await rig.faults(
            [
                {"operation": B2, "fault": "commit_then_fail", "times": 1},
                {"operation": B2, "fault": "error", "status": 502, "times": 4},
            ]
        )
        instruction = payment_request(mandate.mandate_id, "250.00", remittance=None)  # B2 names the TPP
        outcome = await rig.vrp.submit_payment(instruction)
        assert outcome.payment is not None and outcome.payment.state == "SUBMITTED"
        payment_id = outcome.payment.payment_id
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1
        first = _effect(store, payment_id, Operation.CREATE_VRP)
        assert first.status is EffectStatus.AMBIGUOUS and first.request_body is not None

        _, renamed = rig.new_engine(tpp_name="Renamed Payments Ltd")
        done = await renamed.follow_payment(payment_id, max_seconds=120)
        assert done.state == "COMPLETED", done.last_error
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1
        assert rig.statuses(mandate.mandate_id, payment_id) == ["PAYMENT_PENDING", "PAYMENT_COMPLETED"]
        effect = _effect(store, payment_id, Operation.CREATE_VRP)
        assert effect.status is EffectStatus.DONE and effect.request_body == first.request_body


async def test_no_token_to_resolve_a_payment_with_is_never_reported_rejected(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    # B2 committed and its answers lost, then the consent's tokens are gone: the call cannot be repeated, and
    # nothing read can prove the VRP was not created, so the payment is never published PAYMENT_REJECTED; the
    # mandate asks its approver again and the payment waits, queued with its B2 record (same key after approval).
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate()
        before = await rig.counts()
        await rig.faults(
            [
                {"operation": B2, "fault": "commit_then_fail", "times": 1},
                {"operation": B2, "fault": "error", "status": 502, "times": 4},
            ]
        )
        outcome = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "80.00"))
        assert outcome.payment is not None and outcome.payment.state == "SUBMITTED"
        payment_id = outcome.payment.payment_id
        consent_id = mandate.consent_id
        assert consent_id is not None
        store.run(lambda tx: tx.tokens.delete(consent_id))

        later = await rig.vrp.follow_payment(payment_id, max_seconds=30)
        assert later.state == "SUBMITTED" and "REAUTHORIZATION_REQUIRED" in (later.last_error or "")
        assert "no tokens" in str(rig.mandate(mandate.mandate_id).last_error)
        assert _effect(store, payment_id, Operation.CREATE_VRP).status is EffectStatus.AMBIGUOUS
        assert rig.statuses(mandate.mandate_id, payment_id) == []
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1


@pytest.mark.parametrize("point", ["create_vrp_consent:before", "create_vrp_consent:after"])
async def test_a_crash_around_consent_creation_resumes_without_a_second_consent(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
    point: str,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        before = await rig.counts()
        rig.crash_at(point)
        request = mandate_request(now=rig.clock.now())
        with pytest.raises(Crash):
            await rig.vrp.submit_mandate(request)
        mandate_id = request["mandate_id"]
        stuck = rig.mandate(mandate_id)
        assert stuck.state == "RECEIVED" and stuck.lease_owner is not None  # the dead owner's lease
        assert _effect(store, mandate_id, Operation.CREATE_VRP_CONSENT).status is EffectStatus.PENDING
        created_at_bank = 1 if point.endswith("after") else 0
        assert (await rig.counts())["vrp_consent"] - before["vrp_consent"] == created_at_bank

        rig.crash_at(None)
        _, other = rig.new_engine()  # another process
        assert (await other.advance_mandate(mandate_id)).state == "RECEIVED"  # the lease still holds it
        await rig.advance(rig.settings.lease_seconds + 1)
        resumed = await other.advance_mandate(mandate_id)
        assert resumed.state == "AWAITING_AUTHORIZATION"
        assert (await rig.counts())["vrp_consent"] - before["vrp_consent"] == 1
        # The same request again is a no-op, and the mandate can be authorised as usual.
        assert not (await other.submit_mandate(request)).created
        assert (await rig.approve(mandate_id)).status_code == 200
        assert rig.statuses(mandate_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]


async def test_a_lost_code_exchange_gets_the_mandate_a_new_consent(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    """The bank commits the code exchange, then answers 500: the consent is Authorised there, its tokens never
    reached us and the code is spent. The mandate goes back for a new consent behind the same approval link
    (no second AUTHORIZATION_REQUIRED); approved once more, its payments work under the new consent."""
    async with vrp_rig(vrp_sandbox, store) as rig:
        before = await rig.counts()
        mandate = await rig.new_mandate()
        mandate_id, first_consent = mandate.mandate_id, mandate.consent_id
        assert mandate.state == "AWAITING_AUTHORIZATION" and first_consent is not None
        # The client-credentials token is cached since B1: the next token call is the code exchange.
        await rig.faults([{"operation": "token", "fault": "commit_then_fail", "status": 500, "times": 1}])
        lost = await rig.approve(mandate_id)
        assert lost.status_code == 409 and "approve once more" in lost.text, lost.text
        back = rig.mandate(mandate_id)
        assert back.state == "RECEIVED" and back.consent_id is None
        assert store.run(lambda tx: tx.tokens.get(first_consent), write=False) is None
        retired = _effect(store, f"{mandate_id}/replaced/{first_consent}", Operation.CREATE_VRP_CONSENT)
        assert retired.resource_id == first_consent

        assert await worker_round(rig.engine.worker()) >= 1  # B1 again, with a new idempotency key
        renewed = rig.mandate(mandate_id)
        assert renewed.state == "AWAITING_AUTHORIZATION" and renewed.consent_id not in (None, first_consent)
        assert _effect(store, mandate_id, Operation.CREATE_VRP_CONSENT).idempotency_key != retired.idempotency_key
        assert (await rig.approve(mandate_id)).status_code == 200
        assert rig.mandate(mandate_id).state == "AUTHORIZED"
        paid = await rig.vrp.submit_payment(payment_request(mandate_id, "12.34"))
        assert paid.payment is not None and paid.payment.state in ("PENDING", "COMPLETED")

        after = await rig.counts()
        assert after["vrp_consent"] - before["vrp_consent"] == 2
        assert after["domestic_vrp"] - before["domestic_vrp"] == 1
        events = rig.events(mandate_id)
        assert [e["status"] for e in events][:2] == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]
        assert events[0]["consent_id"] == first_consent and events[1]["consent_id"] == renewed.consent_id


@pytest.mark.parametrize("point", ["create_vrp:before", "create_vrp:after"])
async def test_a_crash_around_payment_creation_resumes_without_a_second_vrp(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
    point: str,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate()
        before = await rig.counts()
        rig.crash_at(point)
        instruction = payment_request(mandate.mandate_id, "99.99")
        with pytest.raises(Crash):
            await rig.vrp.submit_payment(instruction)
        payment_id = instruction["payment_id"]
        assert rig.payment(payment_id).state == "SUBMITTED"
        key = rig.payment(payment_id).idempotency_key
        assert key is not None
        created_at_bank = 1 if point.endswith("after") else 0
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == created_at_bank

        rig.crash_at(None)
        engine, other = rig.new_engine()
        assert not (await other.submit_payment(instruction)).created  # a redelivered instruction: no-op
        await rig.advance(rig.settings.lease_seconds + 1)
        assert await worker_round(engine.worker()) >= 1  # another instance's worker takes the payment over
        done = await other.follow_payment(payment_id, max_seconds=120)
        assert done.state == "COMPLETED" and done.idempotency_key == key
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1
        assert rig.statuses(mandate.mandate_id, payment_id) == ["PAYMENT_PENDING", "PAYMENT_COMPLETED"]


async def test_a_killed_process_resumes_without_paying_twice(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store_target: StoreTarget,
) -> None:
    key = generate_key()
    store = store_target.open(Cipher.from_text(key))
    try:
        async with vrp_rig(vrp_sandbox, store) as rig:
            mandate = await rig.authorised_mandate()
            before = await rig.counts()
            instruction = payment_request(mandate.mandate_id, "15.00")
            args = {
                "url": store_target.url,
                "schema": store_target.schema,
                "key": key,
                "dir": str(vrp_sandbox.directory),
                "offset": rig.clock.offset.total_seconds(),
                "point": "create_vrp:after",
                "payment": instruction,
            }
            env = {**os.environ, "PYTHONPATH": child_pythonpath(HERE)}
            child = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, str(HERE / "vrp_engine_child.py"), json.dumps(args)],
                env=env,
                capture_output=True,
                timeout=120,
            )
            assert child.returncode == 17, child.stderr.decode()[-3000:]
            payment_id = instruction["payment_id"]
            assert rig.payment(payment_id).state == "SUBMITTED"
            assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1

            await rig.advance(rig.settings.lease_seconds + 1)
            done = await rig.vrp.follow_payment(payment_id, max_seconds=120)
            assert done.state == "COMPLETED"
            assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1
            effect = _effect(store, payment_id, Operation.CREATE_VRP)
            assert effect.attempts == 2 and effect.resource_id == done.domestic_vrp_id
    finally:
        store.close()


async def test_concurrent_payments_cannot_share_the_last_of_a_limit(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate(
            periodic_limits=[{"amount": "100.00", "period_type": "Day", "period_alignment": "Consent"}]
        )
        _, other = rig.new_engine()
        before = await rig.counts()
        outcomes = await asyncio.gather(
            rig.vrp.submit_payment(payment_request(mandate.mandate_id, "60.00")),
            other.submit_payment(payment_request(mandate.mandate_id, "60.00")),
        )
        states = sorted(o.payment.state for o in outcomes if o.payment is not None)
        assert states[1] == "REFUSED" and states[0] in ("COMPLETED", "PENDING")
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1
