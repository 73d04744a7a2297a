"""Flow B, VRP, as one object over its parts: mandates authorised once, payments under them checked, paid, followed.

    vrp = attach_vrp(engine)                                  # engine: processor.engine.assembly.build_engine
    outcome = await vrp.submit_mandate(request)               # stored once per mandate_id, then B1
    ...                                                       # the approver authorises: AUTHORIZED
    outcome = await vrp.submit_payment(instruction)           # limits checked, B2 once per payment_id
    payment = await vrp.follow_payment(payment_id)            # until COMPLETED or REJECTED

The parts: `vrp_submit` (the intake), `mandate_flow` (B1, the authorization watch, the hooks of the approval
link), `vrp_payment_flow` (B2 and the reads), `vrp_moves` (state changes with their `vrp.status` events),
`tokens` (the consent's token, refreshed when due, shared with flow A). Workers run mandates and payments as
leased work like file flows; this object takes one item's due steps at once for callers that wait (the
`dispersion vrp` command).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from processor.domain.kinds import Kind
from processor.domain.vrp_states import Mandate, Payment, payment_terminal
from processor.engine.context import EngineContext
from processor.engine.mandate_flow import MandateAuthorizationHooks, MandateFlow
from processor.engine.vrp_payment_flow import VrpPaymentFlow
from processor.engine.vrp_submit import MandateOutcome, PaymentOutcome, VrpSubmissions
from processor.store import NotFoundError, VrpMandate, VrpPayment

if TYPE_CHECKING:
    from processor.engine.assembly import Engine


class VrpEngine:
    """Flow B over the durable store. Safe to run on many instances at once (leases and compare-and-set)."""

    def __init__(
        self,
        ctx: EngineContext,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        owner: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.owner = owner or f"vrp-{uuid.uuid4().hex[:12]}"
        self._sleep = sleep
        self.mandates = MandateFlow(ctx)
        self.payments = VrpPaymentFlow(ctx)
        self.submissions = VrpSubmissions(ctx, lambda now: self.payments.next_look(Payment.RECEIVED, now))

    def now(self) -> datetime:
        """The engine's clock, in store precision."""
        return self.mandates.now()

    def approval_url(self, mandate: VrpMandate) -> str:
        """The mandate's stable approval link (published as `authorization_url`)."""
        return self.mandates.approval_url(mandate)

    async def mandate(self, mandate_id: str) -> VrpMandate:
        """A mandate as stored; `NotFoundError` when unknown."""
        found = await self.mandates.get(mandate_id)
        if found is None:
            raise NotFoundError(f"mandate {mandate_id!r} does not exist")
        return found

    async def payment(self, payment_id: str) -> VrpPayment:
        """A payment as stored; `NotFoundError` when unknown."""
        found = await self.payments.get(payment_id)
        if found is None:
            raise NotFoundError(f"VRP payment {payment_id!r} does not exist")
        return found

    async def payments_of(self, mandate_id: str) -> list[VrpPayment]:
        """A mandate's payments, oldest first."""
        found: list[VrpPayment] = await self.ctx.store.arun(
            lambda tx: tx.vrp_payments.for_mandate(mandate_id), write=False
        )
        return found

    # -- taking requests ----------------------------------------------------------------------------------------

    async def submit_mandate(self, request: Mapping[str, Any], *, advance: bool = True) -> MandateOutcome:
        """Take a mandate request (see `VrpSubmissions.submit_mandate`), then B1 at once unless `advance=False`
        (a Kafka consumer, which must never wait on the bank: a worker takes B1)."""
        outcome = await self.submissions.submit_mandate(request)
        if outcome.problems or (outcome.created and not advance):
            return outcome
        mandate = await self.advance_mandate(outcome.mandate.mandate_id) if outcome.created else outcome.mandate
        link = self.approval_url(mandate) if mandate.state == Mandate.AWAITING_AUTHORIZATION else None
        return replace(outcome, mandate=mandate, authorization_url=link)

    async def submit_payment(self, request: Mapping[str, Any], *, advance: bool = True) -> PaymentOutcome:
        """Take a payment instruction (see `VrpSubmissions.submit_payment`), then pay it (B2) at once when it
        fits, unless `advance=False` (B2 is then due work for a worker)."""
        outcome = await self.submissions.submit_payment(request)
        payment = outcome.payment
        if advance and outcome.created and payment is not None and payment.state == Payment.SUBMITTED:
            return PaymentOutcome(await self.advance_payment(payment.payment_id), True, True, None)
        return outcome

    # -- taking one item's due steps now ------------------------------------------------------------------------

    async def advance_mandate(self, mandate_id: str) -> VrpMandate:
        """Take the mandate's next step if it is due (B1, or checking on its authorization); the mandate after.
        When another instance holds the mandate's lease, or nothing is due, it is returned as stored."""
        found = await self.mandates.advance(mandate_id, owner=self.owner)
        return found if found is not None else await self.mandate(mandate_id)

    async def advance_payment(self, payment_id: str) -> VrpPayment:
        """Take the payment's next steps if it is due (check a parked payment, B2, read its status)."""
        found = await self.payments.advance(payment_id, owner=self.owner)
        return found if found is not None else await self.payment(payment_id)

    async def follow_payment(self, payment_id: str, *, max_seconds: float | None = None) -> VrpPayment:
        """Take the payment's steps as they come due until it ends; the payment then, or as it stands when
        `max_seconds` (of the engine's clock) have passed."""
        started = self.now()
        while True:
            payment = await self.advance_payment(payment_id)
            if payment_terminal(payment.state):
                return payment
            now = self.now()
            if max_seconds is not None and (now - started).total_seconds() >= max_seconds:
                return payment
            wait = self.settings.idle_interval
            if payment.next_action_at is not None:
                wait = max(0.0, (payment.next_action_at - now).total_seconds())
            if payment.lease_owner not in (None, self.owner) and payment.lease_expires_at is not None:
                wait = max(wait, min(1.0, (payment.lease_expires_at - now).total_seconds()))
            await self._sleep(min(max(wait, 0.0), self.settings.poll_max))


def attach_vrp(engine: Engine, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> VrpEngine:
    """Plug flow B into an assembled engine (`processor.engine.assembly.build_engine`): the `Kind.MANDATE`
    approval links and callbacks, and mandates and payments as work for its workers. Returns the VRP engine
    (for `submit_mandate`, `submit_payment` and friends; `sleep` is what its waiting loops sleep with)."""
    vrp = VrpEngine(engine.ctx, sleep=sleep)
    engine.kinds.register(Kind.MANDATE, MandateAuthorizationHooks(engine.ctx.settings.mandate_watch_interval))
    engine.add_source(vrp.mandates)
    engine.add_source(vrp.payments)
    return vrp
