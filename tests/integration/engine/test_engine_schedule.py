"""Scheduled batches (`execute_on`) through the engine: the real sandbox and our callback API on loopback, a real
store (SQLite and PostgreSQL), one manual clock. The consent and the approval happen at once; the file payment is
created on the day, in the integration's time zone, never earlier, even by a fresh engine after a restart."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from engine_support import Rig, batch, engine_rig

from processor.domain.file_states import FlowState
from processor.store import Store

GUATEMALA = {"timezone": "America/Guatemala"}  # UTC-6 all year
FILE_PAYMENTS = "/open-banking/v3.1/pisp/file-payments"


def scheduled(execute_on: str, **options: object) -> dict[str, object]:
    document = batch(**options)  # type: ignore[arg-type]
    document["execute_on"] = execute_on
    return document


def make_due_now(rig: Rig, batch_id: str) -> None:
    """What an engine that ignored the day (an older version, a stale schedule) would leave: the row due now."""
    flow = rig.flow(batch_id)
    rig.store.run(
        lambda tx: tx.flows.update(
            batch_id, expected_version=flow.version, now=rig.clock.now(), next_action_at=rig.clock.now()
        )
    )


def payments_sent(rig: Rig) -> int:
    return len(rig.sent.to(FILE_PAYMENTS, "POST"))


async def test_a_batch_for_tomorrow_is_approved_today_and_paid_only_tomorrow_even_after_a_restart(
    store: Store,
) -> None:
    async with engine_rig(store, integration_options=GUATEMALA) as rig:
        # 2026-11-02 09:00 UTC is 03:00 in Guatemala; tomorrow there starts at 2026-11-03 06:00 UTC.
        assert rig.clock.now() == datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
        tomorrow_starts = datetime(2026, 11, 3, 6, 0, tzinfo=UTC)
        document = scheduled("2026-11-03")
        batch_id = str(document["batch_id"])
        result = await rig.submit(document)
        assert result.created and result.status == FlowState.RECEIVED
        assert rig.flow(batch_id).execute_on == date(2026, 11, 3)

        # Consent and upload at once: the approver gets the link today.
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        approval = await rig.approve(rig.approval_url(batch_id))
        assert approval.callback is not None and approval.callback.status_code == 200
        assert "It will be paid on 3 Nov 2026." in approval.callback.text  # the approver is told the payday
        again = await rig.open_link(rig.approval_url(batch_id))  # the link again, once approved
        assert again.status_code == 409 and "Already authorised" in again.text and "3 Nov 2026" in again.text
        assert f"Batch {batch_id}" in again.text
        flow = rig.flow(batch_id)
        assert flow.state == FlowState.AUTHORIZED
        assert flow.next_action_at == tomorrow_starts  # the state table's wait, not a busy loop
        events = rig.events(batch_id)
        assert [e.status for e in events] == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]
        assert all(e.payload["execute_on"] == "2026-11-03" for e in events)

        # Nothing is due today: the worker claims nothing and nothing is sent.
        assert await rig.run_round() == 0
        rig.clock.advance(20 * 3600 - 1)  # 2026-11-03 04:59:59 UTC: still the 2nd in Guatemala
        assert await rig.run_round() == 0
        assert payments_sent(rig) == 0 and rig.count("file_payment") == 0

        # A restart on the same store with the row made due early: the step itself holds it back.
        await rig.engine.aclose()
        restarted = rig.new_engine()
        try:
            make_due_now(rig, batch_id)
            assert await rig.run_round(restarted) == 1
            flow = rig.flow(batch_id)
            assert flow.state == FlowState.AUTHORIZED and flow.next_action_at == tomorrow_starts
            assert payments_sent(rig) == 0 and rig.count("file_payment") == 0
            assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]

            # Tomorrow in Guatemala: the payment is created, once.
            rig.clock.advance((tomorrow_starts - rig.clock.now()).total_seconds())
            flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED, engine=restarted)
        finally:
            await restarted.aclose()
        assert flow.state == FlowState.COMPLETED
        assert rig.count("file_payment") == 1 and payments_sent(rig) == 1
        statuses = rig.statuses(batch_id)
        assert statuses == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
        initiated = next(e for e in rig.events(batch_id) if e.status == "INITIATED")
        assert datetime.fromisoformat(initiated.payload["occurred_at"]) >= tomorrow_starts
        assert initiated.payload["execute_on"] == "2026-11-03"


async def test_a_batch_without_execute_on_is_paid_as_soon_as_approved(store: Store) -> None:
    async with engine_rig(store, integration_options=GUATEMALA) as rig:
        document = batch()
        batch_id = str(document["batch_id"])
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        await rig.approve(rig.approval_url(batch_id))
        flow = rig.flow(batch_id)
        assert flow.execute_on is None and flow.next_action_at == rig.clock.now()
        assert await rig.run_round() == 1  # A3 at once, A4 later
        assert rig.count("file_payment") == 1
        assert all(e.payload["execute_on"] is None for e in rig.events(batch_id))


async def test_a_day_weeks_ahead_is_paid_with_a_refreshed_token(store: Store) -> None:
    async with engine_rig(store, integration_options=GUATEMALA) as rig:
        document = scheduled("2026-11-12")  # ten days: the approval's access token (five days) has expired by then
        batch_id = str(document["batch_id"])
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        await rig.approve(rig.approval_url(batch_id))
        assert rig.flow(batch_id).next_action_at == datetime(2026, 11, 12, 6, 0, tzinfo=UTC)
        flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        assert flow.state == FlowState.COMPLETED
        refreshes = [s for s in rig.sent.to("/token", "POST") if b"refresh_token" in s.body]
        assert len(refreshes) == 1
        assert rig.count("file_payment") == 1


async def test_a_day_past_in_the_integrations_zone_or_too_far_ahead_is_invalid(store: Store) -> None:
    async with engine_rig(store, integration_options={"timezone": "Pacific/Kiritimati"}) as rig:
        rig.clock.advance(11 * 3600)  # 2026-11-02 20:00 UTC is already 2026-11-03 10:00 at UTC+14
        past = scheduled("2026-11-02")  # still today in UTC, but yesterday where the bank's day is counted
        result = await rig.submit(past)
        assert result.created and result.status == FlowState.INVALID
        assert result.reason is not None
        assert "execute_on 2026-11-02 is in the past (today is 2026-11-03 in Pacific/Kiritimati)" in result.reason
        invalid = rig.events(str(past["batch_id"]))
        assert [e.status for e in invalid] == ["INVALID"] and invalid[0].payload["reason"] == result.reason

        far = scheduled((date(2026, 11, 3) + timedelta(days=29)).isoformat())
        refused = await rig.submit(far)
        assert refused.status == FlowState.INVALID and "29 days ahead, more than 28 days" in (refused.reason or "")

        today = scheduled("2026-11-03")  # today there: accepted, paid as soon as approved
        accepted = await rig.submit(today)
        assert accepted.status == FlowState.RECEIVED
        batch_id = str(today["batch_id"])
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        await rig.approve(rig.approval_url(batch_id))
        assert rig.flow(batch_id).next_action_at == rig.clock.now()
        assert rig.count("file_consent") == 1  # the invalid ones never reached the bank


async def test_the_same_batch_on_another_day_is_a_conflict_and_a_resubmission_is_not(store: Store) -> None:
    async with engine_rig(store, integration_options=GUATEMALA) as rig:
        document = scheduled("2026-11-03")
        first = await rig.submit(document)
        again = await rig.submit({**document, "requested_at": "2026-11-02T09:30:00.000Z"})
        moved = await rig.submit({**document, "execute_on": "2026-11-04"})
        assert first.created and not again.created and again.same_document
        assert not moved.created and not moved.same_document
        assert rig.flow(str(document["batch_id"])).execute_on == date(2026, 11, 3)


async def test_a_day_beyond_the_refresh_tokens_life_fails_without_paying(store: Store) -> None:
    """Why `schedule_max_days` exists: a bank whose refresh grant ends before the day (here 10 days, while the
    integration was told it may schedule 60) cannot be paid under that approval; the flow ends FAILED, saying so."""
    async with engine_rig(
        store,
        integration_options={**GUATEMALA, "schedule_max_days": 60},
        sandbox_options={"refresh_token_ttl": 10 * 24 * 3600},
    ) as rig:
        document = scheduled("2026-11-22")
        batch_id = str(document["batch_id"])
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        await rig.approve(rig.approval_url(batch_id))
        flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        assert flow.state == FlowState.FAILED
        assert "refresh grant" in (flow.last_error or "") and "authorised again" in (flow.last_error or "")
        assert rig.count("file_payment") == 0 and payments_sent(rig) == 0
