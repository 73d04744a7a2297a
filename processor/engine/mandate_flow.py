"""VRP mandates (flow B, part 1): the step handlers `MANDATE_TABLE` names, and the authorization hooks of the kind.

    RECEIVED                create_consent       B1 the VRP consent  -> AWAITING_AUTHORIZATION (AUTHORIZATION_REQUIRED)
    AWAITING_AUTHORIZATION  watch_authorization  read the consent; Rejected at the bank -> REJECTED, deadline -> EXPIRED
                            (the approver; `MandateAuthorizationHooks` move it to AUTHORIZED or REJECTED)
    AUTHORIZED              watch_mandate        read the consent every mandate_watch_interval (`mandate_watch`):
                                                 Revoked / Rejected / Expired at the bank, or valid_to passed, ends it
    REAUTHORIZATION_REQUIRED watch_reauthorization  as watch_authorization, Revoked also ends it; the approver's
                                                 new authorization (same consent) moves it back to AUTHORIZED

B1 is a guarded side effect (`processor.engine.side_effect`): a lost answer is resolved by repeating it with the
same key and the same body, so a mandate has one consent at the bank.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog

from processor.bank import BankError
from processor.bank.errors import describe
from processor.bank.models import VrpConsent
from processor.bank.vrp_payments import vrp_consent_body
from processor.domain.kinds import Kind
from processor.domain.time import iso_ms
from processor.domain.vrp_requests import CONSENT_CREATED_KEY, consent_parts
from processor.domain.vrp_states import Mandate, move_mandate
from processor.engine.authorization import PendingAuthorization, approval_link
from processor.engine.consent_watch import look_at_consent
from processor.engine.leased import LeasedFlow, Step, WorkRows
from processor.engine.mandate_watch import ENDED_AT_BANK, check_mandate, end_mandate_tx
from processor.engine.side_effect import Guarded, Refusal
from processor.engine.vrp_moves import (
    consent_created_at,
    mandate_request,
    move_mandate_tx,
    settle_parked_payments,
    wake_queued_payments,
)
from processor.store import Operation, StoreTx, VrpMandate

log = structlog.get_logger("processor.engine.vrp")

BANK_AUTHORISED = "Authorised"
# The states in which the approval link works: the first authorization, and asking the approver again.
_ASKING = frozenset({Mandate.AWAITING_AUTHORIZATION, Mandate.REAUTHORIZATION_REQUIRED})


class MandateStateError(RuntimeError):
    """The mandate is not in the state an authorization callback expects (rolls the callback back)."""


class MandateFlow(LeasedFlow[VrpMandate]):
    """VRP mandates as leased work: B1 for new ones, the authorization watch for waiting ones."""

    kind = Kind.MANDATE

    def repo(self, tx: StoreTx) -> WorkRows[VrpMandate]:
        """The `vrp_mandates` table."""
        return tx.mandates

    def steps(self) -> dict[str, Step[VrpMandate]]:
        """The handlers MANDATE_TABLE names."""
        return {
            "create_consent": self.create_consent,
            "watch_authorization": self.watch_authorization,
            "watch_mandate": self.watch_mandate,
            "watch_reauthorization": self.watch_authorization,  # the same watch, asking again
        }

    def approval_url(self, mandate: VrpMandate) -> str:
        """The mandate's stable approval link (published as `authorization_url`)."""
        return approval_link(self.ctx.public_url, self.kind, mandate.mandate_id, mandate.approval_token)

    async def create_consent(self, mandate: VrpMandate, owner: str) -> VrpMandate:
        """B1, recorded before and after; a lost answer is resolved by repeating it with the same key."""
        mandate_id = mandate.mandate_id
        req = mandate_request(mandate)
        integration = self.ctx.banks.integration(mandate.integration)
        parts = consent_parts(req, integration.tpp_name)
        guard = Guarded(self, mandate_id, Operation.CREATE_VRP_CONSENT)
        body = vrp_consent_body(parts.control_parameters, parts.initiation, parts.remittance_information)
        effect = await guard.begin(body)
        # A resumed call sends the bytes its first attempt sent, whatever the configuration builds now.
        request = guard.request(body)
        if not effect.done and request is None:
            return await guard.unresolved(mandate, owner, "the consent request of the first attempt is not known")
        consent: VrpConsent
        try:
            bank = await self.ctx.banks.get(mandate.integration)
            if effect.done and effect.resource_id:
                consent = await bank.get_vrp_consent(effect.resource_id)
            else:
                assert request is not None
                consent = await guard.call(
                    lambda _: bank.create_vrp_consent(request, idempotency_key=effect.idempotency_key)
                )
        except BankError as error:
            return await guard.failed(mandate, owner, error, self._refused(mandate, owner, guard))
        now = self.now()
        limits = {**parts.control_parameters, CONSENT_CREATED_KEY: iso_ms(consent.creation_date_time)}
        # A consent was created before (and its AUTHORIZATION_REQUIRED published): this one replaces it.
        replacing = consent_created_at(mandate) is not None
        state = Mandate.AWAITING_AUTHORIZATION

        def record(tx: StoreTx) -> VrpMandate:
            guard.complete(tx, consent.consent_id)
            return move_mandate_tx(
                tx,
                mandate,
                state,
                now=now,
                owner=owner,
                authorization_url=self.approval_url(mandate),
                consent_id=consent.consent_id,
                bank_status=consent.status,
                limits=limits,
                next_action_at=self.next_look(state, now, deadline=mandate.authorization_deadline),
                replacing=replacing,
            )

        moved = await self.ctx.store.arun(record)
        log.info("VRP consent created; authorization required", mandate_id=mandate_id, consent_id=consent.consent_id)
        return moved

    def _refused(self, mandate: VrpMandate, owner: str, guard: Guarded[VrpMandate]) -> Any:
        async def refuse(error: Refusal) -> VrpMandate:
            now = self.now()
            reason = describe(error) if isinstance(error, BankError) else str(error)

            def work(tx: StoreTx) -> VrpMandate:
                guard.fail(tx, reason)
                return move_mandate_tx(
                    tx, mandate, Mandate.INVALID, now=now, owner=owner, reason=f"the bank refused the consent: {reason}"
                )

            log.warning("VRP consent refused by the bank", mandate_id=mandate.mandate_id, reason=reason)
            return await self.ctx.store.arun(work)

        return refuse

    async def watch_authorization(self, mandate: VrpMandate, owner: str) -> VrpMandate:
        """While the approver is asked (AWAITING_AUTHORIZATION) or asked again (REAUTHORIZATION_REQUIRED, the
        table's `watch_reauthorization`): read the consent (B3) every `consent_watch_interval`
        (`consent_watch`); Rejected at the bank ends the mandate (asked again: Revoked and Expired too), and so
        does the authorization deadline (EXPIRED). A mandate asked again also loses its tokens when it ends."""
        again = mandate.state == Mandate.REAUTHORIZATION_REQUIRED
        look = await look_at_consent(
            self,
            key=mandate.mandate_id,
            state=mandate.state,
            integration=mandate.integration,
            consent_id=mandate.consent_id,
            deadline=mandate.authorization_deadline,
        )
        bank_status = look.bank_status
        if again and bank_status in ENDED_AT_BANK and look.ending is None:
            target, reason = ENDED_AT_BANK[bank_status], f"the consent is {bank_status} at the bank"
        elif look.ending is not None:
            target = Mandate(look.ending.value)
            reason = look.reason.replace("authorise", "authorise again") if again else look.reason
        else:
            return await self.update(
                mandate, owner, bank_status=bank_status or mandate.bank_status, next_action_at=look.next_at
            )
        now = self.now()

        def end(tx: StoreTx) -> VrpMandate:
            if again:
                return end_mandate_tx(tx, mandate, target, reason=reason, now=now, owner=owner, bank_status=bank_status)
            moved = move_mandate_tx(tx, mandate, target, now=now, owner=owner, reason=reason, bank_status=bank_status)
            settle_parked_payments(tx, moved, now=now)
            return moved

        log.info("mandate ended while the approver was asked", mandate_id=mandate.mandate_id, state=target.value)
        return await self.ctx.store.arun(end)

    async def watch_mandate(self, mandate: VrpMandate, owner: str) -> VrpMandate:
        """AUTHORIZED: read the consent every `mandate_watch_interval`; ended at the bank or past `valid_to`: the
        mandate ends and its tokens are deleted (`processor.engine.mandate_watch`)."""
        return await check_mandate(self, mandate, owner=owner)


class MandateAuthorizationHooks:
    """The `Kind.MANDATE` hooks of the authorization registry (`processor.engine.authorization.FlowKinds`).

    The approval link of a mandate works while it is AWAITING_AUTHORIZATION (or REAUTHORIZATION_REQUIRED) with a
    consent and before its authorization deadline; the callback's outcome moves it to AUTHORIZED (tokens stored in
    the same transaction by the caller) or REJECTED, publishing the status. `watch_every`: the engine's
    `mandate_watch_interval` (an authorised mandate's first watch is due after it).
    """

    def __init__(self, watch_every: float = 3600.0) -> None:
        self.watch_every = watch_every

    def consent_for(self, tx: StoreTx, flow_id: str) -> PendingAuthorization | None:
        """The mandate's integration, consent, approval token, deadline, and whether it awaits its approver."""
        mandate = tx.mandates.get(flow_id)
        if mandate is None:
            return None
        return PendingAuthorization(
            integration=mandate.integration,
            consent_id=mandate.consent_id,
            approval_token=mandate.approval_token,
            deadline=mandate.authorization_deadline,
            awaiting=mandate.state in _ASKING and mandate.consent_id is not None,
            state=mandate.state,
            traceparent=mandate.traceparent,  # the approval link and the redirect continue its request's trace
        )

    def on_authorized(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """AUTHORIZED (publishing it), its parked and queued payments made due, its consent watched from now."""
        mandate = self._awaiting(tx, flow_id, consent_id)
        watch = now + timedelta(seconds=self.watch_every)
        if mandate.valid_to is not None:
            watch = min(watch, max(now, mandate.valid_to))
        moved = move_mandate_tx(
            tx,
            mandate,
            Mandate.AUTHORIZED,
            now=now,
            bank_status=BANK_AUTHORISED,
            next_action_at=watch,
            consent_read_at=now,
        )
        settle_parked_payments(tx, moved, now=now)
        wake_queued_payments(tx, moved, now=now)
        again = mandate.state == Mandate.REAUTHORIZATION_REQUIRED
        log.info("mandate authorised", mandate_id=flow_id, consent_id=consent_id, again=again)

    def on_rejected(self, tx: StoreTx, flow_id: str, reason: str, *, now: datetime) -> None:
        """REJECTED (publishing it with the reason); its parked payments are rejected too."""
        mandate = self._awaiting(tx, flow_id, None)
        end_mandate_tx(tx, mandate, Mandate.REJECTED, reason=reason, now=now)
        log.info("mandate rejected", mandate_id=flow_id, consent_id=mandate.consent_id, reason=reason)

    def on_stranded(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """Back to RECEIVED for a new consent (a new idempotency key; the old record is kept under
        `{mandate_id}/replaced/{consent_id}`), due now. Nothing is published: the approval link stays the same."""
        mandate = self._awaiting(tx, flow_id, consent_id)
        if mandate.state != Mandate.AWAITING_AUTHORIZATION:
            # Re-authorization: the consent is Authorised at the bank by design; it is never replaced.
            raise MandateStateError(f"mandate {flow_id} is {mandate.state}; its consent is not replaced")
        tx.side_effects.retire(mandate.mandate_id, (Operation.CREATE_VRP_CONSENT,), resource_id=consent_id)
        move_mandate(mandate.state, Mandate.RECEIVED)
        tx.mandates.transition(
            mandate,
            Mandate.RECEIVED.value,
            now=now,
            consent_id=None,
            next_action_at=now,
            attempts=0,
            last_error=f"consent {consent_id} is authorised at the bank but its tokens were lost; replacing it",
        )
        log.warning("mandate consent replaced: its tokens were lost", mandate_id=flow_id, consent_id=consent_id)

    @staticmethod
    def _awaiting(tx: StoreTx, flow_id: str, consent_id: str | None) -> VrpMandate:
        mandate = tx.mandates.require(flow_id, for_update=True)
        if mandate.state not in _ASKING:
            raise MandateStateError(f"mandate {flow_id} is {mandate.state}, not awaiting authorization")
        if consent_id is not None and mandate.consent_id != consent_id:
            raise MandateStateError(f"mandate {flow_id} awaits consent {mandate.consent_id}, not {consent_id}")
        return mandate
