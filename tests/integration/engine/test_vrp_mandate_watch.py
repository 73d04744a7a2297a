"""Authorised mandates watched, against the sandbox bank process (its admin interface does what the customer does in
their banking app): a consent revoked at the bank ends the mandate and the next payment is refused without a B2
call; a refresh token revoked at the bank leads to re-authorization and the queued payment completes after it;
tokens are deleted from the store when the mandate ends or passes `valid_to`. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sandbox_process import SandboxProcess
from vrp_engine_support import (
    VRP_DELAY,
    payment_request,
    vrp_rig,
    vrp_sandbox,  # noqa: F401  (module fixture)
)

from processor.api.console.mandate_views import mandate_page
from processor.engine.settings import EngineSettings
from processor.store import Store

WATCH = 600.0  # [engine] mandate_watch_interval of these tests
SETTINGS = EngineSettings(
    authorization_deadline=3600,
    lease_seconds=30,
    poll_first=1.0,
    poll_max=8.0,
    retry_first=1.0,
    retry_max=8.0,
    duplicate_wait=0.5,
    mandate_watch_interval=WATCH,
)


async def test_a_consent_revoked_at_the_bank_ends_the_mandate_and_payments_are_refused_without_a_b2(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store, settings=SETTINGS) as rig:
        mandate = await rig.authorised_mandate()
        mandate_id, consent_id = mandate.mandate_id, mandate.consent_id
        assert consent_id is not None and rig.tokens_stored(consent_id)
        assert mandate.next_action_at is not None  # watched from now on
        paid = await rig.vrp.submit_payment(payment_request(mandate_id, "20.00"))
        assert paid.payment is not None and paid.payment.state == "PENDING"

        revoked = await rig.customer(consent_id, "revoke")
        assert revoked["Status"] == "Revoked"
        # The last read is older than the interval: the next payment reads the consent first, and is not sent.
        await rig.advance(WATCH + 1)
        await rig.count_calls("domestic-vrps.create")
        refused = await rig.vrp.submit_payment(payment_request(mandate_id, "30.00"))
        assert refused.payment is not None and refused.payment.state == "REJECTED"
        assert await rig.calls() == 0  # no B2
        ended = rig.mandate(mandate_id)
        assert ended.state == "REVOKED" and ended.bank_status == "Revoked"
        assert not rig.tokens_stored(consent_id)  # the refresh stops with the mandate

        events = rig.events(mandate_id)
        end = next(e for e in events if e["status"] == "REJECTED" and e.get("payment_id") is None)
        assert end["bank_status"] == "Revoked" and "Revoked at the bank" in end["reason"]
        last = events[-1]
        assert last["status"] == "PAYMENT_REJECTED" and last["payment_id"] == refused.payment.payment_id
        assert f"mandate {mandate_id} is REVOKED" in last["reason"] and "revoked it" in last["reason"]
        # Later payments are refused at intake, with the same reason; still no B2.
        later = await rig.vrp.submit_payment(payment_request(mandate_id, "5.00"))
        assert later.payment is not None and later.payment.state == "REJECTED"
        assert "Revoked at the bank" in str(later.payment.last_error)
        assert await rig.calls() == 0
        # The payment made before the revocation is still followed to its end (reading needs no consent token).
        done = await rig.vrp.follow_payment(paid.payment.payment_id, max_seconds=10 * VRP_DELAY)
        assert done.state == "COMPLETED"


async def test_the_watch_reads_an_authorised_consent_every_interval(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store, settings=SETTINGS) as rig:
        mandate = await rig.authorised_mandate()
        consent_id = mandate.consent_id
        assert consent_id is not None
        await rig.count_calls("domestic-vrp-consents.get")
        await rig.advance(WATCH / 2)
        assert (await rig.vrp.advance_mandate(mandate.mandate_id)).state == "AUTHORIZED"
        assert await rig.calls() == 0  # not due yet
        await rig.advance(WATCH / 2 + 1)
        watched = await rig.vrp.advance_mandate(mandate.mandate_id)
        assert watched.state == "AUTHORIZED" and await rig.calls() == 1
        assert watched.consent_read_at is not None and watched.next_action_at is not None
        assert watched.next_action_at - watched.consent_read_at == timedelta(seconds=WATCH)

        await rig.customer(consent_id, "revoke")
        await rig.advance(WATCH + 1)
        ended = await rig.vrp.advance_mandate(mandate.mandate_id)
        assert ended.state == "REVOKED" and ended.next_action_at is None
        assert not rig.tokens_stored(consent_id)
        assert rig.statuses(mandate.mandate_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "REJECTED"]


async def test_a_refresh_token_revoked_at_the_bank_asks_the_approver_again_and_the_queued_payment_completes(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store, settings=SETTINGS) as rig:
        mandate = await rig.authorised_mandate()
        mandate_id, consent_id = mandate.mandate_id, mandate.consent_id
        assert consent_id is not None
        first_link = rig.approval_link(mandate_id)
        await rig.customer(consent_id, "revoke-refresh-token")
        await rig.advance(432_001)  # the access token is dead; its refresh is refused

        queued = await rig.vrp.submit_payment(payment_request(mandate_id, "40.00"))
        assert queued.payment is not None and queued.payment.state == "SUBMITTED"
        assert queued.payment.next_action_at is None  # waits for the approver, not retried
        asking = rig.mandate(mandate_id)
        assert asking.state == "REAUTHORIZATION_REQUIRED" and not rig.tokens_stored(consent_id)
        event = rig.events(mandate_id)[-1]
        assert event["status"] == "AUTHORIZATION_REQUIRED" and "re-authorization required" in event["reason"]
        link = event["authorization_url"]
        assert link != first_link and link.startswith(f"{rig.config.processor.public_url}/approve/mandate/")
        assert (await rig.http.get(first_link)).status_code != 302  # the old link no longer opens the bank
        shown = store.run(
            lambda tx: mandate_page(tx, mandate_id, public_url=rig.config.processor.public_url, now=rig.clock.now()),
            write=False,
        )
        assert shown is not None and shown.approval_url == link  # the console shows operators the new link
        more = await rig.vrp.submit_payment(payment_request(mandate_id, "10.00"))
        assert more.payment is not None and more.payment.state == "RECEIVED"  # parked until the approval

        answer = await rig.approve(mandate_id)  # the same consent, authorised again by its customer
        assert answer.status_code == 200, answer.text
        again = rig.mandate(mandate_id)
        assert again.state == "AUTHORIZED" and again.consent_id == consent_id and rig.tokens_stored(consent_id)
        for payment in (queued.payment, more.payment):
            done = await rig.vrp.follow_payment(payment.payment_id, max_seconds=20 * VRP_DELAY)
            assert done.state == "COMPLETED", done
        assert rig.statuses(mandate_id)[:4] == [
            "AUTHORIZATION_REQUIRED",
            "AUTHORIZED",
            "AUTHORIZATION_REQUIRED",
            "AUTHORIZED",
        ]
        assert (await rig.counts())["domestic_vrp"] >= 2


async def test_tokens_are_gone_from_the_store_after_valid_to(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store, settings=SETTINGS) as rig:
        now = rig.clock.now()
        mandate = await rig.authorised_mandate(valid_to=(now + timedelta(hours=2)).isoformat())
        consent_id = mandate.consent_id
        assert consent_id is not None and rig.tokens_stored(consent_id)
        await rig.count_calls("token")
        await rig.advance(2 * 3600 + 1)
        # The watch is due at valid_to at the latest (never later than the interval).
        ended = await rig.vrp.advance_mandate(mandate.mandate_id)
        assert ended.state == "EXPIRED" and "validity ended" in str(ended.last_error)
        assert not rig.tokens_stored(consent_id)
        assert rig.events(mandate.mandate_id)[-1]["status"] == "EXPIRED"
        late = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "1.00"))
        assert late.payment is not None and late.payment.state == "REJECTED"
        assert await rig.calls() == 0  # nothing refreshed the tokens of an ended mandate


async def test_a_payment_queued_for_re_authorization_is_refused_without_a_b2_when_the_mandate_ends(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    # The refresh grant is refused before B2 is ever sent: the payment waits queued. The customer then revokes the
    # consent, and the mandate ends: the queued payment is rejected with the mandate's reason, never retried.
    async with vrp_rig(vrp_sandbox, store, settings=SETTINGS) as rig:
        mandate = await rig.authorised_mandate()
        mandate_id, consent_id = mandate.mandate_id, mandate.consent_id
        assert consent_id is not None
        await rig.customer(consent_id, "revoke-refresh-token")
        await rig.advance(432_001)  # the access token is dead; its refresh is refused
        queued = await rig.vrp.submit_payment(payment_request(mandate_id, "40.00"))
        assert queued.payment is not None and queued.payment.state == "SUBMITTED"
        assert rig.mandate(mandate_id).state == "REAUTHORIZATION_REQUIRED"

        await rig.customer(consent_id, "revoke")
        await rig.count_calls("domestic-vrps.create")
        await rig.advance(SETTINGS.consent_watch_interval + 1)
        assert (await rig.vrp.advance_mandate(mandate_id)).state == "REVOKED"
        ended = await rig.vrp.follow_payment(queued.payment.payment_id, max_seconds=30)
        assert ended.state == "REJECTED", ended
        assert f"mandate {mandate_id} is REVOKED" in str(ended.last_error)
        assert await rig.calls() == 0  # no B2
        assert rig.statuses(mandate_id, queued.payment.payment_id) == ["PAYMENT_REJECTED"]
