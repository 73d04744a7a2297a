"""VRP requests as the engine reads them, and the bank bodies and status events made from them. Pure: no I/O.

- `parse_mandate` / `parse_payment` read a mandate request (`vrp.mandates`) or a payment instruction
  (`vrp.payments`), as a decoded Avro record (datetimes, Decimals) or as JSON (ISO 8601 strings, decimal
  strings or numbers parsed as Decimal). Every problem is reported, not just the first (`InvalidRequestError`).
- `MandateRequest.document()` / `PaymentRequest.document()` give the normalised form the store keeps; parsing it
  again gives the same request, so a resumed flow rebuilds byte-identical bank bodies.
- `consent_parts` (B1) and `payment_parts` (B2) build the bank's bodies; `limits_of` gives the client-side
  limit check (`processor.domain.vrp_limits`) its view of a mandate.
- `status_record` builds a `vrp.status` record as stored in the outbox (JSON: amounts as strings, instants as
  ISO 8601 text with milliseconds); the relay shapes it for the schema (`producers.relay.outbox_record`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from processor.domain.money import money_text
from processor.domain.text import text_problem
from processor.domain.time import iso_ms, utc_ms
from processor.domain.vrp_limits import Alignment, PeriodicLimit, PeriodType
from processor.domain.vrp_limits import Mandate as LimitsView

SCA = "UK.OBIE.SCA"
SWEEPING = "UK.OBIE.VRPType.Sweeping"
SORT_CODE_SCHEME = "UK.OBIE.SortCodeAccountNumber"
DESCRIPTION_CONVENTION = "VRP - CUOTAS - {tpp_name}"
# The consent's creation instant, kept with the control parameters: `Consent`-aligned periods count from it.
CONSENT_CREATED_KEY = "ConsentCreationDateTime"

# Open Banking v3.1 text lengths.
ID_MAX = 35  # InstructionIdentification, EndToEndIdentification
REFERENCE_MAX = 35
UNSTRUCTURED_MAX = 140
NAME_MAX = 350
MANDATE_ID_MAX = 200
AMOUNT_MAX = Decimal(10) ** 16  # decimal(18, 2)
CENT = Decimal("0.01")
_CURRENCY = re.compile(r"[A-Z]{3}")
_SORT_CODE_ACCOUNT = re.compile(r"[0-9]{14}")


class InvalidRequestError(ValueError):
    """A request that cannot be processed; `problems` lists every fault as `field: problem`.

    `mandate_id` / `payment_id` are set when they could be read, so the engine can still publish INVALID.
    """

    def __init__(self, problems: Sequence[str], *, mandate_id: str | None = None, payment_id: str | None = None):
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)
        self.mandate_id = mandate_id
        self.payment_id = payment_id


# -- field readers ----------------------------------------------------------------------------------------------


class _Reader:
    """Reads fields of one request, collecting problems instead of stopping at the first."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc
        self.problems: list[str] = []

    def fail(self, name: str, problem: str) -> None:
        self.problems.append(f"{name}: {problem}")

    def text(
        self,
        obj: Mapping[str, Any],
        key: str,
        name: str,
        *,
        max_len: int,
        optional: bool = False,
        default: str | None = None,
    ) -> str | None:
        value = obj.get(key)
        if value is None:
            if default is not None:
                return default
            if not optional:
                self.fail(name, "is required")
            return None
        if not isinstance(value, str):
            self.fail(name, f"must be a string, not {type(value).__name__}")
            return None
        if not value.strip():
            if optional:
                return None
            self.fail(name, "must not be empty")
            return None
        if len(value) > max_len:
            self.fail(name, f"must be at most {max_len} characters")
            return None
        unsafe = text_problem(value)  # control, bidi or lone surrogate characters
        if unsafe is not None:
            self.fail(name, f"holds {unsafe}")
            return None
        return value

    def amount(self, obj: Mapping[str, Any], key: str, name: str) -> Decimal | None:
        value = obj.get(key)
        if value is None:
            self.fail(name, "is required")
            return None
        if isinstance(value, bool | float):
            self.fail(name, "must be a decimal (a string or an exact number), never a float")
            return None
        if not isinstance(value, Decimal | int | str):
            self.fail(name, f"must be a decimal amount, not {type(value).__name__}")
            return None
        try:
            amount = value if isinstance(value, Decimal) else Decimal(str(value).strip())
        except InvalidOperation:
            self.fail(name, f"{value!r} is not a decimal amount")
            return None
        if not amount.is_finite() or amount <= 0:
            self.fail(name, f"must be greater than zero, got {value}")
            return None
        if amount != amount.quantize(CENT):
            self.fail(name, f"{value} has more than 2 decimals")
            return None
        if amount >= AMOUNT_MAX:
            self.fail(name, f"{value} is too large")
            return None
        return amount.quantize(CENT)

    def currency(self, obj: Mapping[str, Any], key: str, name: str) -> str | None:
        value = obj.get(key)
        if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
            self.fail(name, f"must be an ISO 4217 code (three capital letters), got {value!r}")
            return None
        return value

    def instant(self, obj: Mapping[str, Any], key: str, name: str, *, optional: bool = False) -> datetime | None:
        value = obj.get(key)
        if value is None:
            if not optional:
                self.fail(name, "is required")
            return None
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            except ValueError:
                self.fail(name, f"{value!r} is not an ISO 8601 date-time")
                return None
        if not isinstance(value, datetime):
            self.fail(name, f"must be an ISO 8601 date-time, not {type(value).__name__}")
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            self.fail(name, "must carry a UTC offset (e.g. Z or +00:00)")
            return None
        return utc_ms(value)


def _id(doc: Mapping[str, Any], key: str) -> str | None:
    value = doc.get(key)
    return value if isinstance(value, str) and value.strip() else None


# -- mandates ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreditorAccount:
    """The account the mandate sweeps money to (the consent's `Initiation.CreditorAccount`)."""

    scheme_name: str
    identification: str = field(repr=False)
    name: str


@dataclass(frozen=True)
class LimitSpec:
    """One periodic limit of a mandate request."""

    amount: Decimal
    period_type: str
    period_alignment: str


@dataclass(frozen=True)
class MandateRequest:
    """A request for a sweeping VRP mandate (`vrp.mandates`)."""

    mandate_id: str
    integration: str
    currency: str
    creditor: CreditorAccount
    max_individual_amount: Decimal
    periodic_limits: tuple[LimitSpec, ...]
    valid_from: datetime
    valid_to: datetime
    reference: str
    description: str | None
    requested_at: datetime | None
    source: str | None

    def document(self) -> dict[str, Any]:
        """The normalised JSON-ready form kept in the store (amounts as strings, instants as ISO text)."""
        return {
            "mandate_id": self.mandate_id,
            "integration": self.integration,
            "currency": self.currency,
            "creditor_account": {
                "scheme_name": self.creditor.scheme_name,
                "identification": self.creditor.identification,
                "name": self.creditor.name,
            },
            "max_individual_amount": money_text(self.max_individual_amount),
            "periodic_limits": [
                {"amount": money_text(p.amount), "period_type": p.period_type, "period_alignment": p.period_alignment}
                for p in self.periodic_limits
            ],
            "valid_from": iso_ms(self.valid_from),
            "valid_to": iso_ms(self.valid_to),
            "reference": self.reference,
            "description": self.description,
            "requested_at": None if self.requested_at is None else iso_ms(self.requested_at),
            "source": self.source,
        }


def parse_mandate(doc: Mapping[str, Any]) -> MandateRequest:
    """Read and check a mandate request; `InvalidRequestError` listing every problem."""
    if not isinstance(doc, Mapping):
        raise InvalidRequestError([f"request: must be an object, not {type(doc).__name__}"])
    r = _Reader(doc)
    mandate_id = r.text(doc, "mandate_id", "mandate_id", max_len=MANDATE_ID_MAX)
    integration = r.text(doc, "integration", "integration", max_len=200)
    currency = r.currency(doc, "currency", "currency")
    creditor: CreditorAccount | None = None
    raw_creditor = doc.get("creditor_account")
    if not isinstance(raw_creditor, Mapping):
        r.fail("creditor_account", "is required (scheme_name, identification, name)")
    else:
        scheme = r.text(
            raw_creditor, "scheme_name", "creditor_account.scheme_name", max_len=40, default=SORT_CODE_SCHEME
        )
        ident = r.text(raw_creditor, "identification", "creditor_account.identification", max_len=ID_MAX)
        name = r.text(raw_creditor, "name", "creditor_account.name", max_len=NAME_MAX)
        if scheme is not None and scheme != SORT_CODE_SCHEME:
            r.fail("creditor_account.scheme_name", f"must be {SORT_CODE_SCHEME}")
            scheme = None
        if ident is not None and not _SORT_CODE_ACCOUNT.fullmatch(ident):
            r.fail("creditor_account.identification", "must be 14 digits: the sort code then the account number")
            ident = None
        if scheme is not None and ident is not None and name is not None:
            creditor = CreditorAccount(scheme, ident, name)
    maximum = r.amount(doc, "max_individual_amount", "max_individual_amount")
    limits: list[LimitSpec] = []
    raw_limits = doc.get("periodic_limits", [])
    if not isinstance(raw_limits, list | tuple):
        r.fail("periodic_limits", "must be a list")
        raw_limits = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(raw_limits):
        where = f"periodic_limits[{i}]"
        if not isinstance(item, Mapping):
            r.fail(where, "must be an object (amount, period_type, period_alignment)")
            continue
        amount = r.amount(item, "amount", f"{where}.amount")
        period = item.get("period_type")
        alignment = item.get("period_alignment")
        if period not in {p.value for p in PeriodType}:
            r.fail(f"{where}.period_type", f"must be Day, Week or Month, got {period!r}")
            period = None
        if alignment not in {a.value for a in Alignment}:
            r.fail(f"{where}.period_alignment", f"must be Consent or Calendar, got {alignment!r}")
            alignment = None
        if period is not None and alignment is not None:
            if (period, alignment) in seen:
                r.fail(where, f"a second {period}/{alignment} limit")
            seen.add((period, alignment))
            if amount is not None:
                limits.append(LimitSpec(amount, str(period), str(alignment)))
    valid_from = r.instant(doc, "valid_from", "valid_from")
    valid_to = r.instant(doc, "valid_to", "valid_to")
    if valid_from is not None and valid_to is not None and not valid_from < valid_to:
        r.fail("valid_to", "must be after valid_from")
    reference = r.text(doc, "reference", "reference", max_len=REFERENCE_MAX)
    description = r.text(doc, "description", "description", max_len=UNSTRUCTURED_MAX, optional=True)
    requested_at = r.instant(doc, "requested_at", "requested_at", optional=True)
    source = r.text(doc, "source", "source", max_len=200, optional=True)
    if r.problems:
        raise InvalidRequestError(r.problems, mandate_id=mandate_id or _id(doc, "mandate_id"))
    assert mandate_id and integration and currency and creditor and maximum and reference
    assert valid_from is not None and valid_to is not None
    return MandateRequest(
        mandate_id=mandate_id,
        integration=integration,
        currency=currency,
        creditor=creditor,
        max_individual_amount=maximum,
        periodic_limits=tuple(limits),
        valid_from=valid_from,
        valid_to=valid_to,
        reference=reference,
        description=description,
        requested_at=requested_at,
        source=source,
    )


@dataclass(frozen=True)
class ConsentParts:
    """The pieces of a B1 body."""

    control_parameters: dict[str, Any]
    initiation: dict[str, Any]
    remittance_information: dict[str, Any]


def creditor_account(creditor: CreditorAccount) -> dict[str, Any]:
    """`CreditorAccount` as the bank spells it."""
    return {"SchemeName": creditor.scheme_name, "Identification": creditor.identification, "Name": creditor.name}


def unstructured(request: MandateRequest, tpp_name: str) -> str:
    """The consent's `RemittanceInformation.Unstructured`: the request's description or the convention."""
    return request.description or DESCRIPTION_CONVENTION.format(tpp_name=tpp_name)


def consent_parts(request: MandateRequest, tpp_name: str) -> ConsentParts:
    """B1's `ControlParameters`, `Initiation` and `RemittanceInformation` for a mandate request."""
    currency = request.currency
    control = {
        "PSUAuthenticationMethods": [SCA],
        "VRPType": [SWEEPING],
        "ValidFromDateTime": iso_ms(request.valid_from),
        "ValidToDateTime": iso_ms(request.valid_to),
        "MaximumIndividualAmount": {"Amount": money_text(request.max_individual_amount), "Currency": currency},
        "PeriodicLimits": [
            {
                "Amount": money_text(p.amount),
                "Currency": currency,
                "PeriodType": p.period_type,
                "PeriodAlignment": p.period_alignment,
            }
            for p in request.periodic_limits
        ],
    }
    return ConsentParts(
        control_parameters=control,
        initiation={"CreditorAccount": creditor_account(request.creditor)},
        remittance_information={"Reference": request.reference, "Unstructured": unstructured(request, tpp_name)},
    )


def limits_of(
    request: MandateRequest, consent_created_at: datetime | None, fallback_created_at: datetime
) -> LimitsView:
    """The mandate as `processor.domain.vrp_limits.check_payment` sees it. `Consent`-aligned periods count from the
    consent's creation at the bank (`fallback_created_at` until that is known)."""
    return LimitsView(
        currency=request.currency,
        max_individual=request.max_individual_amount,
        periodic_limits=tuple(
            PeriodicLimit(p.amount, request.currency, PeriodType(p.period_type), Alignment(p.period_alignment))
            for p in request.periodic_limits
        ),
        valid_from=request.valid_from,
        valid_to=request.valid_to,
        created_at=consent_created_at or fallback_created_at,
    )


# -- payments ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaymentRequest:
    """One payment instruction under a mandate (`vrp.payments`)."""

    payment_id: str
    mandate_id: str
    amount: Decimal
    currency: str
    end_to_end_id: str
    remittance: str | None
    requested_at: datetime | None

    def document(self) -> dict[str, Any]:
        """The normalised JSON-ready form kept in the store."""
        return {
            "payment_id": self.payment_id,
            "mandate_id": self.mandate_id,
            "amount": money_text(self.amount),
            "currency": self.currency,
            "end_to_end_id": self.end_to_end_id,
            "remittance": self.remittance,
            "requested_at": None if self.requested_at is None else iso_ms(self.requested_at),
        }


def parse_payment(doc: Mapping[str, Any]) -> PaymentRequest:
    """Read and check a payment instruction; `InvalidRequestError` listing every problem."""
    if not isinstance(doc, Mapping):
        raise InvalidRequestError([f"request: must be an object, not {type(doc).__name__}"])
    r = _Reader(doc)
    payment_id = r.text(doc, "payment_id", "payment_id", max_len=ID_MAX)
    mandate_id = r.text(doc, "mandate_id", "mandate_id", max_len=MANDATE_ID_MAX)
    amount = r.amount(doc, "amount", "amount")
    currency = r.currency(doc, "currency", "currency")
    end_to_end = r.text(doc, "end_to_end_id", "end_to_end_id", max_len=ID_MAX)
    remittance = r.text(doc, "remittance", "remittance", max_len=UNSTRUCTURED_MAX, optional=True)
    requested_at = r.instant(doc, "requested_at", "requested_at", optional=True)
    if r.problems:
        raise InvalidRequestError(
            r.problems,
            mandate_id=mandate_id or _id(doc, "mandate_id"),
            payment_id=payment_id or _id(doc, "payment_id"),
        )
    assert payment_id and mandate_id and amount and currency and end_to_end
    return PaymentRequest(payment_id, mandate_id, amount, currency, end_to_end, remittance, requested_at)


@dataclass(frozen=True)
class PaymentParts:
    """The pieces of a B2 body."""

    initiation: dict[str, Any]
    instruction: dict[str, Any]


def payment_parts(payment: PaymentRequest, mandate: MandateRequest, tpp_name: str) -> PaymentParts:
    """B2's `Initiation` (equal to the consent's) and `Instruction` for a payment under a mandate."""
    creditor = creditor_account(mandate.creditor)
    return PaymentParts(
        initiation={"CreditorAccount": dict(creditor)},
        instruction={
            "InstructionIdentification": payment.payment_id,
            "EndToEndIdentification": payment.end_to_end_id,
            "CreditorAccount": dict(creditor),
            "InstructedAmount": {"Amount": money_text(payment.amount), "Currency": payment.currency},
            "RemittanceInformation": {
                "Unstructured": payment.remittance or unstructured(mandate, tpp_name),
                "Reference": mandate.reference,
            },
        },
    )


# -- status events ----------------------------------------------------------------------------------------------


def status_record(
    *,
    mandate_id: str,
    status: str,
    occurred_at: datetime,
    payment_id: str | None = None,
    consent_id: str | None = None,
    domestic_vrp_id: str | None = None,
    authorization_url: str | None = None,
    amount: Decimal | None = None,
    currency: str | None = None,
    bank_status: str | None = None,
    reason: str | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    """A `vrp.status` record in its stored (JSON) form: every schema field, amount as text, instant as ISO."""
    return {
        "event_id": event_id or str(uuid.uuid4()),
        "mandate_id": mandate_id,
        "payment_id": payment_id,
        "status": status,
        "occurred_at": iso_ms(occurred_at),
        "consent_id": consent_id,
        "domestic_vrp_id": domestic_vrp_id,
        "authorization_url": authorization_url,
        "amount": None if amount is None else money_text(amount),
        "currency": currency,
        "bank_status": bank_status,
        "reason": reason,
    }
