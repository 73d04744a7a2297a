"""What operators see of flow B (the admin API, the console, `dispersion report`): mandates with their limits and the
client-side ledger of the current periods, their payments and their `vrp.status` timeline. Read in one store
transaction; creditor accounts masked; no token (the approval link is added by the console alone, while the mandate
asks for its approver).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from processor.domain.masking import mask_account
from processor.domain.money import money_text
from processor.domain.time import iso_ms
from processor.domain.vrp_requests import InvalidRequestError
from processor.domain.vrp_states import MANDATE_PUBLISHES, Mandate
from processor.engine.vrp_moves import COUNTED, mandate_request, mandate_usage
from processor.store import StoreTx, VrpMandate, VrpPayment
from processor.store.values import load_json
from schemas.topics import VRP_STATUS_TOPIC

# The states whose approval link works (the console shows it to operators).
ASKING = (Mandate.AWAITING_AUTHORIZATION.value, Mandate.REAUTHORIZATION_REQUIRED.value)


def mandate_status(state: str) -> str:
    """The status an operator knows for a mandate state (the one published; REVOKED shows as itself)."""
    try:
        target = Mandate(state)
    except ValueError:
        return state
    if target in (Mandate.REVOKED, Mandate.REAUTHORIZATION_REQUIRED):
        return state
    published = MANDATE_PUBLISHES.get(target)
    return published.value if published is not None else state


@dataclass(frozen=True)
class LimitLine:
    """One periodic limit in its current period, by the client-side ledger."""

    period_type: str
    period_alignment: str
    amount: Decimal
    used: Decimal
    left: Decimal
    period_start: datetime
    next_period_start: datetime


@dataclass(frozen=True)
class MandateView:
    """A mandate as operators see it."""

    mandate: VrpMandate
    status: str
    creditor: str  # masked, with the creditor's name
    currency: str
    max_individual: Decimal | None  # None: an INVALID mandate whose request does not parse
    limits: list[LimitLine]
    reference: str

    def as_json(self) -> dict[str, Any]:
        """The admin API's shape (amounts as strings, instants ISO 8601 UTC with milliseconds)."""
        m = self.mandate
        return {
            "mandate_id": m.mandate_id,
            "integration": m.integration,
            "state": m.state,
            "status": self.status,
            "consent_id": m.consent_id,
            "bank_status": m.bank_status,
            "creditor_account": self.creditor,
            "reference": self.reference,
            "currency": self.currency,
            "valid_from": _iso(m.valid_from),
            "valid_to": _iso(m.valid_to),
            "max_individual_amount": None if self.max_individual is None else str(self.max_individual),
            "periodic_limits": [
                {
                    "period_type": line.period_type,
                    "period_alignment": line.period_alignment,
                    "amount": str(line.amount),
                    "used": str(line.used),
                    "left": str(line.left),
                    "period_start": iso_ms(line.period_start),
                    "next_period_start": iso_ms(line.next_period_start),
                }
                for line in self.limits
            ],
            "consent_read_at": _iso(m.consent_read_at),
            "reason": m.last_error,
            "created_at": iso_ms(m.created_at),
            "updated_at": iso_ms(m.updated_at),
        }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else iso_ms(value)


def mandate_views(tx: StoreTx, mandates: list[VrpMandate], now: datetime) -> list[MandateView]:
    """`mandate_view` of several mandates, their accepted payments read in one query."""
    accepted = tx.vrp_payments.of_mandates([m.mandate_id for m in mandates], states=COUNTED)
    return [mandate_view(tx, m, now, accepted=accepted[m.mandate_id]) for m in mandates]


def mandate_view(
    tx: StoreTx, mandate: VrpMandate, now: datetime, *, accepted: list[VrpPayment] | None = None
) -> MandateView:
    """The mandate with its limits and the ledger of the current periods at `now` (`accepted`: its accepted
    payments, when already read)."""
    try:
        request = mandate_request(mandate)
    except InvalidRequestError:
        return _unparsed_view(mandate)
    account = request.creditor
    creditor = f"{mask_account(account.identification)} {account.name}".strip()
    limits = [
        LimitLine(
            use.limit.period.value,
            use.limit.alignment.value,
            use.limit.amount,
            use.used,
            use.left,
            use.start,
            use.end,
        )
        for use in mandate_usage(tx, mandate, now, accepted=accepted)
    ]
    return MandateView(
        mandate,
        mandate_status(mandate.state),
        creditor,
        request.currency,
        request.max_individual_amount,
        limits,
        request.reference,
    )


def _unparsed_view(mandate: VrpMandate) -> MandateView:
    """An INVALID mandate whose request does not parse (stored as it came): what it names, the account masked, no
    limits and no ledger (nothing of it was ever checked or paid)."""
    doc = load_json(mandate.request)
    doc = doc if isinstance(doc, Mapping) else {}
    account = doc.get("creditor_account")
    account = account if isinstance(account, Mapping) else {}
    name, reference = account.get("name"), doc.get("reference")
    creditor = f"{mask_account(account.get('identification'))} {name if isinstance(name, str) else ''}".strip()
    return MandateView(
        mandate,
        mandate_status(mandate.state),
        creditor,
        mandate.currency or "",
        None,
        [],
        reference if isinstance(reference, str) else "",
    )


def requested_amount(payment: VrpPayment) -> str | None:
    """What an INVALID payment asked for, as it came (its amount did not make a valid payment; shown as text,
    at most 40 characters); None for any other payment, or when it named no amount."""
    if payment.state != "INVALID":
        return None
    try:
        request = load_json(payment.instruction)
    except ValueError:
        return None
    asked = request.get("amount") if isinstance(request, Mapping) else None
    return None if asked is None or isinstance(asked, (dict, list)) else str(asked)[:40]


def amount_text(payment: VrpPayment) -> str:
    """A payment's amount as people read it: an INVALID payment has none ("1.005 requested", or "—"; its reason
    says why), every other its amount with two decimals."""
    if payment.state != "INVALID":
        return money_text(payment.amount)
    asked = requested_amount(payment)
    return "—" if asked is None else f"{asked} requested"


def payment_json(payment: VrpPayment) -> dict[str, Any]:
    """A payment as the admin API and the report show it (the reason is the last error: why it was refused). An
    INVALID payment has no amount (null) and `requested_amount`, what it asked for as it came."""
    return {
        "payment_id": payment.payment_id,
        "mandate_id": payment.mandate_id,
        "instruction_id": payment.payment_id,
        "amount": None if payment.state == "INVALID" else str(payment.amount),
        "requested_amount": requested_amount(payment),
        "currency": payment.currency,
        "state": payment.state,
        "bank_status": payment.bank_status,
        "domestic_vrp_id": payment.domestic_vrp_id,
        "reason": payment.last_error,
        "created_at": iso_ms(payment.created_at),
        "updated_at": iso_ms(payment.updated_at),
    }


@dataclass(frozen=True)
class TimelineEntry:
    """One `vrp.status` event of a mandate (and its payments)."""

    at: str
    status: str
    payment_id: str | None
    amount: str | None
    bank_status: str | None
    reason: str | None


def mandate_timeline(tx: StoreTx, mandate_id: str) -> list[TimelineEntry]:
    """The mandate's `vrp.status` events in the order they were published (its payments' too)."""
    entries: list[TimelineEntry] = []
    for event in tx.outbox.events(VRP_STATUS_TOPIC, mandate_id):
        payload: Mapping[str, Any] = event.payload
        entries.append(
            TimelineEntry(
                str(payload.get("occurred_at") or ""),
                str(payload.get("status") or ""),
                payload.get("payment_id"),
                None if payload.get("amount") is None else str(payload.get("amount")),
                payload.get("bank_status"),
                payload.get("reason"),
            )
        )
    return entries


VRP_REPORT_COLUMNS = (
    "mandate_id",
    "instruction_id",
    "amount",
    "currency",
    "state",
    "bank_status",
    "reason",
    "domestic_vrp_id",
    "created_at",
)


def totals_by_mandate(payments: list[VrpPayment]) -> list[dict[str, Any]]:
    """Per mandate and currency: how many payments, and per state how many and their amounts added up (exact
    decimals, two places; none for INVALID); `amount_completed` is what was paid."""
    sums: dict[tuple[str, str], dict[str, tuple[int, Decimal]]] = {}
    for p in payments:
        states = sums.setdefault((p.mandate_id, p.currency), {})
        count, amount = states.get(p.state, (0, Decimal("0.00")))
        states[p.state] = (count + 1, amount + p.amount)
    return [
        {
            "mandate_id": mandate_id,
            "currency": currency,
            "payments": sum(n for n, _ in states.values()),
            "amount_completed": str(states.get("COMPLETED", (0, Decimal("0.00")))[1]),
            # An INVALID payment has no amount (what it asked for did not make a payment): none is added up.
            "by_state": {
                s: {"payments": n, "amount": None if s == "INVALID" else str(a)} for s, (n, a) in sorted(states.items())
            },
        }
        for (mandate_id, currency), states in sorted(sums.items())
    ]


def vrp_report(tx: StoreTx, since: datetime, until: datetime) -> dict[str, Any]:
    """`dispersion report`'s VRP part, kept apart from file payments: every VRP payment created in `[since, until)`
    (mandate, instruction id, amount, currency, status, reason) and the totals per mandate, currency and state."""
    payments: list[VrpPayment] = []
    offset = 0
    while True:
        page = tx.vrp_payments.listing(since=since, until=until, offset=offset, limit=1000)
        payments.extend(page)
        if len(page) < 1000:
            break
        offset += len(page)
    return {"payments": [payment_json(p) for p in payments], "totals": totals_by_mandate(payments)}
