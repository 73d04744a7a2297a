"""The bank's answers as the spec shapes them, checked with pydantic at the boundary.

`models.py` turns these into the typed results the rest of the house reads; this module only says what a
well-formed answer looks like. Bodies are validated from the dicts `models.loads` / `models.loads_echo` made
(fractions already `Decimal`, the echo of our file already dropped), so amounts stay exact and an echoed
`Initiation` can be sent back as it came. A body that does not match raises `ModelError` naming the first
offending path (`Data.Initiation.FileHash: missing`), once, whatever pydantic found.

Leaf rules are the ones the hand-written readers had: a string is a JSON string (no coercion), an integer is a
JSON integer or a string of digits (never a boolean), an amount is a JSON number or decimal string and finite,
a timestamp is ISO 8601 with an offset. Members the processor does not read are ignored.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, StrictStr, ValidationError
from pydantic_core import ErrorDetails


class ModelError(ValueError):
    """A response body lacks a documented field or has the wrong type; `path` names it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


def _integer(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise ValueError("must be an integer")


def _amount(value: object) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
        raise ValueError("must be a decimal amount")
    try:
        result = value if isinstance(value, Decimal) else Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a decimal amount") from None
    if not result.is_finite():
        raise ValueError("must be finite")
    return result


def _timestamp(value: object) -> datetime:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 timestamp") from None
    if moment.tzinfo is None:
        raise ValueError("must carry a UTC offset")
    return moment


def _object_or_none(value: object) -> object:
    # Optional groups the readers always took leniently: anything but an object counts as absent.
    return value if isinstance(value, dict) else None


JsonInteger = Annotated[int, PlainValidator(_integer)]
JsonAmount = Annotated[Decimal, PlainValidator(_amount)]
JsonTimestamp = Annotated[datetime, PlainValidator(_timestamp)]
Strings = tuple[StrictStr, ...]


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)


M = TypeVar("M", bound=_Answer)

_PROBLEMS = {
    "missing": "missing",
    "string_type": "must be a string",
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
}


def _problem(error: ErrorDetails, at: str) -> tuple[str, str]:
    path = at
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    if error["type"] == "value_error":
        return path, str(error.get("ctx", {}).get("error", error["msg"]))
    return path, _PROBLEMS.get(error["type"], error["msg"])


def validate(model: type[M], body: object, at: str = "") -> M:
    """`model` read from a parsed body (found at path `at`); any mismatch becomes one `ModelError` naming the
    first offending path."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        path, problem = _problem(exc.errors(include_url=False)[0], at)
        raise ModelError(path or "body", problem) from None


# -- discovery and tokens ------------------------------------------------------------------------------------


class DiscoveryAnswer(_Answer):
    """E1's discovery document."""

    issuer: StrictStr
    token_endpoint: StrictStr
    authorization_endpoint: StrictStr
    pushed_authorization_request_endpoint: StrictStr
    jwks_uri: StrictStr | None = None
    revocation_endpoint: StrictStr | None = None
    introspection_endpoint: StrictStr | None = None
    token_endpoint_auth_methods_supported: Strings = ()
    grant_types_supported: Strings = ()
    authorization_response_iss_parameter_supported: Any = None


class TokenAnswer(_Answer):
    """A token response (E3, E6, refresh)."""

    access_token: StrictStr
    token_type: StrictStr
    expires_in: JsonInteger
    scope: StrictStr | None = None
    refresh_token: StrictStr | None = None
    state: StrictStr | None = None


class ParAnswer(_Answer):
    """E4's pushed authorization request answer."""

    request_uri: StrictStr
    expires_in: JsonInteger


# -- shared parts --------------------------------------------------------------------------------------------


class MoneyAnswer(_Answer):
    """An `{Amount, Currency}` object."""

    Amount: JsonAmount
    Currency: StrictStr


class _Links(_Answer):
    Self: Any = None


OptionalLinks = Annotated[_Links | None, BeforeValidator(_object_or_none)]


def links_self(links: _Links | None) -> str | None:
    """The `Links.Self` URL when the answer gives one as a string."""
    return links.Self if links is not None and isinstance(links.Self, str) else None


# -- flow A --------------------------------------------------------------------------------------------------


class _FileInitiation(_Answer):
    FileType: StrictStr
    FileHash: StrictStr
    FileReference: StrictStr | None = None
    NumberOfTransactions: JsonInteger
    ControlSum: JsonAmount


class _FileConsentData(_Answer):
    ConsentId: StrictStr
    Status: StrictStr
    Initiation: _FileInitiation
    CreationDateTime: JsonTimestamp
    StatusUpdateDateTime: JsonTimestamp


class FileConsentAnswer(_Answer):
    """A1/A5: a file payment consent."""

    Data: _FileConsentData
    Links: OptionalLinks = None


class FileUploadAnswer(_Answer):
    """A2: what the bank counted in the uploaded file."""

    control_sum: JsonAmount = Field(alias="controlSum")
    number_of_transactions: JsonInteger = Field(alias="numberOfTransactions")


class _MultiAuthorisation(_Answer):
    Status: StrictStr | None = None


class _FilePaymentData(_Answer):
    FilePaymentId: StrictStr
    ConsentId: StrictStr
    Status: StrictStr
    MultiAuthorisation: Annotated[_MultiAuthorisation | None, BeforeValidator(_object_or_none)] = None
    CreationDateTime: JsonTimestamp
    StatusUpdateDateTime: JsonTimestamp
    Initiation: dict[str, Any]


class FilePaymentAnswer(_Answer):
    """A3/A4: a file payment."""

    Data: _FilePaymentData
    Links: OptionalLinks = None


# -- flow B --------------------------------------------------------------------------------------------------


class _PeriodicLimit(_Answer):
    Amount: JsonAmount
    Currency: StrictStr
    PeriodType: StrictStr
    PeriodAlignment: StrictStr


class _ControlParameters(_Answer):
    VRPType: Strings = ()
    PSUAuthenticationMethods: Strings = ()
    ValidFromDateTime: JsonTimestamp | None = None
    ValidToDateTime: JsonTimestamp | None = None
    MaximumIndividualAmount: MoneyAnswer
    PeriodicLimits: tuple[_PeriodicLimit, ...] = ()


class _CreditorAccount(_Answer):
    SchemeName: StrictStr
    Identification: StrictStr
    Name: StrictStr | None = None


class _VrpInitiation(_Answer):
    CreditorAccount: _CreditorAccount


class _Remittance(_Answer):
    Reference: StrictStr | None = None
    Unstructured: StrictStr | None = None


class _VrpConsentData(_Answer):
    ConsentId: StrictStr
    Status: StrictStr
    ControlParameters: _ControlParameters
    Initiation: _VrpInitiation
    RemittanceInformation: Annotated[_Remittance | None, BeforeValidator(_object_or_none)] = None
    CreationDateTime: JsonTimestamp
    StatusUpdateDateTime: JsonTimestamp


class VrpConsentAnswer(_Answer):
    """B1/B3: a domestic VRP consent."""

    Data: _VrpConsentData
    Links: OptionalLinks = None


class _Charge(_Answer):
    ChargeBearer: StrictStr
    Type: StrictStr
    Amount: MoneyAnswer


class _Instruction(_Answer):
    InstructionIdentification: StrictStr | None = None
    EndToEndIdentification: StrictStr | None = None
    InstructedAmount: Annotated[MoneyAnswer | None, BeforeValidator(_object_or_none)] = None


class _DomesticVrpData(_Answer):
    DomesticVRPId: StrictStr
    ConsentId: StrictStr
    Status: StrictStr
    Instruction: Annotated[_Instruction | None, BeforeValidator(_object_or_none)] = None
    Charges: tuple[_Charge, ...] = ()
    CreationDateTime: JsonTimestamp
    StatusUpdateDateTime: JsonTimestamp


class DomesticVrpAnswer(_Answer):
    """B2 and GET domestic-vrps/{id}: a domestic VRP."""

    Data: _DomesticVrpData
    Links: OptionalLinks = None


# -- the file payment report -----------------------------------------------------------------------------------


class ReportLineAnswer(_Answer):
    """One transfer of the sandbox's JSON report (`models.py` reads well-formed lines by a fast path and asks
    this model about the others)."""

    Index: JsonInteger
    DestinationAccount: StrictStr
    Amount: JsonAmount
    Currency: StrictStr
    Status: StrictStr
    ReasonCode: StrictStr | None = None
    Reason: StrictStr | None = None


class _ReportData(_Answer):
    Status: StrictStr | None = None
    # The lines are checked one by one in `models.py` (a measured fast path, see docs/bank-client.md).
    Transactions: list[Any] = []


class ReportAnswer(_Answer):
    """A JSON report-file; without an object `Data` it carries no lines."""

    Data: Annotated[_ReportData | None, BeforeValidator(_object_or_none)] = None
