"""Watching a consent that awaits its approver: one copy for file payments (flow A) and VRP mandates (flow B).

    look = await look_at_consent(self, state=row.state, integration=..., consent_id=..., deadline=...)
    if look.ending is None:   # still waiting: look again at look.next_at
    else:                     # REJECTED (the bank says the consent is Rejected) or EXPIRED (the deadline passed)

The approver's decision normally reaches us by the bank's redirect. A rejection whose redirect is lost (the
browser closed, our callback down) would otherwise leave the flow waiting until its deadline, and its approval
link answering 502 (the bank refuses a PAR for a rejected consent). So while a flow awaits authorization the
worker reads its consent (A: GET file-payment-consents, B: GET domestic-vrp-consents; the client-credentials
token) every `[engine] consent_watch_interval` seconds (the state tables' `Wait.WATCH`), never past the deadline,
and ends the flow REJECTED when the bank says `Rejected`. A failed read changes nothing: the next look reads again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import structlog

from processor.bank import BankClient, BankError
from processor.bank.errors import describe
from processor.domain.kinds import Kind
from processor.domain.time import iso_ms
from processor.engine.banks import UnknownIntegrationError
from processor.engine.leased import LeasedFlow

log = structlog.get_logger("processor.engine.consent_watch")

# The bank's status of a consent the approver refused (file and VRP consents alike).
CONSENT_REJECTED = "Rejected"


async def consent_status(bank: BankClient, kind: Kind, consent_id: str) -> str:
    """The consent's status at the bank (A: file-payment consent, B: VRP consent), client-credentials token."""
    if kind is Kind.FILE:
        return (await bank.get_file_consent(consent_id, echo_file=False)).status
    return (await bank.get_vrp_consent(consent_id)).status


class Ending(StrEnum):
    """How a flow awaiting its approver ends without the approver's redirect (the states' shared names)."""

    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"


@dataclass(frozen=True)
class Look:
    """What one look at a consent awaiting its approver found."""

    ending: Ending | None  # None: still waiting
    reason: str  # why it ended ("" while waiting)
    bank_status: str | None  # the consent's status as read (None: not read)
    next_at: datetime | None  # when to look again while waiting


async def look_at_consent(
    flow: LeasedFlow[Any],
    *,
    key: str,
    state: str,
    integration: str,
    consent_id: str | None,
    deadline: datetime | None,
) -> Look:
    """Read the consent of the flow row `key` (in `state`, awaiting its approver) and say what follows: REJECTED
    when the bank says `Rejected`, EXPIRED once `deadline` passed, else the time of the next look."""
    now = flow.now()
    status: str | None = None
    if consent_id is not None:
        try:
            bank = await flow.ctx.banks.get(integration)
            status = await consent_status(bank, flow.kind, consent_id)
        except (BankError, UnknownIntegrationError) as error:
            reason = describe(error) if isinstance(error, BankError) else f"unknown integration {integration!r}"
            log.warning(
                "could not read the consent awaiting authorization", kind=flow.kind.value, key=key, error=reason
            )
    if status == CONSENT_REJECTED:
        log.info("the bank reports the consent Rejected", kind=flow.kind.value, key=key, consent_id=consent_id)
        return Look(Ending.REJECTED, "the consent is Rejected at the bank (the approver refused)", status, None)
    if deadline is not None and now >= deadline:
        return Look(
            Ending.EXPIRED, f"the approver did not authorise before the deadline ({iso_ms(deadline)})", status, None
        )
    return Look(None, "", status, flow.next_look(state, now, deadline=deadline))
