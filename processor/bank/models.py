"""Typed results of bank calls, read from the spec's response bodies, and JSON with exact decimals.

Readers are pure: they take the parsed body and raise `ModelError(path)` when a documented field is missing or
has the wrong type; the client turns that into a ProtocolError naming the operation and interaction id.
Amounts are `Decimal` (bodies are parsed with `parse_float=Decimal`); nested request objects such as
`Initiation` are kept as parsed, so they can be sent back byte-for-byte equal in value (A3 must repeat the
consent's Initiation exactly).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

SCOPE_PREFIX = "payments:"


class ModelError(ValueError):
    """A response body lacks a documented field or has the wrong type; `path` names it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


# -- JSON ----------------------------------------------------------------------------------------------------


def _default(value: object) -> object:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError("a non-finite Decimal is not JSON")
        return orjson.Fragment(format(value, "f").encode("ascii"))
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")


def dumps(value: object) -> bytes:
    """Compact JSON bytes; a Decimal is written as the exact number it holds, a float is refused."""
    _refuse_floats(value)
    return orjson.dumps(value, default=_default)


def _refuse_floats(value: object) -> None:
    if isinstance(value, float):
        raise TypeError("floats are not allowed in bank bodies; use Decimal for amounts")
    if isinstance(value, Mapping):
        for item in value.values():
            _refuse_floats(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _refuse_floats(item)


def _refuse_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def loads(raw: bytes | str) -> Any:
    """Parse JSON with fractions as Decimal; NaN and Infinity are refused."""
    return json.loads(raw, parse_float=Decimal, parse_constant=_refuse_constant)


# Members that only objects of our file payload have (its rows and their parts, DESIGN.md); the bank's own
# objects use PascalCase names.
_FILE_ROW_MEMBERS = frozenset(
    {"originAccount", "destinationAccount", "transferInfo", "accountNumber", "transactionType"}
)


def _elide_file_rows(pairs: list[tuple[str, Any]]) -> Any:
    for name, _ in pairs:
        if name in _FILE_ROW_MEMBERS:
            return None
    return dict(pairs)


def loads_echo(raw: bytes | str) -> Any:
    """Parse a file consent or file payment answer, whose `Data.Initiation.SupplementaryData` echoes the whole
    file we sent: like `loads`, but each transfer of the file becomes None as soon as it is read, so a
    100,000-transfer echo (about 40 MB) never exists as objects (about 135 MiB). Everything we read from these
    answers is outside the file."""
    return json.loads(raw, parse_float=Decimal, parse_constant=_refuse_constant, object_pairs_hook=_elide_file_rows)


# -- field readers -------------------------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise ModelError(f"{path}.{key}" if path else key, "missing")
    return obj[key]


def obj(parent: Mapping[str, Any], key: str, path: str = "") -> Mapping[str, Any]:
    """A required JSON object field."""
    value = _get(parent, key, path)
    if not isinstance(value, dict):
        raise ModelError(f"{path}.{key}" if path else key, "must be an object")
    return value


def text(parent: Mapping[str, Any], key: str, path: str = "") -> str:
    """A required string field."""
    value = _get(parent, key, path)
    if not isinstance(value, str):
        raise ModelError(f"{path}.{key}" if path else key, "must be a string")
    return value


def opt_text(parent: Mapping[str, Any], key: str, path: str = "") -> str | None:
    """An optional string field."""
    if parent.get(key) is None:
        return None
    return text(parent, key, path)


def integer(parent: Mapping[str, Any], key: str, path: str = "") -> int:
    """A required integer, given as a JSON integer or a string of digits."""
    value = _get(parent, key, path)
    if isinstance(value, bool):
        raise ModelError(f"{path}.{key}" if path else key, "must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise ModelError(f"{path}.{key}" if path else key, "must be an integer")


def amount(parent: Mapping[str, Any], key: str, path: str = "") -> Decimal:
    """A required amount, from a JSON number (parsed as Decimal) or a decimal string."""
    value = _get(parent, key, path)
    where = f"{path}.{key}" if path else key
    if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
        raise ModelError(where, "must be a decimal amount")
    try:
        result = Decimal(value) if not isinstance(value, Decimal) else value
    except InvalidOperation:
        raise ModelError(where, f"{value!r} is not a decimal amount") from None
    if not result.is_finite():
        raise ModelError(where, "must be finite")
    return result


def timestamp(parent: Mapping[str, Any], key: str, path: str = "") -> datetime:
    """A required ISO 8601 timestamp with an offset (or Z)."""
    raw = text(parent, key, path)
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise ModelError(f"{path}.{key}" if path else key, f"{raw!r} is not an ISO 8601 timestamp") from None
    if moment.tzinfo is None:
        raise ModelError(f"{path}.{key}" if path else key, "must carry a UTC offset")
    return moment


def strings(parent: Mapping[str, Any], key: str, path: str = "") -> tuple[str, ...]:
    """A required list of strings."""
    value = _get(parent, key, path)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ModelError(f"{path}.{key}" if path else key, "must be a list of strings")
    return tuple(value)


def _links_self(body: Mapping[str, Any]) -> str | None:
    links = body.get("Links")
    if isinstance(links, dict) and isinstance(links.get("Self"), str):
        return str(links["Self"])
    return None


# -- discovery and tokens ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Discovery:
    """The endpoints and capabilities read from E1."""

    issuer: str
    token_endpoint: str
    authorization_endpoint: str
    pushed_authorization_request_endpoint: str
    jwks_uri: str | None
    revocation_endpoint: str | None
    introspection_endpoint: str | None
    token_endpoint_auth_methods_supported: tuple[str, ...]
    grant_types_supported: tuple[str, ...]
    raw: Mapping[str, Any] = field(repr=False)
    # RFC 9207: the authorization server puts `iss` on every redirect; a redirect without it is then refused.
    authorization_response_iss_parameter_supported: bool = False

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> Discovery:
        """Read the discovery document."""
        return cls(
            issuer=text(body, "issuer"),
            token_endpoint=text(body, "token_endpoint"),
            authorization_endpoint=text(body, "authorization_endpoint"),
            pushed_authorization_request_endpoint=text(body, "pushed_authorization_request_endpoint"),
            jwks_uri=opt_text(body, "jwks_uri"),
            revocation_endpoint=opt_text(body, "revocation_endpoint"),
            introspection_endpoint=opt_text(body, "introspection_endpoint"),
            token_endpoint_auth_methods_supported=strings(body, "token_endpoint_auth_methods_supported")
            if "token_endpoint_auth_methods_supported" in body
            else (),
            grant_types_supported=strings(body, "grant_types_supported") if "grant_types_supported" in body else (),
            raw=body,
            authorization_response_iss_parameter_supported=body.get("authorization_response_iss_parameter_supported")
            is True,
        )


@dataclass(frozen=True)
class TokenResponse:
    """An access token (E3, E6, refresh). Token values stay out of the repr."""

    access_token: str = field(repr=False)
    token_type: str
    expires_in: int
    scope: str
    expires_at: datetime
    refresh_token: str | None = field(default=None, repr=False)
    state: str | None = None
    interaction_id: str = ""

    @property
    def consent_id(self) -> str | None:
        """The consent named by an auth-code token's scope (`payments:<consent_id> openid`)."""
        for item in self.scope.split():
            if item.startswith(SCOPE_PREFIX) and len(item) > len(SCOPE_PREFIX):
                return item[len(SCOPE_PREFIX) :]
        return None

    @classmethod
    def parse(cls, body: Mapping[str, Any], issued_at: datetime, interaction_id: str) -> TokenResponse:
        """Read a token response; `expires_at` counts from when the request was sent."""
        token_type = text(body, "token_type")
        if token_type.lower() != "bearer":
            raise ModelError("token_type", f"expected Bearer, got {token_type!r}")
        expires_in = integer(body, "expires_in")
        if expires_in <= 0:
            raise ModelError("expires_in", "must be positive")
        return cls(
            access_token=text(body, "access_token"),
            token_type=token_type,
            expires_in=expires_in,
            scope=opt_text(body, "scope") or "",
            expires_at=issued_at + timedelta(seconds=expires_in),
            refresh_token=opt_text(body, "refresh_token"),
            state=opt_text(body, "state"),
            interaction_id=interaction_id,
        )


@dataclass(frozen=True)
class ParResponse:
    """E4's answer: the `request_uri` to put in the authorization URL, and when it runs out."""

    request_uri: str
    expires_in: int
    expires_at: datetime
    interaction_id: str = ""

    @classmethod
    def parse(cls, body: Mapping[str, Any], issued_at: datetime, interaction_id: str) -> ParResponse:
        """Read a PAR response."""
        request_uri = text(body, "request_uri")
        if not request_uri:
            raise ModelError("request_uri", "is empty")
        expires_in = integer(body, "expires_in")
        return cls(request_uri, expires_in, issued_at + timedelta(seconds=expires_in), interaction_id)


# -- flow A --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Money:
    """An amount and its ISO 4217 currency."""

    amount: Decimal
    currency: str

    @classmethod
    def parse(cls, body: Mapping[str, Any], path: str) -> Money:
        """Read an `{Amount, Currency}` object."""
        return cls(amount(body, "Amount", path), text(body, "Currency", path))


@dataclass(frozen=True)
class FileConsent:
    """A file payment consent (A1, A5)."""

    consent_id: str
    status: str
    file_type: str
    file_hash: str
    file_reference: str | None
    number_of_transactions: int
    control_sum: Decimal
    creation_date_time: datetime
    status_update_date_time: datetime
    initiation: Mapping[str, Any] = field(repr=False)
    links_self: str | None = None
    interaction_id: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, body: Mapping[str, Any], interaction_id: str) -> FileConsent:
        """Read a file payment consent response."""
        data = obj(body, "Data")
        initiation = obj(data, "Initiation", "Data")
        return cls(
            consent_id=text(data, "ConsentId", "Data"),
            status=text(data, "Status", "Data"),
            file_type=text(initiation, "FileType", "Data.Initiation"),
            file_hash=text(initiation, "FileHash", "Data.Initiation"),
            file_reference=opt_text(initiation, "FileReference", "Data.Initiation"),
            number_of_transactions=integer(initiation, "NumberOfTransactions", "Data.Initiation"),
            control_sum=amount(initiation, "ControlSum", "Data.Initiation"),
            creation_date_time=timestamp(data, "CreationDateTime", "Data"),
            status_update_date_time=timestamp(data, "StatusUpdateDateTime", "Data"),
            initiation=initiation,
            links_self=_links_self(body),
            interaction_id=interaction_id,
            raw=body,
        )


@dataclass(frozen=True)
class FileUpload:
    """A2's answer: what the bank counted in the uploaded file."""

    control_sum: Decimal
    number_of_transactions: int
    interaction_id: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, body: Mapping[str, Any], interaction_id: str) -> FileUpload:
        """Read an upload response (`controlSum`, `numberOfTransactions`)."""
        return cls(amount(body, "controlSum"), integer(body, "numberOfTransactions"), interaction_id, body)


@dataclass(frozen=True)
class FilePayment:
    """A file payment (A3, A4)."""

    file_payment_id: str
    consent_id: str
    status: str
    multi_authorisation_status: str | None
    creation_date_time: datetime
    status_update_date_time: datetime
    initiation: Mapping[str, Any] = field(repr=False)
    links_self: str | None = None
    interaction_id: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, body: Mapping[str, Any], interaction_id: str) -> FilePayment:
        """Read a file payment response."""
        data = obj(body, "Data")
        multi = data.get("MultiAuthorisation")
        multi_status = opt_text(multi, "Status", "Data.MultiAuthorisation") if isinstance(multi, dict) else None
        return cls(
            file_payment_id=text(data, "FilePaymentId", "Data"),
            consent_id=text(data, "ConsentId", "Data"),
            status=text(data, "Status", "Data"),
            multi_authorisation_status=multi_status,
            creation_date_time=timestamp(data, "CreationDateTime", "Data"),
            status_update_date_time=timestamp(data, "StatusUpdateDateTime", "Data"),
            initiation=obj(data, "Initiation", "Data"),
            links_self=_links_self(body),
            interaction_id=interaction_id,
            raw=body,
        )


@dataclass(frozen=True, slots=True)
class ReportLine:
    """One transfer of a file payment report: its outcome and, when rejected, the reason."""

    index: int
    destination_account: str
    amount: Decimal
    currency: str
    status: str
    reason_code: str | None
    reason: str | None


@dataclass(frozen=True)
class FilePaymentReport:
    """The per-transaction report of a file payment.

    The spec does not show the report's format (Open Banking returns it in the bank's own format), so the body
    is kept as received; when it is JSON with `Data.Transactions` (the sandbox's documented format) the lines
    are read into `lines`, otherwise `lines` is empty and `data`/`body` hold what came.
    """

    file_payment_id: str
    content_type: str
    status: str | None
    lines: tuple[ReportLine, ...]
    data: Any = field(repr=False)
    body: bytes = field(repr=False)
    interaction_id: str = ""

    @classmethod
    def parse(cls, file_payment_id: str, content_type: str, body: bytes, interaction_id: str) -> FilePaymentReport:
        """Read a report response of any content type."""
        data: Any = None
        if "json" in content_type.lower():
            try:
                data = loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise ModelError("body", "declared JSON but does not parse") from None
        status: str | None = None
        lines: list[ReportLine] = []
        inner = data.get("Data") if isinstance(data, dict) else None
        if isinstance(inner, dict):
            status = opt_text(inner, "Status", "Data")
            raw_lines = inner.get("Transactions", [])
            if not isinstance(raw_lines, list):
                raise ModelError("Data.Transactions", "must be a list")
            for i, item in enumerate(raw_lines):
                where = f"Data.Transactions[{i}]"
                if not isinstance(item, dict):
                    raise ModelError(where, "must be an object")
                lines.append(
                    ReportLine(
                        index=integer(item, "Index", where),
                        destination_account=text(item, "DestinationAccount", where),
                        amount=amount(item, "Amount", where),
                        currency=text(item, "Currency", where),
                        status=text(item, "Status", where),
                        reason_code=opt_text(item, "ReasonCode", where),
                        reason=opt_text(item, "Reason", where),
                    )
                )
        return cls(file_payment_id, content_type, status, tuple(lines), data, body, interaction_id)


# -- flow B --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeriodicLimit:
    """One entry of a VRP consent's `PeriodicLimits`."""

    amount: Money
    period_type: str
    period_alignment: str


@dataclass(frozen=True)
class CreditorAccount:
    """The creditor account of a VRP consent or instruction."""

    scheme_name: str
    identification: str
    name: str | None


@dataclass(frozen=True)
class VrpConsent:
    """A domestic VRP consent (B1, B3)."""

    consent_id: str
    status: str
    vrp_types: tuple[str, ...]
    psu_authentication_methods: tuple[str, ...]
    valid_from: datetime | None
    valid_to: datetime | None
    maximum_individual_amount: Money
    periodic_limits: tuple[PeriodicLimit, ...]
    creditor_account: CreditorAccount
    remittance_reference: str | None
    remittance_unstructured: str | None
    creation_date_time: datetime
    status_update_date_time: datetime
    initiation: Mapping[str, Any] = field(repr=False)
    links_self: str | None = None
    interaction_id: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, body: Mapping[str, Any], interaction_id: str) -> VrpConsent:
        """Read a VRP consent response."""
        data = obj(body, "Data")
        cp = obj(data, "ControlParameters", "Data")
        initiation = obj(data, "Initiation", "Data")
        creditor = obj(initiation, "CreditorAccount", "Data.Initiation")
        limits_raw = cp.get("PeriodicLimits", [])
        if not isinstance(limits_raw, list):
            raise ModelError("Data.ControlParameters.PeriodicLimits", "must be a list")
        limits: list[PeriodicLimit] = []
        for i, item in enumerate(limits_raw):
            where = f"Data.ControlParameters.PeriodicLimits[{i}]"
            if not isinstance(item, dict):
                raise ModelError(where, "must be an object")
            limits.append(
                PeriodicLimit(
                    Money.parse(item, where), text(item, "PeriodType", where), text(item, "PeriodAlignment", where)
                )
            )
        remittance = data.get("RemittanceInformation")
        remittance = remittance if isinstance(remittance, dict) else {}
        return cls(
            consent_id=text(data, "ConsentId", "Data"),
            status=text(data, "Status", "Data"),
            vrp_types=strings(cp, "VRPType", "Data.ControlParameters") if "VRPType" in cp else (),
            psu_authentication_methods=strings(cp, "PSUAuthenticationMethods", "Data.ControlParameters")
            if "PSUAuthenticationMethods" in cp
            else (),
            valid_from=timestamp(cp, "ValidFromDateTime", "Data.ControlParameters")
            if "ValidFromDateTime" in cp
            else None,
            valid_to=timestamp(cp, "ValidToDateTime", "Data.ControlParameters") if "ValidToDateTime" in cp else None,
            maximum_individual_amount=Money.parse(
                obj(cp, "MaximumIndividualAmount", "Data.ControlParameters"),
                "Data.ControlParameters.MaximumIndividualAmount",
            ),
            periodic_limits=tuple(limits),
            creditor_account=CreditorAccount(
                text(creditor, "SchemeName", "Data.Initiation.CreditorAccount"),
                text(creditor, "Identification", "Data.Initiation.CreditorAccount"),
                opt_text(creditor, "Name", "Data.Initiation.CreditorAccount"),
            ),
            remittance_reference=opt_text(remittance, "Reference", "Data.RemittanceInformation"),
            remittance_unstructured=opt_text(remittance, "Unstructured", "Data.RemittanceInformation"),
            creation_date_time=timestamp(data, "CreationDateTime", "Data"),
            status_update_date_time=timestamp(data, "StatusUpdateDateTime", "Data"),
            initiation=initiation,
            links_self=_links_self(body),
            interaction_id=interaction_id,
            raw=body,
        )


@dataclass(frozen=True)
class Charge:
    """One entry of a domestic VRP's `Charges`."""

    charge_bearer: str
    type: str
    amount: Money


@dataclass(frozen=True)
class DomesticVrp:
    """A domestic VRP (B2, GET domestic-vrps/{id})."""

    domestic_vrp_id: str
    consent_id: str
    status: str
    instructed_amount: Money | None
    instruction_identification: str | None
    end_to_end_identification: str | None
    charges: tuple[Charge, ...]
    creation_date_time: datetime
    status_update_date_time: datetime
    links_self: str | None = None
    interaction_id: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, body: Mapping[str, Any], interaction_id: str) -> DomesticVrp:
        """Read a domestic VRP response."""
        data = obj(body, "Data")
        instruction = data.get("Instruction")
        instruction = instruction if isinstance(instruction, dict) else {}
        instructed = instruction.get("InstructedAmount")
        charges_raw = data.get("Charges", [])
        if not isinstance(charges_raw, list):
            raise ModelError("Data.Charges", "must be a list")
        charges: list[Charge] = []
        for i, item in enumerate(charges_raw):
            where = f"Data.Charges[{i}]"
            if not isinstance(item, dict):
                raise ModelError(where, "must be an object")
            charges.append(
                Charge(
                    text(item, "ChargeBearer", where),
                    text(item, "Type", where),
                    Money.parse(obj(item, "Amount", where), f"{where}.Amount"),
                )
            )
        return cls(
            domestic_vrp_id=text(data, "DomesticVRPId", "Data"),
            consent_id=text(data, "ConsentId", "Data"),
            status=text(data, "Status", "Data"),
            instructed_amount=Money.parse(instructed, "Data.Instruction.InstructedAmount")
            if isinstance(instructed, dict)
            else None,
            instruction_identification=opt_text(instruction, "InstructionIdentification", "Data.Instruction"),
            end_to_end_identification=opt_text(instruction, "EndToEndIdentification", "Data.Instruction"),
            charges=tuple(charges),
            creation_date_time=timestamp(data, "CreationDateTime", "Data"),
            status_update_date_time=timestamp(data, "StatusUpdateDateTime", "Data"),
            links_self=_links_self(body),
            interaction_id=interaction_id,
            raw=body,
        )
