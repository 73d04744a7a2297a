"""Submissions mean what they say (issue 18), on the real store (SQLite and PostgreSQL), the sandbox bank and the
callback API on loopback, with the engine's intake as the consumer calls it:

- a withdrawn batch: its REJECTED event names who, when and why; its link refuses with that; the corrected batch
  under the same id is a new attempt, paid once, whose statuses start over (the first attempt's events kept under
  `ID#1`) and whose old link says what became of attempt 1;
- an EXPIRED batch submitted again is paid; a redelivery of its original message stays a duplicate;
- a replayed dead letter of a batch refused INVALID is decided again: still invalid it stays refused, valid now it
  is paid;
- a batch paying what another recent batch pays is held before any bank call (AUTHORIZATION_REQUIRED with its link,
  `duplicate_of` and the figures), and paid once after a person confirms it; 80 % of its transfers count too;
  `--allow-duplicate-of` confirms up front;
- FAILED counts as "nothing paid" only while no file payment was asked of the bank.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from engine_support import batch, engine_rig

from processor.domain.file_states import FlowState
from processor.engine.intake import Guard, IntakeResult, accept_batch, calendars_of
from processor.engine.settings import EngineSettings
from processor.engine.withdrawal import WithdrawError, confirm_duplicate, withdraw_batch
from processor.store import Operation, Store

pytestmark = pytest.mark.timeout(120)


def relay(store: Store, rig: Any) -> None:
    """What the outbox relay does once Kafka acknowledged: every event published."""

    def work(tx: Any) -> None:
        events = tx.outbox.claim(owner="test-relay", now=rig.clock.now(), limit=10_000, lease_seconds=30)
        tx.outbox.mark_published([event.id for event in events], now=rig.clock.now())

    store.run(work)


async def submit(
    rig: Any,
    document: dict[str, Any],
    *,
    later: bool = True,
    replayed: bool = False,
    integrations: set[str] | None = None,
    guard: Guard | None = None,
) -> IntakeResult:
    """The intake as the consumer calls it, once the relay published what is pending; `later`: the submission is
    made now (not a redelivery)."""
    relay(rig.store, rig)
    if later:
        document = {**document, "requested_at": (rig.clock.now() + timedelta(milliseconds=1)).isoformat()}
    return await accept_batch(
        rig.store,
        document,
        now=rig.clock.now(),
        integrations=integrations if integrations is not None else set(rig.config.integrations),
        calendars=calendars_of(rig.config.integrations),
        guard=guard or Guard(public_url=rig.public_url),
        replayed=replayed,
    )


def payloads(store: Store, key: str) -> list[dict[str, Any]]:
    events = store.run(lambda tx: tx.outbox.events("dispersion.status", key), write=False)
    return [dict(event.payload) for event in events]


async def test_a_withdrawn_batch_refuses_its_link_and_the_corrected_one_is_paid_once(store: Store) -> None:
    async with engine_rig(store) as rig:
        first = batch("HEX-2026-11-B", [("200100300", "1000.00"), ("200100301", "266.25")])
        assert (await submit(rig, first, later=False)).created
        await rig.to_state("HEX-2026-11-B", FlowState.AWAITING_AUTHORIZATION)
        old_link = rig.approval_url("HEX-2026-11-B")

        flow = withdraw_batch(store, "HEX-2026-11-B", by="ana", reason="overtime corrected", now=rig.clock.now())
        assert flow.state == FlowState.WITHDRAWN
        rejected = payloads(store, "HEX-2026-11-B")[-1]
        assert rejected["status"] == "REJECTED" and rejected["withdrawn_by"] == "ana"
        assert rejected["reason"].startswith("withdrawn by ana at 20") and rejected["reason"].endswith(
            ": overtime corrected"
        )
        opened = await rig.open_link(old_link)
        assert opened.status_code == 410 and "withdrawn by ana at" in opened.text, opened.text
        with pytest.raises(WithdrawError, match="already withdrawn by ana"):
            withdraw_batch(store, "HEX-2026-11-B", by="bruno", reason="again", now=rig.clock.now())

        corrected = batch("HEX-2026-11-B", [("200100300", "1000.00"), ("200100301", "366.25")])
        again = await submit(rig, corrected)
        assert again.restarted and again.flow is not None and again.flow.attempt == 2
        assert again.status == FlowState.RECEIVED
        opened = await rig.open_link(old_link)
        assert opened.status_code == 410 and "attempt 1 of batch HEX-2026-11-B, withdrawn by ana" in opened.text

        await rig.to_state("HEX-2026-11-B", FlowState.AWAITING_AUTHORIZATION)
        new_link = rig.approval_url("HEX-2026-11-B")
        assert new_link != old_link
        approval = await rig.approve(new_link)
        assert approval.callback is not None and approval.callback.status_code == 200
        done = await rig.to_state("HEX-2026-11-B", FlowState.COMPLETED)
        assert done.control_sum == 1366.25
        assert rig.statuses("HEX-2026-11-B") == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
        assert {p["attempt"] for p in payloads(store, "HEX-2026-11-B")} == {2}
        assert rig.statuses("HEX-2026-11-B#1") == ["AUTHORIZATION_REQUIRED", "REJECTED"]
        assert (rig.count("file_consent"), rig.count("file_payment")) == (2, 1)

        with pytest.raises(WithdrawError, match="already ended COMPLETED"):
            withdraw_batch(store, "HEX-2026-11-B", by="ana", reason="too late", now=rig.clock.now())
        repeat = await submit(rig, corrected)  # a completed batch takes no new attempt
        assert not repeat.created and repeat.same_document


async def test_an_expired_batch_submitted_again_is_paid(store: Store) -> None:
    settings = EngineSettings(authorization_deadline=600, lease_seconds=30, duplicate_wait=0.2)
    async with engine_rig(store, settings=settings) as rig:
        original = batch("NOV-EXP", [("200100300", "10.00")])
        assert (await submit(rig, original, later=False)).created
        await rig.to_state("NOV-EXP", FlowState.AWAITING_AUTHORIZATION)
        rig.clock.advance(600)
        await rig.to_state("NOV-EXP", FlowState.EXPIRED, expire=True)

        redelivered = await submit(rig, original, later=False)  # the original message read again
        assert not redelivered.created and redelivered.status == FlowState.EXPIRED
        again = await submit(rig, original)
        assert again.restarted and again.flow is not None and again.flow.attempt == 2
        await rig.to_state("NOV-EXP", FlowState.AWAITING_AUTHORIZATION)
        await rig.approve(rig.approval_url("NOV-EXP"))
        await rig.to_state("NOV-EXP", FlowState.COMPLETED)
        assert rig.statuses("NOV-EXP#1") == ["AUTHORIZATION_REQUIRED", "EXPIRED"]
        assert rig.count("file_payment") == 1


async def test_a_replay_decides_again_against_todays_configuration(store: Store) -> None:
    async with engine_rig(store) as rig:
        document = batch("PAYDAY-1", [("200100300", "10.00")])
        refused = await submit(rig, document, later=False, integrations={"other"})  # sandbox not configured yet
        assert refused.created and refused.status == FlowState.INVALID
        still = await submit(rig, document, later=False, replayed=True, integrations={"other"})
        assert not still.created and still.status == FlowState.INVALID  # refused again: the same attempt

        replayed = await submit(rig, document, later=False, replayed=True)  # configured now
        assert replayed.restarted and replayed.status == FlowState.RECEIVED
        await rig.to_state("PAYDAY-1", FlowState.AWAITING_AUTHORIZATION)
        await rig.approve(rig.approval_url("PAYDAY-1"))
        await rig.to_state("PAYDAY-1", FlowState.COMPLETED)
        assert rig.statuses("PAYDAY-1#1") == ["INVALID"]
        assert rig.count("file_payment") == 1


async def test_a_duplicate_payroll_is_held_until_a_person_confirms_it(store: Store) -> None:
    rows = [(f"2001003{i:02d}", f"{100 + i}.00") for i in range(5)]
    async with engine_rig(store) as rig:
        assert (await submit(rig, batch("NOV-A", rows), later=False)).created
        held = await submit(rig, batch("NOV-B", rows))
        assert held.held is not None and "possible duplicate payroll of batch NOV-A" in held.held
        assert "5 of 5 transfers (100 %, 510.00 GTQ)" in held.held
        flow = rig.flow("NOV-B")
        assert flow.duplicate_of == "NOV-A" and flow.next_action_at is None
        (event,) = payloads(store, "NOV-B")
        assert event["status"] == "AUTHORIZATION_REQUIRED" and event["duplicate_of"] == "NOV-A"
        assert event["reason"].startswith("held: possible duplicate payroll of batch NOV-A")
        assert "dispersion confirm-duplicate --batch NOV-B" in event["reason"]
        link = str(event["authorization_url"])
        opened = await rig.open_link(link)
        assert opened.status_code == 409 and "held as a possible duplicate payroll of batch NOV-A" in opened.text
        await rig.run_round()
        assert rig.flow("NOV-B").state == FlowState.RECEIVED  # nothing went to the bank

        confirm_duplicate(store, "NOV-B", by="ana", now=rig.clock.now())
        with pytest.raises(WithdrawError, match="already confirmed by ana"):
            confirm_duplicate(store, "NOV-B", by="ana", now=rig.clock.now())
        await rig.to_state("NOV-B", FlowState.AWAITING_AUTHORIZATION)
        assert rig.statuses("NOV-B") == ["AUTHORIZATION_REQUIRED"]  # the link went out when it was held
        await rig.approve(link)
        await rig.to_state("NOV-B", FlowState.COMPLETED)
        authorized = next(p for p in payloads(store, "NOV-B") if p["status"] == "AUTHORIZED")
        assert authorized["duplicate_confirmed_by"] == "ana"
        assert rig.count("file_payment") == 1  # NOV-B only: NOV-A was never approved

        partial = [*rows[:4], ("200100399", "999.00")]  # 4 of 5 (80 %) the same
        flagged = await submit(rig, batch("NOV-C", partial))
        assert flagged.held is not None and "4 of 5 transfers (80 %, 406.00 GTQ)" in flagged.held
        allowed_guard = Guard(public_url=rig.public_url).allowing("NOV-A", "bruno")
        allowed = await submit(rig, batch("NOV-D", rows), guard=allowed_guard)
        assert allowed.held is None and rig.flow("NOV-D").duplicate_confirmed_by == "bruno"
        assert rig.flow("NOV-D").next_action_at is not None


async def test_failed_counts_as_nothing_paid_only_before_the_payment_was_asked(store: Store) -> None:
    async with engine_rig(store) as rig:
        for batch_id in ("F-1", "F-2"):
            await submit(rig, batch(batch_id, [("200100300", "10.00")]), later=False)
        now = rig.clock.now()

        def fail(batch_id: str) -> None:
            def work(tx: Any) -> None:
                flow = tx.flows.require(batch_id)
                tx.flows.update(batch_id, expected_version=flow.version, now=now, state=FlowState.FAILED)

            store.run(work)

        fail("F-1")
        fail("F-2")
        store.run(lambda tx: tx.side_effects.begin("F-2", Operation.CREATE_PAYMENT, now=now))
        assert store.run(lambda tx: tx.lifecycle.resubmittable(tx.flows.require("F-1")), write=False)
        assert not store.run(lambda tx: tx.lifecycle.resubmittable(tx.flows.require("F-2")), write=False)
        assert (await submit(rig, batch("F-1", [("200100300", "11.00")]))).restarted
        assert not (await submit(rig, batch("F-2", [("200100300", "11.00")]))).created
