"""Flow B through the engine against the sandbox bank process: a mandate authorised on the consent page, payments
within its limits completed, payments outside them refused without a bank call, the bank's own refusal, tokens
refreshed past their lifetime, duplicates, rejection and expiry. Each test runs on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from sandbox_process import SandboxProcess
from vrp_engine_support import (
    VRP_DELAY,
    mandate_request,
    payment_request,
    vrp_rig,
    vrp_sandbox,  # noqa: F401  (module fixture)
)

import schemas
from processor.store import Operation, Store
from producers.relay import outbox_record
from schemas.topics import VRP_STATUS_TOPIC


async def test_mandate_authorised_on_the_consent_page_then_payments_complete(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        before = await rig.counts()
        request = mandate_request(now=rig.clock.now())
        mandate_id = request["mandate_id"]
        outcome = await rig.vrp.submit_mandate(request)
        assert outcome.created and outcome.mandate.state == "AWAITING_AUTHORIZATION"
        consent_id = outcome.mandate.consent_id
        assert consent_id is not None and consent_id.startswith("vrp-")
        link = rig.approval_link(mandate_id)
        assert outcome.authorization_url == link
        assert link.startswith(f"{rig.config.processor.public_url}/approve/mandate/{mandate_id}?t=")

        # A repeated request changes nothing: no second consent, no second event.
        again = await rig.vrp.submit_mandate(request)
        assert not again.created and again.same_document and again.mandate.consent_id == consent_id
        resent = await rig.vrp.submit_mandate({**request, "requested_at": "2031-01-02T03:04:05.000Z", "source": "x"})
        assert not resent.created and resent.same_document

        answer = await rig.approve(mandate_id)
        assert answer.status_code == 200 and "Authorization received" in answer.text
        assert rig.mandate(mandate_id).state == "AUTHORIZED"

        first = await rig.vrp.submit_payment(payment_request(mandate_id, "250.00"))
        assert first.created and first.payment is not None
        assert first.payment.state == "PENDING"  # the bank answers Pending; settlement takes VRP_DELAY seconds
        done = await rig.vrp.follow_payment(first.payment.payment_id, max_seconds=10 * VRP_DELAY)
        assert done.state == "COMPLETED" and done.bank_status == "AcceptedSettlementCompleted"
        assert done.domestic_vrp_id is not None and done.domestic_vrp_id.startswith("obvrp-")

        second = await rig.vrp.submit_payment(payment_request(mandate_id, "0.10"))
        assert second.payment is not None
        second_done = await rig.vrp.follow_payment(second.payment.payment_id, max_seconds=10 * VRP_DELAY)
        assert second_done.state == "COMPLETED"

        after = await rig.counts()
        assert after["vrp_consent"] - before["vrp_consent"] == 1
        assert after["domestic_vrp"] - before["domestic_vrp"] == 2

        assert rig.statuses(mandate_id) == [
            "AUTHORIZATION_REQUIRED",
            "AUTHORIZED",
            "PAYMENT_PENDING",
            "PAYMENT_COMPLETED",
            "PAYMENT_PENDING",
            "PAYMENT_COMPLETED",
        ]
        events = rig.events(mandate_id)
        assert events[0]["authorization_url"] == link and events[0]["consent_id"] == consent_id
        completed = events[3]
        assert completed["payment_id"] == first.payment.payment_id
        assert completed["domestic_vrp_id"] == done.domestic_vrp_id
        assert Decimal(completed["amount"]) == Decimal("250.00") and completed["currency"] == "GBP"
        assert completed["bank_status"] == "AcceptedSettlementCompleted"
        stored = rig.store.run(lambda tx: tx.outbox.events(VRP_STATUS_TOPIC, mandate_id), write=False)
        for event in stored:  # every stored payload is a valid vrp.status record, as the relay publishes it
            record = schemas.encode(VRP_STATUS_TOPIC, outbox_record(event))
            assert schemas.decode(VRP_STATUS_TOPIC, record)["status"] == event.payload["status"]
        # The approval link no longer starts an authorization once the mandate is authorised.
        reopened = await rig.http.get(link)
        assert reopened.status_code == 409


async def test_payments_outside_the_limits_are_refused_without_a_bank_call(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate(
            max_individual_amount="100.00",
            periodic_limits=[{"amount": "150.00", "period_type": "Day", "period_alignment": "Consent"}],
        )
        mandate_id = mandate.mandate_id
        before = await rig.counts()
        await rig.count_calls("domestic-vrps.create")
        ok = await rig.vrp.submit_payment(payment_request(mandate_id, "100.00"))
        assert ok.payment is not None and ok.payment.state in ("PENDING", "COMPLETED")
        assert await rig.calls() == 1

        too_big = await rig.vrp.submit_payment(payment_request(mandate_id, "100.01"))
        assert too_big.created and too_big.payment is not None and too_big.payment.state == "REFUSED"
        assert too_big.reason is not None and "MaximumIndividualAmount" in too_big.reason

        over_period = await rig.vrp.submit_payment(payment_request(mandate_id, "60.00"))
        assert over_period.payment is not None and over_period.payment.state == "REFUSED"
        assert over_period.reason is not None and "PeriodicLimits[0]" in over_period.reason
        assert "100.00 already used" in over_period.reason

        assert await rig.calls() == 1  # the bank never heard of the refused payments
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1
        fits = await rig.vrp.submit_payment(payment_request(mandate_id, "50.00"))
        assert fits.payment is not None and fits.payment.state in ("PENDING", "COMPLETED")
        assert await rig.calls() == 2
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 2

        refused = [e for e in rig.events(mandate_id) if e["status"] == "LIMIT_EXCEEDED"]
        assert [e["payment_id"] for e in refused] == [too_big.payment.payment_id, over_period.payment.payment_id]
        assert "MaximumIndividualAmount" in refused[0]["reason"] and Decimal(refused[0]["amount"]) == Decimal("100.01")
        refused_ids = (too_big.payment.payment_id, over_period.payment.payment_id)
        recorded = store.run(lambda tx: [tx.side_effects.get(p, Operation.CREATE_VRP) for p in refused_ids])
        assert recorded == [None, None]  # no bank call was even begun for them


async def test_the_bank_stays_the_authority_on_the_limits(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        now = rig.clock.now()
        mandate = await rig.authorised_mandate(valid_to=(now + timedelta(hours=2)).isoformat())
        # The bank's clock runs three hours ahead of ours: our check passes, the bank's validity check fails.
        await rig.advance(3 * 3600, ours=False)
        outcome = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "10.00"))
        assert outcome.payment is not None and outcome.payment.state == "REJECTED"
        event = rig.events(mandate.mandate_id)[-1]
        assert event["status"] == "LIMIT_EXCEEDED" and event["payment_id"] == outcome.payment.payment_id
        assert "UK.OBIE.Rules.FailsControlParameters" in event["reason"]
        assert "ValidToDateTime" in event["reason"]


async def test_payments_continue_after_the_access_token_expires(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate()
        consent_id = mandate.consent_id
        assert consent_id is not None
        first = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "20.00"))
        assert first.payment is not None
        tokens = store.run(lambda tx: tx.tokens.get(consent_id), write=False)
        assert tokens is not None and tokens.refresh_token is not None

        # Five days and a second pass on both clocks: the access token is dead; ours knows it and refreshes first.
        await rig.advance(432_001)
        second = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "30.00"))
        assert second.payment is not None and second.payment.state in ("PENDING", "COMPLETED")
        refreshed = store.run(lambda tx: tx.tokens.get(consent_id), write=False)
        assert refreshed is not None and refreshed.version == tokens.version + 1
        assert refreshed.access_token != tokens.access_token
        assert refreshed.expires_at > rig.clock.now()

        # Only the bank's clock moves on: our token looks valid, the bank says token_expired; refresh, same call.
        await rig.advance(432_001, ours=False)
        third = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "40.00"))
        assert third.payment is not None and third.payment.state in ("PENDING", "COMPLETED")
        again = store.run(lambda tx: tx.tokens.get(consent_id), write=False)
        assert again is not None and again.version == refreshed.version + 1
        assert await rig.vrp.follow_payment(third.payment.payment_id, max_seconds=60) is not None
        assert rig.payment(third.payment.payment_id).state == "COMPLETED"
        assert rig.statuses(mandate.mandate_id).count("PAYMENT_PENDING") == 3


async def test_a_duplicate_payment_id_never_makes_a_second_vrp(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate()
        before = await rig.counts()
        instruction = payment_request(mandate.mandate_id, "75.00")
        first = await rig.vrp.submit_payment(instruction)
        assert first.created and first.payment is not None
        again = await rig.vrp.submit_payment(instruction)
        assert not again.created and again.same_document and again.payment is not None
        assert again.payment.payment_id == first.payment.payment_id
        # `dispersion vrp pay` rerun with the same file: only requested_at differs, it is the same instruction
        rerun = await rig.vrp.submit_payment({**instruction, "requested_at": "2031-01-02T03:04:05.000Z"})
        assert not rerun.created and rerun.same_document
        changed = await rig.vrp.submit_payment({**instruction, "amount": "76.00"})
        assert not changed.created and not changed.same_document
        assert (await rig.counts())["domestic_vrp"] - before["domestic_vrp"] == 1
        assert rig.statuses(mandate.mandate_id, first.payment.payment_id)[0] == "PAYMENT_PENDING"
        assert len(rig.statuses(mandate.mandate_id, first.payment.payment_id)) == 1


async def test_a_rejected_mandate_ends_rejected_and_pays_nothing(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.new_mandate()
        parked = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "10.00"))
        assert parked.payment is not None and parked.payment.state == "RECEIVED"  # waits for the approver
        answer = await rig.approve(mandate.mandate_id, approve=False)
        assert answer.status_code == 200 and answer.json()["status"] == "success"  # JSON: not a browser
        assert "rejection was received" in answer.json()["message"]
        assert rig.mandate(mandate.mandate_id).state == "REJECTED"
        assert rig.payment(parked.payment.payment_id).state == "REJECTED"
        late = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "10.00"))
        assert late.payment is not None and late.payment.state == "REJECTED"
        assert rig.statuses(mandate.mandate_id) == [
            "AUTHORIZATION_REQUIRED",
            "REJECTED",
            "PAYMENT_REJECTED",
            "PAYMENT_REJECTED",
        ]
        assert "approver rejected" in rig.events(mandate.mandate_id)[1]["reason"]
        assert store.run(lambda tx: tx.tokens.get(str(mandate.consent_id)), write=False) is None


async def test_a_payment_waiting_for_its_mandate_is_paid_once_authorised(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.new_mandate()
        parked = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "12.34"))
        assert parked.payment is not None and parked.payment.state == "RECEIVED"
        await rig.approve(mandate.mandate_id)
        assert rig.payment(parked.payment.payment_id).next_action_at is not None
        done = await rig.vrp.follow_payment(parked.payment.payment_id, max_seconds=60)
        assert done.state == "COMPLETED"


async def test_an_unauthorised_mandate_expires_at_its_deadline(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.new_mandate()
        link = rig.approval_link(mandate.mandate_id)
        assert mandate.authorization_deadline is not None
        await rig.advance(rig.settings.authorization_deadline + 1)
        ended = await rig.vrp.advance_mandate(mandate.mandate_id)  # due at its deadline
        assert ended.state == "EXPIRED"
        assert rig.statuses(mandate.mandate_id) == ["AUTHORIZATION_REQUIRED", "EXPIRED"]
        assert (await rig.http.get(link)).status_code == 410


async def test_invalid_requests_publish_invalid(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        before = await rig.counts()
        bad = mandate_request(now=rig.clock.now(), currency="gbp", max_individual_amount="0", integration="nowhere")
        outcome = await rig.vrp.submit_mandate(bad)
        assert outcome.created and outcome.mandate.state == "INVALID"
        assert {p.split(":")[0] for p in outcome.problems} == {"currency", "max_individual_amount"}
        unknown = await rig.vrp.submit_mandate(mandate_request(now=rig.clock.now(), integration="nowhere"))
        assert unknown.mandate.state == "INVALID" and "not configured" in unknown.problems[0]
        assert rig.statuses(bad["mandate_id"]) == ["INVALID"]
        assert (await rig.counts())["vrp_consent"] == before["vrp_consent"]

        mandate = await rig.authorised_mandate()
        wrong = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "1.005"))
        assert wrong.payment is not None and wrong.payment.state == "INVALID"
        assert rig.statuses(mandate.mandate_id)[-1] == "INVALID"
        orphan = await rig.vrp.submit_payment(payment_request("m-missing", "1.00"))
        assert orphan.payment is None and orphan.reason == "mandate m-missing is unknown"
        assert rig.statuses("m-missing") == ["INVALID"]
