"""The VRP moves, in a transaction: a mandate's or a payment's state change together with the `vrp.status` event it
publishes (key = the mandate id). Store-only, so the authorization hooks run them inside the callback's
transaction, the flows after their bank calls, and the intake when it stores a payment.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict, Unpack

from processor.domain.vrp_limits import Mandate as LimitsView
from processor.domain.vrp_limits import PastPayment, PeriodUse, check_payment, period_usage
from processor.domain.vrp_requests import (
    CONSENT_CREATED_KEY,
    MandateRequest,
    PaymentRequest,
    limits_of,
    parse_mandate,
    parse_payment,
    status_record,
)
from processor.domain.vrp_states import (
    COUNTED_PAYMENT_STATES,
    MANDATE_STATUS_RANKS,
    Mandate,
    Payment,
    VrpStatus,
    mandate_move_ranked,
    mandate_terminal,
    move_mandate,
    move_payment,
)
from processor.store import StatusEvent, StoreTx, VersionConflictError, VrpMandate, VrpPayment
from processor.store.values import load_json
from schemas.topics import VRP_STATUS_TOPIC


def mandate_request(mandate: VrpMandate) -> MandateRequest:
    """The request a stored mandate was created from."""
    return parse_mandate(load_json(mandate.request))


def payment_request(payment: VrpPayment) -> PaymentRequest:
    """The instruction a stored payment was created from."""
    return parse_payment(load_json(payment.instruction))


def consent_created_at(mandate: VrpMandate) -> datetime | None:
    """When the mandate's (latest) consent was created at the bank, as recorded with its limits."""
    raw = mandate.limits.get(CONSENT_CREATED_KEY) if isinstance(mandate.limits, Mapping) else None
    return None if raw is None else datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


class MandateExtras(TypedDict, total=False):
    """Other columns a mandate move may change (the re-authorization's, the watch's)."""

    approval_token: str
    authorization_deadline: datetime | None
    consent_read_at: datetime | None


def move_mandate_tx(
    tx: StoreTx,
    mandate: VrpMandate,
    target: Mandate,
    *,
    now: datetime,
    owner: str | None = None,
    authorization_url: str | None = None,
    reason: str | None = None,
    consent_id: str | None = None,
    bank_status: str | None = None,
    limits: Mapping[str, Any] | None = None,
    next_action_at: datetime | None = None,
    replacing: bool = False,
    **more: Unpack[MandateExtras],
) -> VrpMandate:
    """Move a mandate and append the status the move publishes, in `tx` (`replacing`: see `move_mandate`; `more`:
    other columns to change). The re-authorization's statuses are appended unranked (`mandate_move_ranked`)."""
    status = move_mandate(mandate.state, target, replacing=replacing)
    ranked = mandate_move_ranked(mandate.state, target)
    consent = consent_id or mandate.consent_id
    event: StatusEvent | None = None
    if status is not None:
        record = status_record(
            mandate_id=mandate.mandate_id,
            status=status.value,
            occurred_at=now,
            consent_id=consent,
            authorization_url=authorization_url,
            bank_status=bank_status,
            reason=reason,
        )
        if ranked:
            rank = MANDATE_STATUS_RANKS[status]
            event = StatusEvent(status.value, record, topic=VRP_STATUS_TOPIC, rank=rank, event_id=record["event_id"])
        else:
            tx.outbox.append(VRP_STATUS_TOPIC, mandate.mandate_id, record, now=now, event_id=record["event_id"])
    changes: dict[str, Any] = {
        **more,
        "consent_id": consent,
        "next_action_at": next_action_at,
        "attempts": 0,
        "last_error": reason,
    }
    if bank_status is not None:
        changes["bank_status"] = bank_status
    if limits is not None:
        changes["limits"] = dict(limits)
    return tx.mandates.transition(mandate, target.value, now=now, owner=owner, event=event, **changes)


def emit_payment_status(
    tx: StoreTx,
    payment: VrpPayment,
    status: VrpStatus,
    *,
    now: datetime,
    consent_id: str | None,
    reason: str | None = None,
) -> None:
    """Append a payment's `vrp.status` event (key = its mandate id; unranked, see vrp_states)."""
    record = status_record(
        mandate_id=payment.mandate_id,
        payment_id=payment.payment_id,
        status=status.value,
        occurred_at=now,
        consent_id=consent_id,
        domestic_vrp_id=payment.domestic_vrp_id,
        amount=payment.amount,
        currency=payment.currency,
        bank_status=payment.bank_status,
        reason=reason,
    )
    tx.outbox.append(VRP_STATUS_TOPIC, payment.mandate_id, record, now=now, event_id=record["event_id"])


def move_payment_tx(
    tx: StoreTx,
    payment: VrpPayment,
    target: Payment,
    status: VrpStatus | None,
    *,
    now: datetime,
    consent_id: str | None,
    owner: str | None = None,
    reason: str | None = None,
    domestic_vrp_id: str | None = None,
    bank_status: str | None = None,
    next_action_at: datetime | None = None,
) -> VrpPayment:
    """Move a payment and append the status the move publishes, in `tx`."""
    move_payment(payment.state, target, status)
    changes: dict[str, Any] = {"next_action_at": next_action_at, "attempts": 0, "last_error": reason}
    if domestic_vrp_id is not None:
        changes["domestic_vrp_id"] = domestic_vrp_id
    if bank_status is not None:
        changes["bank_status"] = bank_status
    updated = tx.vrp_payments.transition(payment, target.value, now=now, owner=owner, **changes)
    if status is not None:
        emit_payment_status(tx, updated, status, now=now, consent_id=consent_id, reason=reason)
    return updated


def place_payment(
    tx: StoreTx, mandate: VrpMandate, payment: PaymentRequest, now: datetime
) -> tuple[Payment, VrpStatus | None, str | None]:
    """Where a payment goes given its (locked) mandate: SUBMITTED when it fits the mandate, REFUSED with the
    breaches, REJECTED under an ended mandate, RECEIVED (parked) while the mandate awaits authorization."""
    if mandate.state == Mandate.AUTHORIZED:
        view, history = ledger_of(tx, mandate, leaving_out=payment.payment_id)
        breaches = check_payment(view, payment.amount, payment.currency, now, history)
        if breaches:
            return Payment.REFUSED, VrpStatus.LIMIT_EXCEEDED, "; ".join(f"{b.field}: {b.message}" for b in breaches)
        return Payment.SUBMITTED, None, None
    if mandate_terminal(mandate.state):
        return Payment.REJECTED, VrpStatus.PAYMENT_REJECTED, mandate_ended_reason(mandate)
    return Payment.RECEIVED, None, None


COUNTED = tuple(s.value for s in COUNTED_PAYMENT_STATES)


def ledger_of(
    tx: StoreTx,
    mandate: VrpMandate,
    *,
    leaving_out: str | None = None,
    accepted: list[VrpPayment] | None = None,
) -> tuple[LimitsView, list[PastPayment]]:
    """The client-side limit ledger of a mandate: its limits as the check sees them and the accepted payments
    (SUBMITTED, PENDING, COMPLETED) at the time they were received (`leaving_out`: a payment being placed;
    `accepted`: those payments when already read, e.g. for a page of mandates at once)."""
    view = limits_of(mandate_request(mandate), consent_created_at(mandate), mandate.created_at)
    if accepted is None:
        accepted = tx.vrp_payments.for_mandate(mandate.mandate_id, states=COUNTED)
    return view, [PastPayment(p.amount, p.created_at) for p in accepted if p.payment_id != leaving_out]


def mandate_usage(
    tx: StoreTx, mandate: VrpMandate, now: datetime, *, accepted: list[VrpPayment] | None = None
) -> list[PeriodUse]:
    """Each periodic limit of the mandate in its current period: used, left, next period's start (the ledger the
    limit check uses, `processor.domain.vrp_limits.period_usage`)."""
    view, history = ledger_of(tx, mandate, accepted=accepted)
    return period_usage(view, now, history)


def mandate_ended_reason(mandate: VrpMandate) -> str:
    """Why a payment under an ended mandate is refused without a bank call: the mandate's state and why it ended."""
    why = f": {mandate.last_error}" if mandate.last_error else ""
    return f"mandate {mandate.mandate_id} is {mandate.state}{why}"


def wake_queued_payments(tx: StoreTx, mandate: VrpMandate, *, now: datetime) -> int:
    """Make the mandate's queued SUBMITTED payments (waiting for its re-authorization, or under a mandate that
    just ended) due now, so their next step reads the mandate again. Returns how many."""
    woken = 0
    for queued in tx.vrp_payments.for_mandate(mandate.mandate_id, states=[Payment.SUBMITTED.value]):
        if queued.next_action_at is not None:
            continue
        try:
            tx.vrp_payments.update(queued.payment_id, expected_version=queued.version, now=now, next_action_at=now)
            woken += 1
        except VersionConflictError:
            continue
    return woken


def settle_parked_payments(tx: StoreTx, mandate: VrpMandate, *, now: datetime) -> int:
    """After a mandate moved: wake its parked payments (AUTHORIZED) or reject them (ended). Returns how many.

    A payment changed concurrently is left alone; its own next step reads the mandate again.
    """
    moved = 0
    for parked in tx.vrp_payments.for_mandate(mandate.mandate_id, states=[Payment.RECEIVED.value]):
        try:
            if mandate.state == Mandate.AUTHORIZED:
                tx.vrp_payments.update(parked.payment_id, expected_version=parked.version, now=now, next_action_at=now)
            elif mandate_terminal(mandate.state):
                move_payment_tx(
                    tx,
                    parked,
                    Payment.REJECTED,
                    VrpStatus.PAYMENT_REJECTED,
                    now=now,
                    consent_id=mandate.consent_id,
                    reason=mandate_ended_reason(mandate),
                )
            moved += 1
        except VersionConflictError:
            continue
    return moved
