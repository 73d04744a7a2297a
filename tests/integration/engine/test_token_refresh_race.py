"""One refresh at a time per consent across instances, against the sandbox process (which rotates refresh tokens:
a spent one is refused with invalid_grant): two engines on one store pay two VRPs of one mandate at the same
moment, after its access token expired. One refresh grant reaches the bank, the other engine uses the winner's
token, and both payments complete. Real HTTP on loopback; SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from bank_support import Recording, processor_transport
from sandbox_process import SandboxProcess
from vrp_engine_support import (
    VRP_DELAY,
    payment_request,
    vrp_rig,
    vrp_sandbox,  # noqa: F401  (module fixture)
)

from processor.store import Store


def refresh_grants(sent: Recording) -> int:
    return sum(1 for s in sent.to("/token", "POST") if "refresh_token" in s.form())


async def test_two_instances_refresh_one_consent_once_and_both_payments_complete(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate()
        consent_id = mandate.consent_id or ""
        before = store.run(lambda tx: tx.tokens.get(consent_id), write=False)
        assert before is not None and before.refresh_token is not None
        await rig.advance(432_001)  # the access token is dead on both clocks
        sent = Recording(processor_transport())
        (first_engine, first), (second_engine, second) = (rig.new_engine(transport=sent) for _ in range(2))
        try:
            # A slow token endpoint keeps the first refresh in flight while the other instance wants one too.
            await rig.faults([{"operation": "token", "fault": "latency", "latency_ms": 400}])
            outcomes = await asyncio.gather(
                first.submit_payment(payment_request(mandate.mandate_id, "20.00")),
                second.submit_payment(payment_request(mandate.mandate_id, "30.00")),
            )
            await rig.faults([])
            assert refresh_grants(sent) == 1
            payments = [o.payment for o in outcomes]
            assert all(p is not None and p.state in ("PENDING", "COMPLETED") for p in payments), payments
            after = store.run(lambda tx: tx.tokens.get(consent_id), write=False)
            assert after is not None and after.version == before.version + 1
            assert after.refresh_token != before.refresh_token  # rotated by the bank
            await rig.advance(VRP_DELAY + 1)
            for payment in payments:
                assert payment is not None
                followed = await first.follow_payment(payment.payment_id, max_seconds=60)
                assert followed.state == "COMPLETED", followed
            assert rig.statuses(mandate.mandate_id).count("PAYMENT_COMPLETED") == 2
            assert "PAYMENT_REJECTED" not in rig.statuses(mandate.mandate_id)
        finally:
            await first_engine.aclose()
            await second_engine.aclose()


async def test_a_refresh_refused_because_a_crossing_grant_spent_the_token_uses_the_winners_token(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with vrp_rig(vrp_sandbox, store) as rig:
        mandate = await rig.authorised_mandate()
        consent_id = mandate.consent_id or ""
        before = store.run(lambda tx: tx.tokens.get(consent_id), write=False)
        assert before is not None
        await rig.advance(432_001)
        sent = Recording(processor_transport())
        (first_engine, first), (second_engine, second) = (rig.new_engine(transport=sent) for _ in range(2))
        try:
            await rig.faults([{"operation": "token", "fault": "latency", "latency_ms": 1000}])
            slow = asyncio.create_task(first.submit_payment(payment_request(mandate.mandate_id, "20.00")))
            for _ in range(200):  # the first instance's grant is at the bank
                if refresh_grants(sent) == 1:
                    break
                await asyncio.sleep(0.01)
            # Its claim runs out (a bank slower than the claim's life): the second instance claims and sends a
            # grant of its own, with the refresh token the first grant is spending. The bank refuses it.
            await rig.advance(61)
            crossing = await second.submit_payment(payment_request(mandate.mandate_id, "30.00"))
            done = await slow
            await rig.faults([])
            assert refresh_grants(sent) == 2
            payments = [done.payment, crossing.payment]
            assert all(p is not None and p.state in ("PENDING", "COMPLETED") for p in payments), payments
            after = store.run(lambda tx: tx.tokens.get(consent_id), write=False)
            assert after is not None and after.version == before.version + 1
            await rig.advance(VRP_DELAY + 1)
            for payment in payments:
                assert payment is not None
                assert (await first.follow_payment(payment.payment_id, max_seconds=60)).state == "COMPLETED"
            assert "PAYMENT_REJECTED" not in rig.statuses(mandate.mandate_id)
        finally:
            await first_engine.aclose()
            await second_engine.aclose()
