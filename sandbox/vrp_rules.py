"""Flow B rules, free of I/O: request body validation, period arithmetic and the control-parameter checks.

The routes in `sandbox.vrp` turn `InvalidFieldError` into 400 `UK.OBIE.Resource.InvalidFormat` and
`ControlParameterBreachError` into 400 `UK.OBIE.Rules.FailsControlParameters`; both carry the JSON path of the
field at fault. The exact readings are written down in docs/sandbox-vrp.md.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from sandbox.clock import iso_ms

SCA = "UK.OBIE.SCA"
SCA_NOT_REQUIRED = "UK.OBIE.SCANotRequired"
SWEEPING = "UK.OBIE.VRPType.Sweeping"
SORT_CODE_SCHEME = "UK.OBIE.SortCodeAccountNumber"
PERIOD_TYPES = ("Day", "Week", "Month")
ALIGNMENTS = ("Consent", "Calendar")
PENDING = "Pending"
SETTLED = "AcceptedSettlementCompleted"

PeriodType = Literal["Day", "Week", "Month"]
Alignment = Literal["Consent", "Calendar"]

# ASCII digits only (`\d` would accept other scripts' digits); at most 2 decimals (DESIGN.md, money).
_AMOUNT = re.compile(r"[0-9]{1,13}(\.[0-9]{1,2})?")
_CURRENCY = re.compile(r"[A-Z]{3}")
_SORT_CODE_ACCOUNT = re.compile(r"[0-9]{14}")
# ISO 8601 date-time with a mandatory offset (`Z` or ±hh:mm); seconds and fractions optional.
_INSTANT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}:[0-9]{2})"
)

# Open Banking v3.1 text lengths.
NAME_MAX = 350
REFERENCE_MAX = 35
UNSTRUCTURED_MAX = 140
IDENTIFICATION_MAX = 35


class InvalidFieldError(Exception):
    """A request field is missing, of the wrong type or out of its allowed values."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class ControlParameterBreachError(Exception):
    """A payment breaks one of its consent's control parameters."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


# ---------------------------------------------------------------------------------------------------------------
# Field readers: each checks one value and names its path on failure.


def _object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidFieldError(path, "must be a JSON object")
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fields(obj: Mapping[str, Any], path: str, required: Sequence[str], optional: Sequence[str] = ()) -> None:
    """Every required key present and no key outside the schema (a typo must not pass silently)."""
    for key in required:
        if key not in obj:
            raise InvalidFieldError(_join(path, key), "is required")
    for key in obj:
        if key not in required and key not in optional:
            raise InvalidFieldError(_join(path, key), "is not a field of this resource")


def _text(value: object, path: str, max_length: int) -> str:
    if not isinstance(value, str):
        raise InvalidFieldError(path, "must be a string")
    if not value.strip():
        raise InvalidFieldError(path, "must not be empty")
    if len(value) > max_length:
        raise InvalidFieldError(path, f"must be at most {max_length} characters")
    return value


def _string_list(value: object, path: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise InvalidFieldError(path, "must be a non-empty array of strings")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidFieldError(f"{path}[{i}]", "must be a string")
    if len(set(value)) != len(value):
        raise InvalidFieldError(path, "must not repeat a value")
    return list(value)


def parse_amount(value: object, path: str) -> Decimal:
    """A positive amount written as a string with at most 13 integer digits and 2 decimals."""
    if not isinstance(value, str):
        raise InvalidFieldError(path, 'must be a string such as "10.50" (never a JSON number)')
    if not _AMOUNT.fullmatch(value):
        raise InvalidFieldError(path, 'must be a decimal string with at most 2 decimals, such as "10.50"')
    amount = Decimal(value)
    if amount <= 0:
        raise InvalidFieldError(path, "must be greater than zero")
    return amount


def parse_currency(value: object, path: str) -> str:
    """An ISO 4217 code: three upper-case letters."""
    if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
        raise InvalidFieldError(path, "must be an ISO 4217 currency code (three upper-case letters)")
    return value


def parse_instant(value: object, path: str) -> datetime:
    """An ISO 8601 date-time with an explicit offset, returned in UTC."""
    if not isinstance(value, str) or not _INSTANT.fullmatch(value):
        raise InvalidFieldError(path, "must be an ISO 8601 date-time with an offset, such as 2026-11-02T09:00:00+00:00")
    try:
        return datetime.fromisoformat(value).astimezone(UTC)
    except (ValueError, OverflowError):
        raise InvalidFieldError(path, "is not a valid date-time") from None


def _amount_object(value: object, path: str) -> tuple[Decimal, str]:
    obj = _object(value, path)
    _fields(obj, path, ("Amount", "Currency"))
    return parse_amount(obj["Amount"], f"{path}.Amount"), parse_currency(obj["Currency"], f"{path}.Currency")


def _creditor_account(value: object, path: str) -> None:
    obj = _object(value, path)
    _fields(obj, path, ("SchemeName", "Identification", "Name"))
    if obj["SchemeName"] != SORT_CODE_SCHEME:
        raise InvalidFieldError(f"{path}.SchemeName", f"must be {SORT_CODE_SCHEME}")
    ident = obj["Identification"]
    if not isinstance(ident, str) or not _SORT_CODE_ACCOUNT.fullmatch(ident):
        raise InvalidFieldError(
            f"{path}.Identification", "must be the 6-digit sort code followed by the 8-digit account number"
        )
    _text(obj["Name"], f"{path}.Name", NAME_MAX)


def _initiation(value: object, path: str) -> None:
    obj = _object(value, path)
    _fields(obj, path, ("CreditorAccount",))
    _creditor_account(obj["CreditorAccount"], f"{path}.CreditorAccount")


def _risk(body: Mapping[str, Any]) -> dict[str, Any]:
    return _object(body["Risk"], "Risk")


# ---------------------------------------------------------------------------------------------------------------
# B1: the consent request.


@dataclass(frozen=True)
class ConsentRequest:
    """A valid VRP consent request: its `Data` and `Risk`, exactly as sent."""

    data: dict[str, Any]
    risk: dict[str, Any]


def _control_parameters(value: object) -> None:
    path = "Data.ControlParameters"
    obj = _object(value, path)
    _fields(
        obj,
        path,
        (
            "PSUAuthenticationMethods",
            "VRPType",
            "ValidFromDateTime",
            "ValidToDateTime",
            "MaximumIndividualAmount",
            "PeriodicLimits",
        ),
    )
    methods = _string_list(obj["PSUAuthenticationMethods"], f"{path}.PSUAuthenticationMethods")
    for i, method in enumerate(methods):
        if method not in (SCA, SCA_NOT_REQUIRED):
            raise InvalidFieldError(f"{path}.PSUAuthenticationMethods[{i}]", f"must be {SCA} or {SCA_NOT_REQUIRED}")
    if SCA not in methods:
        raise InvalidFieldError(f"{path}.PSUAuthenticationMethods", f"must contain {SCA}")
    types = _string_list(obj["VRPType"], f"{path}.VRPType")
    if types != [SWEEPING]:
        raise InvalidFieldError(f"{path}.VRPType", f"must be [{SWEEPING!r}]: this bank offers sweeping only")
    valid_from = parse_instant(obj["ValidFromDateTime"], f"{path}.ValidFromDateTime")
    valid_to = parse_instant(obj["ValidToDateTime"], f"{path}.ValidToDateTime")
    if valid_from >= valid_to:
        raise InvalidFieldError(f"{path}.ValidToDateTime", "must be later than ValidFromDateTime")
    _, currency = _amount_object(obj["MaximumIndividualAmount"], f"{path}.MaximumIndividualAmount")
    limits = obj["PeriodicLimits"]
    if not isinstance(limits, list):
        raise InvalidFieldError(f"{path}.PeriodicLimits", "must be an array")
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(limits):
        where = f"{path}.PeriodicLimits[{i}]"
        entry = _object(raw, where)
        _fields(entry, where, ("Amount", "Currency", "PeriodType", "PeriodAlignment"))
        parse_amount(entry["Amount"], f"{where}.Amount")
        if parse_currency(entry["Currency"], f"{where}.Currency") != currency:
            raise InvalidFieldError(f"{where}.Currency", f"must equal MaximumIndividualAmount.Currency ({currency})")
        if entry["PeriodType"] not in PERIOD_TYPES:
            raise InvalidFieldError(f"{where}.PeriodType", "must be one of Day, Week, Month")
        if entry["PeriodAlignment"] not in ALIGNMENTS:
            raise InvalidFieldError(f"{where}.PeriodAlignment", "must be Consent or Calendar")
        pair = (entry["PeriodType"], entry["PeriodAlignment"])
        if pair in seen:
            raise InvalidFieldError(where, f"repeats the limit for PeriodType {pair[0]} with PeriodAlignment {pair[1]}")
        seen.add(pair)


def validate_consent_request(body: Mapping[str, Any]) -> ConsentRequest:
    """Check a B1 body field by field; raise `InvalidFieldError` naming the first field at fault."""
    _fields(body, "", ("Data", "Risk"))
    data = _object(body["Data"], "Data")
    _fields(data, "Data", ("ControlParameters", "Initiation", "RemittanceInformation"))
    _control_parameters(data["ControlParameters"])
    _initiation(data["Initiation"], "Data.Initiation")
    remittance = _object(data["RemittanceInformation"], "Data.RemittanceInformation")
    _fields(remittance, "Data.RemittanceInformation", ("Reference", "Unstructured"))
    _text(remittance["Reference"], "Data.RemittanceInformation.Reference", REFERENCE_MAX)
    _text(remittance["Unstructured"], "Data.RemittanceInformation.Unstructured", UNSTRUCTURED_MAX)
    return ConsentRequest(data=data, risk=_risk(body))


# ---------------------------------------------------------------------------------------------------------------
# B2: the payment request.


@dataclass(frozen=True)
class PaymentRequest:
    """A well-formed domestic VRP request (not yet checked against its consent)."""

    consent_id: str
    data: dict[str, Any]
    risk: dict[str, Any]
    amount: Decimal
    currency: str


def consent_id_of(body: Mapping[str, Any]) -> str:
    """`Data.ConsentId` of a B2 body, read first so the token can be matched to the consent."""
    if "Data" not in body:
        raise InvalidFieldError("Data", "is required")
    data = _object(body["Data"], "Data")
    if "ConsentId" not in data:
        raise InvalidFieldError("Data.ConsentId", "is required")
    return _text(data["ConsentId"], "Data.ConsentId", 128)


def validate_payment_request(body: Mapping[str, Any]) -> PaymentRequest:
    """Check a B2 body field by field; raise `InvalidFieldError` naming the first field at fault."""
    _fields(body, "", ("Data", "Risk"))
    consent_id = consent_id_of(body)
    data = _object(body["Data"], "Data")
    _fields(data, "Data", ("ConsentId", "Initiation", "PSUAuthenticationMethod", "VRPType", "Instruction"))
    _initiation(data["Initiation"], "Data.Initiation")
    if data["PSUAuthenticationMethod"] != SCA:
        raise InvalidFieldError("Data.PSUAuthenticationMethod", f"must be {SCA}")
    if data["VRPType"] != SWEEPING:
        raise InvalidFieldError("Data.VRPType", f"must be {SWEEPING}")
    path = "Data.Instruction"
    instruction = _object(data["Instruction"], path)
    _fields(
        instruction,
        path,
        ("InstructionIdentification", "EndToEndIdentification", "CreditorAccount", "InstructedAmount"),
        ("RemittanceInformation",),
    )
    _text(instruction["InstructionIdentification"], f"{path}.InstructionIdentification", IDENTIFICATION_MAX)
    _text(instruction["EndToEndIdentification"], f"{path}.EndToEndIdentification", IDENTIFICATION_MAX)
    _creditor_account(instruction["CreditorAccount"], f"{path}.CreditorAccount")
    amount, currency = _amount_object(instruction["InstructedAmount"], f"{path}.InstructedAmount")
    if "RemittanceInformation" in instruction:
        where = f"{path}.RemittanceInformation"
        remittance = _object(instruction["RemittanceInformation"], where)
        _fields(remittance, where, ("Unstructured",), ("Reference",))
        _text(remittance["Unstructured"], f"{where}.Unstructured", UNSTRUCTURED_MAX)
        if "Reference" in remittance:
            _text(remittance["Reference"], f"{where}.Reference", REFERENCE_MAX)
    return PaymentRequest(consent_id, data, _risk(body), amount, currency)


def check_matches_consent(consent_data: Mapping[str, Any], payment: PaymentRequest) -> None:
    """The payment's Initiation and creditor must be the consent's, field for field (InvalidFormat otherwise)."""
    if payment.data["Initiation"] != consent_data["Initiation"]:
        raise InvalidFieldError("Data.Initiation", "differs from the consent's Initiation")
    if payment.data["Instruction"]["CreditorAccount"] != consent_data["Initiation"]["CreditorAccount"]:
        raise InvalidFieldError("Data.Instruction.CreditorAccount", "differs from the consent's CreditorAccount")


# ---------------------------------------------------------------------------------------------------------------
# Periods.


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("naive datetime: instants must carry a timezone")
    return moment.astimezone(UTC)


def add_months(moment: datetime, months: int) -> datetime:
    """The same wall time `months` calendar months later (or earlier), clamping the day to the month's end."""
    index = moment.year * 12 + (moment.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    return moment.replace(year=year, month=month, day=min(moment.day, calendar.monthrange(year, month)[1]))


def period_window(
    period: PeriodType, alignment: Alignment, anchor: datetime, at: datetime
) -> tuple[datetime, datetime]:
    """The half-open window [start, end) of the period that contains `at`.

    Calendar: the UTC day, the ISO week (Monday 00:00 UTC) or the calendar month.
    Consent: windows counted from `anchor` (the consent's CreationDateTime): 24 h days, 7-day weeks, and months
    that start at `anchor` plus n calendar months (day clamped to the month's end, always counted from `anchor`
    itself, so Jan 31 gives Feb 28/29 and then Mar 31).
    """
    at = _utc(at)
    anchor = _utc(anchor)
    if alignment == "Calendar":
        midnight = at.replace(hour=0, minute=0, second=0, microsecond=0)
        if period == "Day":
            return midnight, midnight + timedelta(days=1)
        if period == "Week":
            monday = midnight - timedelta(days=at.weekday())
            return monday, monday + timedelta(days=7)
        first = midnight.replace(day=1)
        return first, add_months(first, 1)
    if period in ("Day", "Week"):
        length = timedelta(days=1 if period == "Day" else 7)
        start = anchor + ((at - anchor) // length) * length
        return start, start + length
    n = (at.year - anchor.year) * 12 + (at.month - anchor.month)
    if add_months(anchor, n) > at:
        n -= 1
    return add_months(anchor, n), add_months(anchor, n + 1)


# ---------------------------------------------------------------------------------------------------------------
# The control-parameter checks of B2.


@dataclass(frozen=True)
class PastPayment:
    """An accepted earlier payment under the same consent."""

    at: datetime
    amount: Decimal


def check_control_parameters(
    controls: Mapping[str, Any],
    consent_created: datetime,
    at: datetime,
    amount: Decimal,
    currency: str,
    earlier: Sequence[PastPayment],
) -> None:
    """Raise `ControlParameterBreachError` for the first control parameter the payment would break.

    Order: currency, ValidFromDateTime, ValidToDateTime, MaximumIndividualAmount, then PeriodicLimits in the
    consent's order. `controls` is the consent's stored ControlParameters (amounts as strings).
    """
    base = "Data.ControlParameters"
    maximum = controls["MaximumIndividualAmount"]
    if currency != maximum["Currency"]:
        raise ControlParameterBreachError(
            f"{base}.MaximumIndividualAmount.Currency",
            f"InstructedAmount.Currency {currency} differs from the consent's currency {maximum['Currency']}",
        )
    valid_from = parse_instant(controls["ValidFromDateTime"], f"{base}.ValidFromDateTime")
    valid_to = parse_instant(controls["ValidToDateTime"], f"{base}.ValidToDateTime")
    if at < valid_from:
        raise ControlParameterBreachError(
            f"{base}.ValidFromDateTime", f"the consent is valid only from {iso_ms(valid_from)}; now is {iso_ms(at)}"
        )
    if at > valid_to:
        raise ControlParameterBreachError(
            f"{base}.ValidToDateTime", f"the consent was valid only until {iso_ms(valid_to)}; now is {iso_ms(at)}"
        )
    limit = Decimal(maximum["Amount"])
    if amount > limit:
        raise ControlParameterBreachError(
            f"{base}.MaximumIndividualAmount.Amount",
            f"payment of {amount} {currency} exceeds MaximumIndividualAmount {limit} {currency}",
        )
    for i, entry in enumerate(controls["PeriodicLimits"]):
        start, end = period_window(entry["PeriodType"], entry["PeriodAlignment"], consent_created, at)
        used = sum((p.amount for p in earlier if start <= p.at < end), Decimal(0))
        cap = Decimal(entry["Amount"])
        if used + amount > cap:
            raise ControlParameterBreachError(
                f"{base}.PeriodicLimits[{i}]",
                f"PeriodicLimits[{i}] ({entry['PeriodType']}, {entry['PeriodAlignment']}) exceeded: "
                f"{used} {currency} already paid from {iso_ms(start)} to {iso_ms(end)}; this payment of {amount} "
                f"{currency} would bring it to {used + amount}, above the limit of {cap} {currency}",
            )


def payment_status(created: datetime, now: datetime, delay: float) -> tuple[str, datetime]:
    """Status of a domestic VRP at `now`, and when it took that status: Pending until `delay` s after creation."""
    settled = created + timedelta(seconds=delay)
    if now >= settled:
        return SETTLED, settled
    return PENDING, created
