"""A rejection whose redirect never reaches us: flow A reads its consent while it awaits authorization (every
`[engine] consent_watch_interval`) and ends REJECTED when the bank says `Rejected`, publishing it once; the
approval link then answers 410 instead of a 502 until the deadline. Real HTTP on loopback with the sandbox."""

from __future__ import annotations

from datetime import timedelta

from engine_support import Rig, batch, engine_rig

from processor.domain.file_states import FlowState
from processor.engine.settings import EngineSettings
from processor.store import Store

WATCH = 120.0
SETTINGS = EngineSettings(
    authorization_deadline=3600,
    lease_seconds=30,
    poll_max=8.0,
    retry_first=1.0,
    retry_max=8.0,
    duplicate_wait=0.5,
    consent_watch_interval=WATCH,
)


async def awaiting(rig: Rig) -> str:
    document = batch()
    await rig.submit(document)
    await rig.to_state(document["batch_id"], FlowState.AWAITING_AUTHORIZATION)
    return str(document["batch_id"])


def consent_reads(rig: Rig, consent_id: str) -> int:
    return len(rig.sent.to(f"/file-payment-consents/{consent_id}", "GET"))


async def test_a_lost_rejection_ends_the_flow_rejected_once_and_the_link_says_so(store: Store) -> None:
    async with engine_rig(store, settings=SETTINGS) as rig:
        batch_id = await awaiting(rig)
        flow = rig.flow(batch_id)
        consent_id = flow.consent_id or ""
        assert flow.next_action_at == rig.clock.now() + timedelta(seconds=WATCH)  # not the deadline, an hour off

        # A look while the consent still awaits its approver: the flow waits on, and looks again an interval later.
        rig.clock.advance(WATCH)
        assert await rig.run_round() == 1
        flow = rig.flow(batch_id)
        assert flow.state == FlowState.AWAITING_AUTHORIZATION and consent_reads(rig, consent_id) == 1
        assert flow.next_action_at == rig.clock.now() + timedelta(seconds=WATCH)
        assert await rig.run_round() == 0  # nothing due in between: the bank is not read more often

        link = rig.approval_url(batch_id)
        rejection = await rig.approve(link, approve=False, deliver=False)  # the redirect is lost
        assert rejection.query["error"] == "access_denied"
        stuck = await rig.open_link(link)  # the bank refuses a PAR for a Rejected consent
        assert stuck.status_code == 502 and rig.flow(batch_id).state == FlowState.AWAITING_AUTHORIZATION

        rig.clock.advance(WATCH)
        assert await rig.run_round() == 1
        flow = rig.flow(batch_id)
        assert flow.state == FlowState.REJECTED and flow.next_action_at is None
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "REJECTED"]
        assert "Rejected at the bank" in rig.events(batch_id)[-1].payload["reason"]
        page = await rig.open_link(link)
        assert page.status_code == 410 and "rejected" in page.text
        assert "location" not in page.headers

        # The redirect turns up after all: a no-op, nothing published twice, nothing read any more.
        late = await rig.http.get(rejection.redirect)
        assert late.status_code == 200 and late.json()["status"] == "success"
        reads = consent_reads(rig, consent_id)
        rig.clock.advance(SETTINGS.authorization_deadline)
        assert await rig.run_round() == 0
        assert consent_reads(rig, consent_id) == reads
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "REJECTED"]
        assert rig.count("file_payment") == 0


async def test_an_unreadable_consent_keeps_the_flow_waiting_and_the_deadline_still_expires_it(store: Store) -> None:
    settings = EngineSettings(authorization_deadline=300, lease_seconds=30, consent_watch_interval=WATCH)
    async with engine_rig(store, settings=settings) as rig:
        batch_id = await awaiting(rig)
        deadline = rig.flow(batch_id).authorization_deadline
        assert deadline is not None
        rig.faults([{"operation": "file-payment-consents.get", "fault": "error", "status": 500}])
        rig.clock.advance(WATCH)
        assert await rig.run_round() == 1
        flow = rig.flow(batch_id)
        assert flow.state == FlowState.AWAITING_AUTHORIZATION  # a failed read decides nothing
        rig.clock.advance(WATCH)
        await rig.run_round()
        assert rig.flow(batch_id).next_action_at == deadline  # never looked at past the deadline
        flow = await rig.to_state(batch_id, FlowState.EXPIRED, expire=True)
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "EXPIRED"]
        assert "deadline" in rig.events(batch_id)[-1].payload["reason"]
