"""VRP requests as the engine reads them, and the bank bodies and status events made from them. Pure: no I/O.

- `parse_mandate` / `parse_payment` read a mandate request (`vrp.mandates`) or a payment instruction
  (`vrp.payments`), as a decoded Avro record (datetimes, Decimals) or as JSON (ISO 8601 strings, decimal
  strings or numbers parsed as Decimal) with pydantic models whose fields carry the checks. Every problem is
  reported, not just the first, in the request's field order (`InvalidRequestError`).
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainValidator, ValidationError

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


F = TypeVar("F", bound="_Fields")
T = TypeVar("T")


class InvalidRequestError(ValueError):
    """A request that cannot be processed; `problems` lists every fault as `field: problem`.

    `mandate_id` / `payment_id` are set when they could be read, so the engine can still publish INVALID.
    """

    def __init__(self, problems: Sequence[str], *, mandate_id: str | None = None, payment_id: str | None = None):
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)
        self.mandate_id = mandate_id
        self.payment_id = payment_id


# -- field checks -----------------------------------------------------------------------------------------------
# Each takes the raw value (None when the key is absent, as `validate_default` hands it over) and returns it
# parsed, or raises ValueError with the problem; pydantic runs them field by field and collects every problem.


def _text(max_len: int, *, optional: bool = False, default: str | None = None) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if value is None:
            if default is not None or optional:
                return default
            raise ValueError("is required")
        if not isinstance(value, str):
            raise ValueError(f"must be a string, not {type(value).__name__}")
        if not value.strip():
            if optional:
                return None
            raise ValueError("must not be empty")
        if len(value) > max_len:
            raise ValueError(f"must be at most {max_len} characters")
        unsafe = text_problem(value)  # control, bidi or lone surrogate characters
        if unsafe is not None:
            raise ValueError(f"holds {unsafe}")
        return value

    return check


def _amount(value: object) -> Decimal:
    if value is None:
        raise ValueError("is required")
    if isinstance(value, bool | float):
        raise ValueError("must be a decimal (a string or an exact number), never a float")
    if not isinstance(value, Decimal | int | str):
        raise ValueError(f"must be a decimal amount, not {type(value).__name__}")
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a decimal amount") from None
    if not amount.is_finite() or amount <= 0:
        raise ValueError(f"must be greater than zero, got {value}")
    if amount != amount.quantize(CENT):
        raise ValueError(f"{value} has more than 2 decimals")
    if amount >= AMOUNT_MAX:
        raise ValueError(f"{value} is too large")
    return amount.quantize(CENT)


def _currency(value: object) -> str:
    if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
        raise ValueError(f"must be an ISO 4217 code (three capital letters), got {value!r}")
    return value


def _instant(*, optional: bool = False) -> Callable[[object], datetime | None]:
    def check(value: object) -> datetime | None:
        if value is None:
            if optional:
                return None
            raise ValueError("is required")
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"{value!r} is not an ISO 8601 date-time") from None
        if not isinstance(value, datetime):
            raise ValueError(f"must be an ISO 8601 date-time, not {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("must carry a UTC offset (e.g. Z or +00:00)")
        return utc_ms(value)

    return check


def _one_of(names: str, known: type[PeriodType] | type[Alignment]) -> Callable[[object], str]:
    def check(value: object) -> str:
        if value not in {member.value for member in known}:
            raise ValueError(f"must be {names}, got {value!r}")
        return str(value)

    return check


def _object(what: str) -> Callable[[object], object]:
    def check(value: object) -> object:
        if not isinstance(value, Mapping):
            raise ValueError(what)
        return dict(value)

    return check


def _list(value: object) -> object:
    if not isinstance(value, list | tuple):
        raise ValueError("must be a list")
    return list(value)


class _Fields(BaseModel):
    """A request's model: unknown keys ignored, a missing key checked as None (the checks say what it needs)."""

    model_config = ConfigDict(extra="ignore", validate_default=True, frozen=True, arbitrary_types_allowed=True)


class _Creditor(_Fields):
    scheme_name: Annotated[str | None, PlainValidator(_text(40, default=SORT_CODE_SCHEME))] = None
    identification: Annotated[str | None, PlainValidator(_text(ID_MAX))] = None
    name: Annotated[str | None, PlainValidator(_text(NAME_MAX))] = None


class _Limit(_Fields):
    amount: Annotated[Decimal | None, PlainValidator(_amount)] = None
    period_type: Annotated[str | None, PlainValidator(_one_of("Day, Week or Month", PeriodType))] = None
    period_alignment: Annotated[str | None, PlainValidator(_one_of("Consent or Calendar", Alignment))] = None


class _MandateFields(_Fields):
    mandate_id: Annotated[str | None, PlainValidator(_text(MANDATE_ID_MAX))] = None
    integration: Annotated[str | None, PlainValidator(_text(200))] = None
    currency: Annotated[str | None, PlainValidator(_currency)] = None
    creditor_account: Annotated[
        _Creditor | None, BeforeValidator(_object("is required (scheme_name, identification, name)"))
    ] = None
    max_individual_amount: Annotated[Decimal | None, PlainValidator(_amount)] = None
    periodic_limits: Annotated[
        list[Annotated[_Limit, BeforeValidator(_object("must be an object (amount, period_type, period_alignment)"))]],
        BeforeValidator(_list),
    ] = []
    valid_from: Annotated[datetime | None, PlainValidator(_instant())] = None
    valid_to: Annotated[datetime | None, PlainValidator(_instant())] = None
    reference: Annotated[str | None, PlainValidator(_text(REFERENCE_MAX))] = None
    description: Annotated[str | None, PlainValidator(_text(UNSTRUCTURED_MAX, optional=True))] = None
    requested_at: Annotated[datetime | None, PlainValidator(_instant(optional=True))] = None
    source: Annotated[str | None, PlainValidator(_text(200, optional=True))] = None


class _PaymentFields(_Fields):
    payment_id: Annotated[str | None, PlainValidator(_text(ID_MAX))] = None
    mandate_id: Annotated[str | None, PlainValidator(_text(MANDATE_ID_MAX))] = None
    amount: Annotated[Decimal | None, PlainValidator(_amount)] = None
    currency: Annotated[str | None, PlainValidator(_currency)] = None
    end_to_end_id: Annotated[str | None, PlainValidator(_text(ID_MAX))] = None
    remittance: Annotated[str | None, PlainValidator(_text(UNSTRUCTURED_MAX, optional=True))] = None
    requested_at: Annotated[datetime | None, PlainValidator(_instant(optional=True))] = None


def _name(loc: Sequence[int | str]) -> str:
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else part
    return name


def _read(model: type[F], doc: Mapping[str, Any]) -> tuple[F | None, list[tuple[tuple[int, ...], str]]]:
    """`doc` as `model`, or every problem as `field: problem` with its place in the model's field order."""
    if not isinstance(doc, Mapping):
        raise InvalidRequestError([f"request: must be an object, not {type(doc).__name__}"])
    try:
        return model.model_validate(dict(doc)), []
    except ValidationError as exc:
        order = list(model.model_fields)
        problems = []
        for error in exc.errors():
            loc = tuple(error["loc"])
            said = error.get("ctx", {}).get("error", error["msg"])
            problems.append((_rank(order, loc), f"{_name(loc)}: {said}"))
        return None, problems


def _rank(order: list[str], loc: tuple[int | str, ...]) -> tuple[int, ...]:
    """Where a problem at `loc` is told: by the request's field order, then a list's index."""
    first = order.index(str(loc[0])) if loc and loc[0] in order else len(order)
    index = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else -1
    return (first, index)


def _told(problems: list[tuple[tuple[int, ...], str]]) -> list[str]:
    return [text for _, text in sorted(problems, key=lambda problem: problem[0])]


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


def _or_none(check: Callable[[object], T | None], value: object) -> T | None:
    """`check(value)`, or None when it finds a problem (told by the field itself)."""
    try:
        return check(value)
    except ValueError:
        return None


def _across(doc: Mapping[str, Any]) -> list[tuple[tuple[int, ...], str]]:
    """A mandate request's checks across fields, made whatever else is wrong: one limit per period type and
    alignment, and a validity that runs forward."""
    order, problems = list(_MandateFields.model_fields), []
    creditor = doc.get("creditor_account")
    if isinstance(creditor, Mapping):  # the account's kind, told after its fields' own problems
        scheme, account = (
            _or_none(_text(40, default=SORT_CODE_SCHEME), creditor.get("scheme_name")),
            _or_none(_text(ID_MAX), creditor.get("identification")),
        )
        if scheme is not None and scheme != SORT_CODE_SCHEME:
            problems.append(
                (_rank(order, ("creditor_account", 0)), f"creditor_account.scheme_name: must be {SORT_CODE_SCHEME}")
            )
        if account is not None and not _SORT_CODE_ACCOUNT.fullmatch(account):
            message = "creditor_account.identification: must be 14 digits: the sort code then the account number"
            problems.append((_rank(order, ("creditor_account", 0)), message))
    seen: set[tuple[str, str]] = set()
    raw_limits = doc.get("periodic_limits")
    for i, item in enumerate(raw_limits if isinstance(raw_limits, list | tuple) else ()):
        if not isinstance(item, Mapping):
            continue
        period, alignment = item.get("period_type"), item.get("period_alignment")
        if period not in {p.value for p in PeriodType} or alignment not in {a.value for a in Alignment}:
            continue
        if (period, alignment) in seen:
            problems.append(
                (_rank(order, ("periodic_limits", i)), f"periodic_limits[{i}]: a second {period}/{alignment} limit")
            )
        seen.add((str(period), str(alignment)))
    since, until = _or_none(_instant(), doc.get("valid_from")), _or_none(_instant(), doc.get("valid_to"))
    if since is not None and until is not None and not since < until:
        problems.append((_rank(order, ("valid_to",)), "valid_to: must be after valid_from"))
    return problems


def parse_mandate(doc: Mapping[str, Any]) -> MandateRequest:
    """Read and check a mandate request; `InvalidRequestError` listing every problem (in the request's order)."""
    fields, problems = _read(_MandateFields, doc)
    problems += _across(doc)
    if problems or fields is None:
        raise InvalidRequestError(_told(problems), mandate_id=_id(doc, "mandate_id"))
    creditor = fields.creditor_account
    assert fields.mandate_id and fields.integration and fields.currency and creditor and fields.max_individual_amount
    assert creditor.scheme_name and creditor.identification and creditor.name and fields.reference
    assert fields.valid_from is not None and fields.valid_to is not None
    return MandateRequest(
        mandate_id=fields.mandate_id,
        integration=fields.integration,
        currency=fields.currency,
        creditor=CreditorAccount(creditor.scheme_name, creditor.identification, creditor.name),
        max_individual_amount=fields.max_individual_amount,
        periodic_limits=tuple(
            LimitSpec(p.amount, p.period_type, p.period_alignment)
            for p in fields.periodic_limits
            if p.amount is not None and p.period_type is not None and p.period_alignment is not None
        ),
        valid_from=fields.valid_from,
        valid_to=fields.valid_to,
        reference=fields.reference,
        description=fields.description,
        requested_at=fields.requested_at,
        source=fields.source,
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
    fields, problems = _read(_PaymentFields, doc)
    if fields is None:
        raise InvalidRequestError(_told(problems), mandate_id=_id(doc, "mandate_id"), payment_id=_id(doc, "payment_id"))
    f = fields
    assert f.payment_id and f.mandate_id and f.amount and f.currency and f.end_to_end_id
    return PaymentRequest(
        f.payment_id, f.mandate_id, f.amount, f.currency, f.end_to_end_id, f.remittance, f.requested_at
    )


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
