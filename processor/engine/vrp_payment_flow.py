"""VRP payments (flow B, part 2): the step handlers `PAYMENT_TABLE` names.

    RECEIVED   recheck_parked  parked until its mandate is authorised: checked again -> SUBMITTED | REFUSED | REJECTED
    SUBMITTED  create_vrp      B2 the domestic VRP, with the consent's token -> PENDING | COMPLETED | REJECTED | FAILED
                               (first the mandate: its consent read when the last read is stale; ended: REJECTED
                               without a bank call; its tokens cannot be refreshed: the mandate asks its approver
                               again and the payment waits, queued, until the new authorization)
    PENDING    read_vrp        read (backing off) -> COMPLETED | REJECTED

B2 is a guarded side effect (`processor.engine.side_effect`): recorded before the call (its key also stored on the
payment row) and after, so a killed process resumes by repeating it with the same key and the same body, and the
bank answers with the VRP it already created: one VRP per payment. The bank's
`UK.OBIE.Rules.FailsControlParameters` ends in LIMIT_EXCEEDED, carrying the bank's message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from processor.bank import BankError
from processor.bank import errors as bank_errors
from processor.bank.models import DomesticVrp
from processor.bank.vrp_payments import domestic_vrp_body
from processor.domain.kinds import Kind
from processor.domain.vrp_requests import payment_parts
from processor.domain.vrp_states import Mandate, Payment, VrpStatus, mandate_terminal, payment_state_of_bank_status
from processor.engine.leased import LeasedFlow, Step, WorkRows
from processor.engine.mandate_watch import ask_again_tx, check_mandate, read_is_stale
from processor.engine.side_effect import Guarded, Refusal
from processor.engine.tokens import TokenUnavailableError, access_token
from processor.engine.vrp_moves import (
    mandate_ended_reason,
    mandate_request,
    move_payment_tx,
    payment_request,
    place_payment,
)
from processor.store import Operation, SideEffect, StoreTx, VrpMandate, VrpPayment

log = structlog.get_logger("processor.engine.vrp")

_STATUS_OF = {
    Payment.PENDING: VrpStatus.PAYMENT_PENDING,
    Payment.COMPLETED: VrpStatus.PAYMENT_COMPLETED,
    Payment.REJECTED: VrpStatus.PAYMENT_REJECTED,
}


class VrpPaymentFlow(LeasedFlow[VrpPayment]):
    """VRP payments as leased work: parked ones re-checked, submitted ones paid (B2), pending ones read."""

    kind = Kind.VRP_PAYMENT

    def repo(self, tx: StoreTx) -> WorkRows[VrpPayment]:
        """The `vrp_payments` table."""
        return tx.vrp_payments

    def steps(self) -> dict[str, Step[VrpPayment]]:
        """The handlers PAYMENT_TABLE names."""
        return {"recheck_parked": self.recheck_parked, "create_vrp": self.create_vrp, "read_vrp": self.read_vrp}

    async def _mandate(self, mandate_id: str) -> VrpMandate:
        mandate: VrpMandate = await self.ctx.store.arun(lambda tx: tx.mandates.require(mandate_id), write=False)
        return mandate

    async def recheck_parked(self, payment: VrpPayment, owner: str) -> VrpPayment:
        """A payment parked while its mandate awaited authorization: placed again against the (locked) mandate."""
        now = self.now()

        def recheck(tx: StoreTx) -> VrpPayment:
            mandate = tx.mandates.require(payment.mandate_id, for_update=True)
            current = tx.vrp_payments.require(payment.payment_id)
            if current.state != Payment.RECEIVED:
                return current
            target, status, reason = place_payment(tx, mandate, payment_request(current), now)
            if target is Payment.RECEIVED:
                return tx.vrp_payments.update(
                    current.payment_id,
                    expected_version=current.version,
                    now=now,
                    owner=owner,
                    next_action_at=self.next_look(Payment.RECEIVED, now),
                )
            return move_payment_tx(
                tx,
                current,
                target,
                status,
                now=now,
                owner=owner,
                consent_id=mandate.consent_id,
                reason=reason,
                next_action_at=now if target is Payment.SUBMITTED else None,
            )

        return await self.ctx.store.arun(recheck)

    async def create_vrp(self, payment: VrpPayment, owner: str) -> VrpPayment:
        """B2 with the consent's auth-code token (refreshed when due), recorded before and after."""
        payment_id = payment.payment_id
        mandate = await self._mandate(payment.mandate_id)
        consent_id = mandate.consent_id
        assert consent_id is not None, "a SUBMITTED payment's mandate was authorised, so it has a consent"
        integration = self.ctx.banks.integration(mandate.integration)
        parts = payment_parts(payment_request(payment), mandate_request(mandate), integration.tpp_name)
        guard = Guarded(self, payment_id, Operation.CREATE_VRP)
        now = self.now()

        def keep_key(tx: StoreTx, effect: SideEffect) -> VrpPayment:
            current = tx.vrp_payments.require(payment_id)
            if current.idempotency_key == effect.idempotency_key:
                return current
            return tx.vrp_payments.update(
                payment_id,
                expected_version=current.version,
                now=now,
                owner=owner,
                idempotency_key=effect.idempotency_key,
            )

        body = domestic_vrp_body(consent_id, parts.initiation, parts.instruction)
        effect, current = await guard.begin_with(body, keep_key)
        assert current is not None
        payment = current
        first = not effect.done and not effect.resumed  # nothing was sent under this key before
        if first and mandate.state == Mandate.AUTHORIZED and read_is_stale(self, mandate, now):
            mandate = await check_mandate(self, mandate)
        if first and mandate.state != Mandate.AUTHORIZED:
            return await self._not_now(payment, mandate, owner, guard)
        refuse = self._refused(payment, mandate, owner, guard)
        # A resumed call sends the bytes its first attempt sent, whatever the configuration builds now.
        request = guard.request(body)
        if not effect.done and request is None:
            return await guard.unresolved(payment, owner, "the payment request of the first attempt is not known")
        try:
            bank = await self.ctx.banks.get(mandate.integration)
            if effect.done and effect.resource_id:
                vrp = await bank.get_domestic_vrp(effect.resource_id)
            else:
                assert request is not None
                sent = request

                async def attempt(refresh: bool) -> DomesticVrp:
                    token = await access_token(self.ctx, bank, consent_id, force=refresh)
                    return await bank.create_domestic_vrp(
                        sent, access_token=token, idempotency_key=effect.idempotency_key
                    )

                vrp = await guard.call(attempt)
        except TokenUnavailableError as error:
            return await self._ask_again(payment, mandate, owner, guard, str(error))
        except BankError as error:
            return await guard.failed(payment, owner, error, refuse)
        now = self.now()
        target = payment_state_of_bank_status(vrp.status)

        def record(tx: StoreTx) -> VrpPayment:
            guard.complete(tx, vrp.domestic_vrp_id)
            return move_payment_tx(
                tx,
                payment,
                target,
                _STATUS_OF[target],
                now=now,
                owner=owner,
                consent_id=consent_id,
                domestic_vrp_id=vrp.domestic_vrp_id,
                bank_status=vrp.status,
                reason=f"the bank reports the payment {vrp.status}" if target is Payment.REJECTED else None,
                next_action_at=now if target is Payment.PENDING else None,
            )

        moved = await self.ctx.store.arun(record)
        log.info(
            "domestic VRP created", payment_id=payment_id, domestic_vrp_id=vrp.domestic_vrp_id, bank_status=vrp.status
        )
        return moved

    async def _not_now(
        self, payment: VrpPayment, mandate: VrpMandate, owner: str, guard: Guarded[VrpPayment]
    ) -> VrpPayment:
        """Before a first B2 under a mandate that is not AUTHORIZED: REJECTED without a bank call when it ended
        (`PAYMENT_REJECTED` with why), else queued (no next step) until the approver authorises it again."""
        now = self.now()
        if mandate_terminal(mandate.state):
            reason = mandate_ended_reason(mandate)

            def reject(tx: StoreTx) -> VrpPayment:
                guard.fail(tx, f"not sent: {reason}")
                return move_payment_tx(
                    tx,
                    payment,
                    Payment.REJECTED,
                    VrpStatus.PAYMENT_REJECTED,
                    now=now,
                    owner=owner,
                    consent_id=mandate.consent_id,
                    reason=reason,
                )

            log.warning("VRP payment refused without a bank call", payment_id=payment.payment_id, reason=reason)
            return await self.ctx.store.arun(reject)
        queued = f"queued: mandate {mandate.mandate_id} is {mandate.state}"
        resumed = guard.effect is not None and guard.effect.resumed

        def queue(tx: StoreTx) -> VrpPayment:
            if resumed:  # an earlier B2 may have gone through: it stays to be resolved, with the same key
                tx.side_effects.mark_ambiguous(payment.payment_id, Operation.CREATE_VRP, queued, now=now)
            else:  # nothing was sent under the key: say so, or the next attempt would take it for an unknown outcome
                guard.fail(tx, f"not sent: {queued}")
            return tx.vrp_payments.update(
                payment.payment_id,
                expected_version=payment.version,
                now=now,
                owner=owner,
                next_action_at=None,
                last_error=queued,
            )

        return await self.ctx.store.arun(queue)

    async def _ask_again(
        self, payment: VrpPayment, mandate: VrpMandate, owner: str, guard: Guarded[VrpPayment], reason: str
    ) -> VrpPayment:
        """No usable token (the refresh grant refused, none stored): the mandate asks its approver again
        (`mandate_watch.ask_again_tx`) and the payment waits for it, queued with its B2 record (same key and body
        when it is sent after the new authorization). A mandate that ended meanwhile: as `_not_now` (a first
        attempt is rejected); a resumed attempt stays to be resolved (`guard.unresolved`)."""
        now = self.now()

        def work(tx: StoreTx) -> VrpMandate:
            current = tx.mandates.require(mandate.mandate_id, for_update=True)
            if current.state == Mandate.AUTHORIZED and current.consent_id == mandate.consent_id:
                return ask_again_tx(tx, self, current, reason, now)
            return current

        moved = await self.ctx.store.arun(work)
        if mandate_terminal(moved.state) and guard.effect is not None and guard.effect.resumed:
            return await guard.unresolved(payment, owner, reason)
        if moved.state == Mandate.AUTHORIZED:  # authorised again meanwhile: try again now
            return await self.update(payment, owner, next_action_at=now, last_error=reason)
        return await self._not_now(payment, moved, owner, guard)

    def _refused(
        self, payment: VrpPayment, mandate: VrpMandate, owner: str, guard: Guarded[VrpPayment]
    ) -> Callable[[Refusal], Awaitable[VrpPayment]]:
        async def refuse(error: Refusal) -> VrpPayment:
            if isinstance(error, TokenUnavailableError):
                target, status, reason = Payment.FAILED, VrpStatus.PAYMENT_REJECTED, str(error)
            else:
                where = ""
                if isinstance(error, bank_errors.BankHTTPError) and error.errors and error.errors[0].path:
                    where = f" ({error.errors[0].path})"
                reason = f"the bank refused the payment: {bank_errors.describe(error)}{where}"
                limit = isinstance(error, bank_errors.FailsControlParameters)
                target = Payment.REJECTED
                status = VrpStatus.LIMIT_EXCEEDED if limit else VrpStatus.PAYMENT_REJECTED
            now = self.now()

            def work(tx: StoreTx) -> VrpPayment:
                guard.fail(tx, reason)
                return move_payment_tx(
                    tx, payment, target, status, now=now, owner=owner, consent_id=mandate.consent_id, reason=reason
                )

            log.warning("VRP payment refused", payment_id=payment.payment_id, status=status.value, reason=reason)
            return await self.ctx.store.arun(work)

        return refuse

    async def read_vrp(self, payment: VrpPayment, owner: str) -> VrpPayment:
        """Read the domestic VRP; COMPLETED or REJECTED when the bank says so, else read again later."""
        assert payment.domestic_vrp_id is not None
        domestic_vrp_id = payment.domestic_vrp_id
        mandate = await self._mandate(payment.mandate_id)
        now = self.now()
        try:
            bank = await self.ctx.banks.get(mandate.integration)
            vrp = await bank.get_domestic_vrp(domestic_vrp_id)
        except BankError as error:
            return await self.retry_later(payment, owner, error)  # reading never creates anything
        target = payment_state_of_bank_status(vrp.status)
        if target is Payment.PENDING:
            return await self.update(
                payment,
                owner,
                attempts=payment.attempts + 1,
                bank_status=vrp.status,
                next_action_at=self.next_look(Payment.PENDING, now, attempt=payment.attempts),
            )
        moved = await self.ctx.store.arun(
            lambda tx: move_payment_tx(
                tx,
                payment,
                target,
                _STATUS_OF[target],
                now=now,
                owner=owner,
                consent_id=mandate.consent_id,
                bank_status=vrp.status,
                reason=f"the bank reports the payment {vrp.status}" if target is Payment.REJECTED else None,
            )
        )
        log.info("VRP payment ended", payment_id=payment.payment_id, state=target.value, bank_status=vrp.status)
        return moved
