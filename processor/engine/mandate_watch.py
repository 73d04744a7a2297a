"""Authorised mandates watched, and asked for again (flow B): one copy for the mandate's own watch and for the check a
payment makes before B2.

    mandate = await check_mandate(flow, mandate)           # read the consent (B3); end the mandate when the bank
                                                           # says Revoked / Rejected / Expired or valid_to passed
    moved = ask_again_tx(tx, flow, mandate, reason, now)   # the tokens cannot be refreshed: the approver again

A customer can revoke a sweeping consent at their bank at any time, and the bank never tells us. So an AUTHORIZED
mandate's consent is read (client-credentials token) every `[engine] mandate_watch_interval` seconds, and before a
payment's first B2 when the last read (`consent_read_at`) is older than that. `Revoked`, `Rejected` or `Expired` at
the bank, or the mandate's `valid_to` passed, ends the mandate (REVOKED, REJECTED, EXPIRED) publishing REJECTED or
EXPIRED with the reason and the bank's status; its tokens are deleted in the same transaction (nothing refreshes
them any more), its parked payments are rejected, and its queued ones are made due to be rejected without a bank
call (`mandate_ended_reason`). A failed read changes nothing: the next look reads again.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog

from processor.bank import BankError
from processor.bank.errors import describe
from processor.domain.kinds import Kind
from processor.domain.time import iso_ms
from processor.domain.vrp_states import Mandate
from processor.engine.authorization import approval_link
from processor.engine.banks import UnknownIntegrationError
from processor.engine.consent_watch import consent_status
from processor.engine.leased import LeasedFlow
from processor.engine.vrp_moves import move_mandate_tx, settle_parked_payments, wake_queued_payments
from processor.store import StoreTx, VrpMandate
from processor.store.crypto import new_secret_token

log = structlog.get_logger("processor.engine.vrp")

# The bank's consent statuses that end a mandate, and the state each ends it in.
ENDED_AT_BANK: dict[str, Mandate] = {
    "Revoked": Mandate.REVOKED,
    "Rejected": Mandate.REJECTED,
    "Expired": Mandate.EXPIRED,
}
_WHY = {
    "Revoked": "the customer revoked it at their bank",
    "Rejected": "the bank rejected it",
    "Expired": "the bank reports it expired",
}


def ending_of(mandate: VrpMandate, bank_status: str | None, now: datetime) -> tuple[Mandate, str] | None:
    """Whether the mandate ends, given its consent's status as read (None: not read) and the time: where to, why."""
    if bank_status in ENDED_AT_BANK:
        return ENDED_AT_BANK[bank_status], f"the consent is {bank_status} at the bank ({_WHY[bank_status]})"
    if mandate.valid_to is not None and now >= mandate.valid_to:
        return Mandate.EXPIRED, f"the mandate's validity ended at {iso_ms(mandate.valid_to)}"
    return None


async def read_consent(flow: LeasedFlow[Any], mandate: VrpMandate) -> str | None:
    """The mandate's consent status at the bank (B3), or None when it could not be read (logged)."""
    if mandate.consent_id is None:
        return None
    try:
        bank = await flow.ctx.banks.get(mandate.integration)
        return await consent_status(bank, Kind.MANDATE, mandate.consent_id)
    except (BankError, UnknownIntegrationError) as error:
        reason = describe(error) if isinstance(error, BankError) else f"unknown integration {mandate.integration!r}"
        log.warning("could not read the mandate's consent", mandate_id=mandate.mandate_id, error=reason)
        return None


def end_mandate_tx(
    tx: StoreTx,
    mandate: VrpMandate,
    target: Mandate,
    *,
    reason: str,
    now: datetime,
    owner: str | None = None,
    bank_status: str | None = None,
) -> VrpMandate:
    """End a mandate (publishing it), delete its tokens, reject its parked payments and wake its queued ones."""
    read_at = now if bank_status is not None else mandate.consent_read_at
    moved = move_mandate_tx(
        tx, mandate, target, now=now, owner=owner, reason=reason, bank_status=bank_status, consent_read_at=read_at
    )
    if mandate.consent_id is not None and tx.tokens.delete(mandate.consent_id):
        log.info("mandate ended; its tokens are deleted", mandate_id=mandate.mandate_id, state=target.value)
    settle_parked_payments(tx, moved, now=now)
    wake_queued_payments(tx, moved, now=now)
    return moved


def read_is_stale(flow: LeasedFlow[Any], mandate: VrpMandate, now: datetime) -> bool:
    """Whether the mandate's consent was last read longer than `mandate_watch_interval` ago (or never)."""
    if mandate.consent_read_at is None:
        return True
    return now - mandate.consent_read_at >= timedelta(seconds=flow.ctx.settings.mandate_watch_interval)


async def check_mandate(flow: LeasedFlow[Any], mandate: VrpMandate, *, owner: str | None = None) -> VrpMandate:
    """Read an AUTHORIZED mandate's consent and end the mandate when the bank or its validity says so; else record
    the read (and, for the mandate's own watch, `owner`, schedule the next). The mandate as it stands after; left
    as it is when it moved meanwhile (another instance decided first)."""
    now = flow.now()
    expired = mandate.valid_to is not None and now >= mandate.valid_to
    status = None if expired else await read_consent(flow, mandate)
    ending = ending_of(mandate, status, now)
    mandate_id = mandate.mandate_id

    def work(tx: StoreTx) -> VrpMandate:
        current = tx.mandates.require(mandate_id, for_update=True)
        if current.state != Mandate.AUTHORIZED or (owner is not None and current.version != mandate.version):
            return current
        if ending is not None:
            return end_mandate_tx(tx, current, ending[0], reason=ending[1], now=now, owner=owner, bank_status=status)
        changes: dict[str, Any] = {}
        if status is not None:
            changes.update(consent_read_at=now, bank_status=status)
        if owner is not None:
            changes["next_action_at"] = flow.next_look(Mandate.AUTHORIZED, now, deadline=current.valid_to)
        if not changes:
            return current
        return tx.mandates.update(mandate_id, expected_version=current.version, now=now, owner=owner, **changes)

    checked: VrpMandate = await flow.ctx.store.arun(work)
    if ending is not None and checked.state == ending[0]:
        log.warning("mandate ended", mandate_id=mandate_id, state=checked.state, reason=ending[1])
    return checked


def ask_again_tx(tx: StoreTx, flow: LeasedFlow[Any], mandate: VrpMandate, reason: str, now: datetime) -> VrpMandate:
    """AUTHORIZED -> REAUTHORIZATION_REQUIRED: a new approval link (a new approval token behind the same stable
    link mechanism), a new deadline, AUTHORIZATION_REQUIRED published with it; the dead tokens deleted."""
    token = new_secret_token()
    link = approval_link(flow.ctx.public_url, Kind.MANDATE, mandate.mandate_id, token)
    deadline = now + timedelta(seconds=flow.ctx.settings.authorization_deadline)
    moved = move_mandate_tx(
        tx,
        mandate,
        Mandate.REAUTHORIZATION_REQUIRED,
        now=now,
        authorization_url=link,
        reason=f"re-authorization required: {reason}",
        next_action_at=min(deadline, now + timedelta(seconds=flow.ctx.settings.consent_watch_interval)),
        approval_token=token,
        authorization_deadline=deadline,
    )
    if mandate.consent_id is not None:
        tx.tokens.delete(mandate.consent_id)
    log.warning("mandate needs its approver again", mandate_id=mandate.mandate_id, reason=reason)
    return moved
