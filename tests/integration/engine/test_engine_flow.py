"""Flow A end to end through the engine: the real sandbox and our callback API on loopback, a real store
(SQLite and PostgreSQL), the approver pressing the consent page's buttons."""

from __future__ import annotations

from decimal import Decimal

from engine_support import Rig, batch, engine_rig

from processor.domain.file_states import FlowState
from processor.engine.file_events import results_of
from processor.engine.file_payloads import FilePayloads
from processor.store import Store


async def test_approved_batch_completes_with_per_transaction_results(store: Store) -> None:
    async with engine_rig(store) as rig:
        document = batch()
        result = await rig.submit(document)
        assert result.created and result.status == FlowState.RECEIVED
        batch_id = document["batch_id"]

        flow = await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        assert flow.consent_id is not None and flow.consent_id.startswith("pay-fi-")
        link = rig.approval_url(batch_id)
        assert link.startswith(f"{rig.public_url}/approve/file/{batch_id}?t=")
        assert flow.approval_token in link

        approval = await rig.approve(link)
        assert approval.callback is not None and approval.callback.status_code == 200
        assert "Authorization received" in approval.callback.text
        assert rig.flow(batch_id).state == FlowState.AUTHORIZED

        flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        assert flow.state == FlowState.COMPLETED
        assert flow.bank_status == "InitiationCompleted"
        assert flow.file_payment_id is not None and flow.file_payment_id.startswith("fp-")

        report = store.run(lambda tx: tx.flows.report(batch_id), write=False)
        results = results_of(report)
        assert [(r["index"], r["status"]) for r in results] == [(0, "COMPLETED"), (1, "COMPLETED"), (2, "FAILED")]
        assert results[2]["reason"].startswith("AC04")
        assert results[0]["employee_reference"] == "E-0000"
        assert Decimal(results[1]["amount"]) == Decimal("2000.00")

        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
        events = rig.events(batch_id)
        required = events[0].payload
        assert required["authorization_url"] == link
        assert required["number_of_transactions"] == 3
        assert Decimal(required["control_sum"]) == Decimal("4250.75")
        assert required["currency"] == "GTQ"
        assert required["consent_id"] == flow.consent_id
        assert events[2].payload["file_payment_id"] == flow.file_payment_id
        completed = events[3].payload
        assert completed["bank_status"] == "InitiationCompleted"
        assert [r["status"] for r in completed["transaction_results"]] == ["COMPLETED", "COMPLETED", "FAILED"]
        assert completed["reason"] == "2 of 3 transfers settled; 1 rejected (AC04)"

        assert rig.count("file_consent") == 1
        assert rig.count("file_payment") == 1
        # The consent's tokens are dropped once the payment has ended.
        assert store.run(lambda tx: tx.tokens.get(flow.consent_id or ""), write=False) is None

        # The link no longer offers a PAR once the flow is authorised.
        again = await rig.open_link(link)
        assert again.status_code == 409 and "already authorised" in again.text


async def test_rejected_authorization_ends_rejected(store: Store) -> None:
    async with engine_rig(store) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        approval = await rig.approve(rig.approval_url(batch_id), approve=False)
        assert approval.query["error"] == "access_denied"
        assert approval.callback is not None and approval.callback.status_code == 200
        flow = rig.flow(batch_id)
        assert flow.state == FlowState.REJECTED and flow.next_action_at is None
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "REJECTED"]
        assert rig.events(batch_id)[-1].payload["reason"] == "the approver rejected the authorization"
        assert rig.count("file_payment") == 0
        # Nothing more happens for it, and the link refuses.
        assert await rig.run_round() == 0
        refused = await rig.open_link(rig.approval_url(batch_id))
        assert refused.status_code == 410


async def test_all_transfers_rejected_ends_failed(store: Store) -> None:
    async with engine_rig(store) as rig:
        document = batch(origin="100209904")  # origin ending 9904: insufficient funds, every transfer rejected
        batch_id = document["batch_id"]
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        await rig.approve(rig.approval_url(batch_id))
        flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        assert flow.state == FlowState.FAILED and flow.bank_status == "InitiationFailed"
        failed = rig.events(batch_id)[-1].payload
        assert failed["status"] == "FAILED"
        assert {r["status"] for r in failed["transaction_results"]} == {"FAILED"}
        assert failed["reason"] == "0 of 3 transfers settled; 3 rejected (AM04)"


async def test_invalid_batch_is_stored_invalid_with_every_bad_row(store: Store) -> None:
    async with engine_rig(store) as rig:
        document = batch(transfers=[("200100300", "-5"), ("200100301", "10.001"), ("200100302", "7")])
        document["transactions"][2]["destination_account"]["email"] = "not-an-email"
        result = await rig.submit(document)
        assert result.created and result.status == FlowState.INVALID and result.invalid
        assert result.reason is not None
        for index, reason in ((0, "non_positive_amount"), (1, "too_many_decimals"), (2, "malformed_email")):
            assert f"transaction {index}" in result.reason and reason in result.reason
        assert rig.statuses(document["batch_id"]) == ["INVALID"]
        assert rig.events(document["batch_id"])[0].payload["reason"] == result.reason
        assert await rig.run_round() == 0
        assert rig.count("file_consent") == 0


async def test_unknown_integration_and_unreadable_input_are_invalid(store: Store) -> None:
    async with engine_rig(store) as rig:
        document = batch(integration="nowhere")
        result = await rig.submit(document)
        assert result.status == FlowState.INVALID and "not configured" in (result.reason or "")
        unreadable = await rig.submit(b"{not json")
        assert unreadable.flow is None and unreadable.invalid and "JSON" in (unreadable.reason or "")


async def test_duplicate_batch_is_a_no_op(store: Store) -> None:
    async with engine_rig(store) as rig:
        document = batch()
        batch_id = document["batch_id"]
        first = await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        again = await rig.submit(document)
        assert first.created and not again.created and again.same_document
        assert again.status == FlowState.AWAITING_AUTHORIZATION
        changed = dict(document, file_reference="OTHER")
        different = await rig.submit(changed)
        assert not different.created and not different.same_document
        assert rig.count("file_consent") == 1
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED"]


async def _awaiting(rig: Rig) -> str:
    document = batch()
    await rig.submit(document)
    await rig.to_state(document["batch_id"], FlowState.AWAITING_AUTHORIZATION)
    return str(document["batch_id"])


async def test_a_batch_whose_payload_is_not_cached_pays_as_one_that_is(store: Store) -> None:
    """A batch too large for the payload cache (here: a cache of none) has each step build what it needs from the
    stored batch: A2 renders the upload without the canonical file. The sandbox checks the uploaded file against
    the consent's hash and the payment against the consent, so the flow completes only if every body is right."""
    async with engine_rig(store) as rig:
        rig.engine.file_flow.payloads = FilePayloads(store, cache_transactions=0)
        document = batch(transfers=[("200100300", "1500.50"), ("200100301", "10.25")])
        document["transactions"][1]["concept"] = 'Nómina "extra" \\ noviembre'
        batch_id = document["batch_id"]
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        await rig.approve(rig.approval_url(batch_id))
        flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        assert flow.state == FlowState.COMPLETED, flow.last_error
        assert rig.count("file_payment") == 1
