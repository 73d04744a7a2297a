"""Typed results of bank calls, read from the spec's response bodies, and JSON with exact decimals.

Readers are pure: they validate the parsed body with the pydantic models of `answers.py` and raise
`ModelError(path)` when a documented field is missing or has the wrong type; the client turns that into a
ProtocolError naming the operation and interaction id.
Amounts are `Decimal` (bodies are parsed as `json.loads(..., parse_float=Decimal)` parses them, by msgspec's decoder
where it can: `processor.domain.exact_json`; a smaller file echo with the file skipped by that decoder:
`_echo_without_file`); nested request objects such as
`Initiation` are kept as parsed, so they can be sent back byte-for-byte equal in value (A3 must repeat the
consent's Initiation exactly).
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

import ijson
import msgspec
import orjson

from processor.bank import answers
from processor.bank.answers import ModelError as ModelError  # callers catch it from here
from processor.bank.answers import links_self, validate
from processor.domain.exact_json import loads_decimal, refuse_constant
from processor.domain.money import holds_float

SCOPE_PREFIX = "payments:"


# -- JSON ----------------------------------------------------------------------------------------------------


def _default(value: object) -> object:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError("a non-finite Decimal is not JSON")
        return orjson.Fragment(format(value, "f").encode("ascii"))
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")


def dumps(value: object) -> bytes:
    """Compact JSON bytes; a Decimal is written as the exact number it holds, a float is refused."""
    if holds_float(value):
        raise TypeError("floats are not allowed in bank bodies; use Decimal for amounts")
    return orjson.dumps(value, default=_default)


def loads(raw: bytes | bytearray | str) -> Any:
    """Parse JSON with fractions as Decimal; NaN and Infinity are refused."""
    return loads_decimal(raw, constants=False)


# A file consent or payment answer echoes, in `Data.Initiation.SupplementaryData`, the whole file we sent. It is read
# without building that file (`_echo_without_file`: msgspec finds the file's bytes, the rest is parsed). An answer
# that way cannot read, of at least this many bytes, is read as a stream of parser events (ijson's C parser) with
# the file skipped: `json.loads` would first decode the whole body into a str (for 100,000 transfers 39 MiB, 78 MiB
# when a name holds a character past U+00FF) beside the 39 MiB of bytes; streamed, the reading peaks at about 1 MiB,
# at 10x the CPU of the msgspec reading (0.76 s against 0.076 s for 100,000 transfers: benchmarks/bank_echo.py). A
# smaller one is parsed whole by `loads`.
ECHO_STREAM_BYTES: Final = 1 << 20

_ECHOED_FILE: Final = "Data.Initiation.SupplementaryData"
_INSIDE_FILE: Final = _ECHOED_FILE + "."
# The events at the file's own prefix that are not its value: its members' names and its closing.
_FILE_FRAME: Final = frozenset({"map_key", "end_map", "end_array"})


def loads_echo(raw: bytes | bytearray) -> Any:
    """Parse a file consent or file payment answer without the file it echoes: like `loads`, but
    `Data.Initiation.SupplementaryData` reads as None. Everything we read from these answers is outside the file;
    a large answer never exists whole as text or as objects (see `ECHO_STREAM_BYTES`)."""
    fast = _echo_without_file(raw)
    if fast is not None:
        return fast
    if len(raw) >= ECHO_STREAM_BYTES:
        return _streamed_without_file(raw)
    body = loads(raw)
    _initiation_without_file(body)
    return body


def _initiation_without_file(body: Any) -> dict[str, Any] | None:
    """`Data.Initiation` of a parsed answer, its `SupplementaryData` (the echoed file) set to None; None when the
    answer has no such object."""
    data = body.get("Data") if isinstance(body, dict) else None
    initiation = data.get("Initiation") if isinstance(data, dict) else None
    if not isinstance(initiation, dict):
        return None
    if "SupplementaryData" in initiation:
        initiation["SupplementaryData"] = None
    return initiation


class _EchoedInitiation(msgspec.Struct):
    SupplementaryData: msgspec.Raw = msgspec.Raw()


class _EchoedData(msgspec.Struct):
    Initiation: _EchoedInitiation | None = None


class _EchoedAnswer(msgspec.Struct):
    Data: _EchoedData | None = None


# Finds where the echoed file's text is in an answer: every other member is skipped (checked, not built), the file
# itself is kept as the span of bytes it is.
_ECHO_FRAME: Final = msgspec.json.Decoder(_EchoedAnswer)


def _echo_without_file(raw: bytes | bytearray) -> Any | None:
    """`loads_echo` without building the file the answer echoes: the file's bytes found by msgspec (which checks
    the whole answer's JSON, building nothing but this frame), checked to be UTF-8, replaced by `null`, and what is
    left parsed by `loads`. The one answer read that `loads` refuses: a number of more than 4,300 digits inside the
    file, which is never converted. 0.09 ms for a month-end batch's 40 KB answer (0.12 when names hold characters
    past U+00FF), where orjson built it all in 0.16-0.17 ms (`benchmarks/bank_echo.py`), and no allocations but
    what is left and a piece of the file's check. None, for the other readings, when msgspec refuses the answer
    or finds no file, or when the file's bytes occur twice in the answer or are not UTF-8 (what is replaced must
    be that one place, and UTF-8 as `loads` requires)."""
    try:
        frame = _ECHO_FRAME.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return None
    initiation = frame.Data.Initiation if frame.Data is not None else None
    file = initiation.SupplementaryData if initiation is not None else None
    size = 0 if file is None else memoryview(file).nbytes
    if file is None or not size:
        return None
    start = raw.find(file)
    if start < 0 or raw.find(file, start + 1) >= 0 or not _utf8(raw, start, start + size):
        return None
    # msgspec checked the rest's JSON; what `json` alone refuses in it (an integer of more than 4,300 digits) is
    # raised here as `loads` raises it: the stream (ijson) must never see such a number (see `_streamed_without_file`).
    body = loads(bytes(raw[:start]) + b"null" + bytes(raw[start + size :]))
    _initiation_without_file(body)
    return body


_UTF8_PIECE: Final = 1 << 14


def _utf8(raw: bytes | bytearray, start: int, end: int) -> bool:
    """Whether `raw[start:end]` is UTF-8, as `loads` requires of the whole answer (msgspec does not check the
    bytes of the member it skips). Decoded 16 KiB at a time, so the file is never one text (39 MiB for 100,000
    transfers; 0.003 ms for a month-end batch's 40 KB when names are Latin-1, 0.017 when past it)."""
    if raw.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(raw)[start:end]
    try:
        for offset in range(0, len(view), _UTF8_PIECE):
            decoder.decode(view[offset : offset + _UTF8_PIECE])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


# An integer of more digits than Python converts from text (`sys.get_int_max_str_digits()`, 4,300 by default):
# `json` refuses it, and ijson's C parser (3.6, `use_float=False`) crashes the process on it. Matched only at the
# start of a run of digits, so the search is linear.
_TOO_LONG_INTEGER: Final = re.compile(rb"(?<![0-9])[0-9]{%d}" % (sys.get_int_max_str_digits() + 1))


def _streamed_without_file(raw: bytes | bytearray) -> Any:
    """`loads_echo` of a large answer: the parser's events built into objects, those of the file skipped. An
    answer with an integer `json` would refuse is refused before the parser sees it (see `_TOO_LONG_INTEGER`)."""
    if _TOO_LONG_INTEGER.search(raw):
        raise ValueError(f"not JSON: an integer of more than {sys.get_int_max_str_digits()} digits")
    builder = ijson.ObjectBuilder()
    event = builder.event
    try:
        for prefix, kind, value in ijson.parse(_Reader(raw), use_float=False):
            if prefix == _ECHOED_FILE:
                if kind not in _FILE_FRAME:
                    event("null", None)  # the file's value (its opening, or a scalar) is kept as null
            elif not prefix.startswith(_INSIDE_FILE):
                event(kind, value)
    except ijson.JSONError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    return builder.value


class _Reader:
    """A file over bytes or a bytearray, for ijson (which takes bytes or a file: `BytesIO` would copy a bytearray)."""

    def __init__(self, raw: bytes | bytearray) -> None:
        self._view = memoryview(raw)
        self._at = 0

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes from where the last read ended (all that is left when `size` is negative)."""
        end = len(self._view) if size < 0 else self._at + size
        chunk = self._view[self._at : end]
        self._at += len(chunk)
        return bytes(chunk)


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
        doc = validate(answers.DiscoveryAnswer, body)
        return cls(
            issuer=doc.issuer,
            token_endpoint=doc.token_endpoint,
            authorization_endpoint=doc.authorization_endpoint,
            pushed_authorization_request_endpoint=doc.pushed_authorization_request_endpoint,
            jwks_uri=doc.jwks_uri,
            revocation_endpoint=doc.revocation_endpoint,
            introspection_endpoint=doc.introspection_endpoint,
            token_endpoint_auth_methods_supported=doc.token_endpoint_auth_methods_supported,
            grant_types_supported=doc.grant_types_supported,
            raw=body,
            authorization_response_iss_parameter_supported=doc.authorization_response_iss_parameter_supported is True,
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
        token = validate(answers.TokenAnswer, body)
        if token.token_type.lower() != "bearer":
            raise ModelError("token_type", f"expected Bearer, got {token.token_type!r}")
        if token.expires_in <= 0:
            raise ModelError("expires_in", "must be positive")
        return cls(
            access_token=token.access_token,
            token_type=token.token_type,
            expires_in=token.expires_in,
            scope=token.scope or "",
            expires_at=issued_at + timedelta(seconds=token.expires_in),
            refresh_token=token.refresh_token,
            state=token.state,
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
        par = validate(answers.ParAnswer, body)
        if not par.request_uri:
            raise ModelError("request_uri", "is empty")
        return cls(par.request_uri, par.expires_in, issued_at + timedelta(seconds=par.expires_in), interaction_id)


# -- flow A --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Money:
    """An amount and its ISO 4217 currency."""

    amount: Decimal
    currency: str

    @classmethod
    def of(cls, money: answers.MoneyAnswer) -> Money:
        """The amount of a validated `{Amount, Currency}` object."""
        return cls(money.Amount, money.Currency)


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
        answer = validate(answers.FileConsentAnswer, body)
        data, initiation = answer.Data, answer.Data.Initiation
        return cls(
            consent_id=data.ConsentId,
            status=data.Status,
            file_type=initiation.FileType,
            file_hash=initiation.FileHash,
            file_reference=initiation.FileReference,
            number_of_transactions=initiation.NumberOfTransactions,
            control_sum=initiation.ControlSum,
            creation_date_time=data.CreationDateTime,
            status_update_date_time=data.StatusUpdateDateTime,
            initiation=body["Data"]["Initiation"],  # as it came, to be sent back in A3
            links_self=links_self(answer.Links),
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
        answer = validate(answers.FileUploadAnswer, body)
        return cls(answer.control_sum, answer.number_of_transactions, interaction_id, body)


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
        answer = validate(answers.FilePaymentAnswer, body)
        data = answer.Data
        return cls(
            file_payment_id=data.FilePaymentId,
            consent_id=data.ConsentId,
            status=data.Status,
            multi_authorisation_status=data.MultiAuthorisation.Status if data.MultiAuthorisation else None,
            creation_date_time=data.CreationDateTime,
            status_update_date_time=data.StatusUpdateDateTime,
            initiation=body["Data"]["Initiation"],  # as it came, not a copy
            links_self=links_self(answer.Links),
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
    are read into `lines` (and `data` is None, `body` empty: for 100,000 lines neither the parsed tree nor the
    14 MB body stays beside them), otherwise `lines` is empty and `data`/`body` hold what came (`data` with any
    plainly well-formed line object read as a `ReportLine`).
    """

    file_payment_id: str
    content_type: str
    status: str | None
    lines: tuple[ReportLine, ...]
    data: Any = field(repr=False)
    body: bytes | bytearray = field(repr=False)
    interaction_id: str = ""

    @classmethod
    def parse(
        cls, file_payment_id: str, content_type: str, body: bytes | bytearray, interaction_id: str
    ) -> FilePaymentReport:
        """Read a report response of any content type."""
        data: Any = None
        if "json" in content_type.lower():
            try:
                data = _report_loads(body)
                if type(data) is ReportLine or (isinstance(data, dict) and type(data.get("Data")) is ReportLine):
                    data = loads(body)  # the report or its `Data` has a line's members: read as plain objects
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise ModelError("body", "declared JSON but does not parse") from None
        status: str | None = None
        lines: tuple[ReportLine, ...] = ()
        report = validate(answers.ReportAnswer, data).Data if isinstance(data, dict) else None
        if report is not None:
            status = report.Status
            lines = tuple(
                item
                if type(item) is ReportLine
                else _plain_line(item) or _checked_line(item, f"Data.Transactions[{i}]")
                for i, item in enumerate(report.Transactions)
            )
        if lines:  # read into `lines`: neither the parsed tree nor the body (14 MB for 100,000 lines) is kept
            return cls(file_payment_id, content_type, status, lines, None, b"", interaction_id)
        return cls(file_payment_id, content_type, status, lines, data, body, interaction_id)


def _report_loads(raw: bytes | bytearray) -> Any:
    """`loads` of a report, each plainly well-formed line object made a `ReportLine` as soon as it is read: parsed
    into dicts first, the 100,000-line report's objects took 68 MiB beside its lines (benchmarks/big_memory.py).
    The same parse as `loads`, the last of duplicate keys counting; an object with a line's members is made a
    `ReportLine` wherever it is, but only `Data.Transactions` is read for lines (a report or a `Data` so made is
    parsed again as plain objects by `FilePaymentReport.parse`)."""
    return json.loads(raw, parse_float=Decimal, parse_constant=refuse_constant, object_pairs_hook=_line_or_object)


def _line_or_object(pairs: list[tuple[str, Any]]) -> Any:
    value = dict(pairs)
    return _plain_line(value) or value


def _plain_line(item: Any) -> ReportLine | None:
    """A report line read without pydantic when it is plainly well-formed (JSON number amount, integer index,
    strings), else None. The fast path for the 100,000-line report: pydantic took 1.6 times as long
    (benchmarks/bank_answers.py); whatever this does not accept goes to `ReportLineAnswer`, which decides."""
    if type(item) is not dict:
        return None
    index, amount, code, reason = item.get("Index"), item.get("Amount"), item.get("ReasonCode"), item.get("Reason")
    account, currency, status = item.get("DestinationAccount"), item.get("Currency"), item.get("Status")
    if (
        type(index) is not int
        or type(amount) is not Decimal
        or not amount.is_finite()
        or type(account) is not str
        or type(currency) is not str
        or type(status) is not str
        or not (code is None or type(code) is str)
        or not (reason is None or type(reason) is str)
    ):
        return None
    # A currency and a status repeat on every line: one shared str each instead of one per line (100,000 lines:
    # about 10 MiB less while the results are made from them).
    return ReportLine(index, account, amount, _shared(currency), _shared(status), code, reason)


_SHARED: dict[str, str] = {}
_SHARED_MAX: Final = 256  # distinct currencies and statuses kept: a bank that varies them costs no more than this


def _shared(text: str) -> str:
    """One str for each of the few values that repeat on every report line. Not `sys.intern`: Python 3.12 never
    frees an interned str, and these come from the bank."""
    kept = _SHARED.get(text)
    if kept is not None:
        return kept
    if len(_SHARED) < _SHARED_MAX:
        _SHARED[text] = text
    return text


def _checked_line(item: Any, where: str) -> ReportLine:
    line = validate(answers.ReportLineAnswer, item, where)
    return ReportLine(
        line.Index, line.DestinationAccount, line.Amount, line.Currency, line.Status, line.ReasonCode, line.Reason
    )


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
        answer = validate(answers.VrpConsentAnswer, body)
        data, cp = answer.Data, answer.Data.ControlParameters
        creditor, remittance = data.Initiation.CreditorAccount, data.RemittanceInformation
        return cls(
            consent_id=data.ConsentId,
            status=data.Status,
            vrp_types=cp.VRPType,
            psu_authentication_methods=cp.PSUAuthenticationMethods,
            valid_from=cp.ValidFromDateTime,
            valid_to=cp.ValidToDateTime,
            maximum_individual_amount=Money.of(cp.MaximumIndividualAmount),
            periodic_limits=tuple(
                PeriodicLimit(Money(limit.Amount, limit.Currency), limit.PeriodType, limit.PeriodAlignment)
                for limit in cp.PeriodicLimits
            ),
            creditor_account=CreditorAccount(creditor.SchemeName, creditor.Identification, creditor.Name),
            remittance_reference=remittance.Reference if remittance else None,
            remittance_unstructured=remittance.Unstructured if remittance else None,
            creation_date_time=data.CreationDateTime,
            status_update_date_time=data.StatusUpdateDateTime,
            initiation=body["Data"]["Initiation"],  # as it came
            links_self=links_self(answer.Links),
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
        answer = validate(answers.DomesticVrpAnswer, body)
        data, instruction = answer.Data, answer.Data.Instruction
        instructed = instruction.InstructedAmount if instruction else None
        return cls(
            domestic_vrp_id=data.DomesticVRPId,
            consent_id=data.ConsentId,
            status=data.Status,
            instructed_amount=Money.of(instructed) if instructed else None,
            instruction_identification=instruction.InstructionIdentification if instruction else None,
            end_to_end_identification=instruction.EndToEndIdentification if instruction else None,
            charges=tuple(Charge(c.ChargeBearer, c.Type, Money.of(c.Amount)) for c in data.Charges),
            creation_date_time=data.CreationDateTime,
            status_update_date_time=data.StatusUpdateDateTime,
            links_self=links_self(answer.Links),
            interaction_id=interaction_id,
            raw=body,
        )
