"""File payments, pure part: the file payload's checks, its canonical hash and the upload's verification.

Our reading of the spec (DESIGN.md, "Readings"): the client builds the payload with empty
`transferInfo.reference` values; `FileHash` = base64(SHA-256(RFC 8785 canonical JSON of that payload)).
After the consent exists the client writes the consent id into every reference and uploads. The bank
requires every reference to equal the consent id, blanks them, compares every record with the consent's
`SupplementaryData`, the count, the control sum and the recomputed hash.

Numbers arrive as `int` or `Decimal` (sandbox.jsonutil.loads), never as float, so amounts stay exact.
No I/O here: the routes in sandbox/files.py map `CheckError` to the spec's error shapes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from json.encoder import encode_basestring as _encode_string
from typing import Any

FILE_TYPE = "UK.OBIE.PaymentInitiation.4.0"
MAX_AMOUNT = Decimal("9999999999999.99")
MAX_FILE_REFERENCE = 40  # Open Banking v3.1 Max40Text
MAX_CONCEPT = 140
MAX_TEXT = 70
MAX_EMAIL = 254
MAX_DEPTH = 64

ACCOUNT_TYPES = frozenset({"MONETARY", "SAVINGS"})
DEBIT_TYPES = frozenset({"D"})
EXECUTION_TYPES = frozenset({"ONLINE"})

INITIATION_FIELDS = ("SupplementaryData", "FileType", "FileHash", "FileReference", "NumberOfTransactions", "ControlSum")
ORIGIN_FIELDS = ("accountNumber", "accountType", "currency")
DESTINATION_FIELDS = ("accountNumber", "accountType", "currency", "email")
TRANSFER_FIELDS = (
    "transactionType",
    "debitType",
    "transactionAmount",
    "executionType",
    "concept",
    "reference",
)
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("originAccount", ORIGIN_FIELDS),
    ("destinationAccount", DESTINATION_FIELDS),
    ("transferInfo", TRANSFER_FIELDS),
)
TRANSACTION_FIELDS = tuple(name for name, _ in GROUPS)

_ACCOUNT = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,33}")
_CURRENCY = re.compile(r"[A-Z]{3}")
_EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s.]+(\.[^@\s.]+)+")
_DIGITS = re.compile(r"[0-9]{1,15}")


class CheckError(ValueError):
    """A payload problem: `path` names the field (dotted, `[i]` for array positions, 0-based)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class FileSummary:
    """What a checked payload adds up to."""

    count: int
    control_sum: Decimal
    currency: str
    origin_account: str


# --- RFC 8785 (JSON Canonicalization Scheme) -------------------------------------------------------------


def _string(text: str) -> str:
    # RFC 8785 3.2.2.2: only '"', '\\' and C0 controls are escaped (the two-character forms where JSON has
    # them, else \u00xx in lowercase hex); everything else is written as is. The standard library's
    # non-ASCII string encoder follows exactly these rules (checked against the `rfc8785` package in tests).
    return _encode_string(text)


def es_number(value: int | Decimal | float) -> str:
    """A number as ECMAScript's Number.prototype.toString writes it (RFC 8785 3.2.2.3).

    Decimals are written from their exact digits (trailing zeros dropped), so `Decimal("1500.50")` gives
    `1500.5` and `Decimal("100.00")` gives `100`. A float goes through its shortest round-trip digits,
    which are the digits ECMAScript picks. Exact for every value a double holds exactly.
    """
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(value, int):
        if -(10**21) < value < 10**21:
            return str(value)
        value = Decimal(value)
    elif isinstance(value, float):
        value = Decimal(repr(value))
    if not value.is_finite():
        raise ValueError("NaN and Infinity have no JSON form")
    sign, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite decimals have an integer exponent
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    if not digits:
        return "0"  # zero, including negative zero
    exponent += len(digit_tuple) - len(digits)
    k = len(digits)
    n = exponent + k  # ECMAScript's n: the position of the decimal point relative to the digits
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        body = "0." + "0" * -n + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
        body = f"{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"
    return "-" + body if sign else body


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


# Objects of one payload share a few key sets (every transfer has the same members), so the sorted order of
# a key set, with each name already in its JSON form, is worked out once and reused. Bounded in entries and
# in their size: a hostile payload with many distinct or very wide key sets only stops adding to it.
_MEMBER_ORDERS: dict[tuple[object, ...], tuple[tuple[str, str], ...]] = {}
_MEMBER_ORDERS_MAX = 4096
_MEMBER_ORDERS_WIDEST = 64


def _members(value: Mapping[Any, Any]) -> tuple[tuple[str, str], ...]:
    """The keys of an object in RFC 8785 order (3.2.3: by UTF-16 code units), each with its JSON form."""
    keys = tuple(value)
    ordered = _MEMBER_ORDERS.get(keys)
    if ordered is not None:
        return ordered
    names: list[str] = []
    for key in keys:
        if not isinstance(key, str):
            raise TypeError("object keys must be strings")
        names.append(key)
    ordered = tuple((name, _string(name)) for name in sorted(names, key=_utf16_key))
    if len(keys) <= _MEMBER_ORDERS_WIDEST and len(_MEMBER_ORDERS) < _MEMBER_ORDERS_MAX:
        _MEMBER_ORDERS[keys] = ordered
    return ordered


def _write(value: object, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"nesting deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        out.append(_string(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int | Decimal | float):
        out.append(es_number(value))
    elif isinstance(value, Mapping):
        out.append("{")
        separator = ""
        for key, name in _members(value):
            out.append(separator)
            out.append(name)
            out.append(":")
            _write(value[key], out, depth + 1)
            separator = ","
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out, depth + 1)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} has no JSON form")


def canonical_json(value: object) -> bytes:
    """RFC 8785 canonical JSON bytes of a parsed JSON value.

    Raises ValueError for values JCS cannot express (lone surrogates, NaN, nesting past MAX_DEPTH) and
    TypeError for non-JSON types.
    """
    out: list[str] = []
    try:
        _write(value, out, 0)
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate, which is not Unicode text") from None
    except RecursionError:
        raise ValueError("nesting too deep") from None


def payload_hash(payload: object) -> str:
    """base64(SHA-256(canonical JSON)) of a file payload, the form `FileHash` takes."""
    return base64.b64encode(hashlib.sha256(canonical_json(payload)).digest()).decode("ascii")


def blank_references(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a (checked) payload with every `transferInfo.reference` set to ""."""
    transactions = [
        {**tx, "transferInfo": {**tx["transferInfo"], "reference": ""}} for tx in payload["data"]["transaction"]
    ]
    return {**payload, "data": {**payload["data"], "transaction": transactions}}


# --- field checks ----------------------------------------------------------------------------------------


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def exact_object(value: object, path: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """`value` as an object with exactly `fields` (all required, nothing else), else CheckError."""
    if not isinstance(value, dict):
        raise CheckError(path or "body", "must be a JSON object")
    if len(value) != len(fields) or any(name not in value for name in fields):
        for name in fields:
            if name not in value:
                raise CheckError(_join(path, name), "is required")
        for name in value:
            if name not in fields:
                raise CheckError(
                    _join(path, str(name)), f"is not a field of this object (allowed: {', '.join(fields)})"
                )
    return value


def _text(value: object, path: str, *, max_length: int, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise CheckError(path, "must be a JSON string")
    if not value and not allow_empty:
        raise CheckError(path, "must not be empty")
    if len(value) > max_length:
        raise CheckError(path, f"must be at most {max_length} characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise CheckError(path, "must be Unicode text (lone surrogate found)") from None
    return value


def _pattern(value: object, path: str, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str):
        raise CheckError(path, "must be a JSON string")
    if pattern.fullmatch(value) is None:
        raise CheckError(path, f"must be {what}")
    return value


def _one_of(value: object, path: str, allowed: frozenset[str]) -> str:
    if not isinstance(value, str):
        raise CheckError(path, "must be a JSON string")
    if value not in allowed:
        raise CheckError(path, f"must be one of {', '.join(sorted(allowed))}")
    return value


def _number(value: object, path: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise CheckError(path, "must be a JSON number")
    number = Decimal(value)
    if not number.is_finite():
        raise CheckError(path, "must be a finite number")
    return number


def decimal_places(value: Decimal) -> int:
    """How many decimals the value needs (trailing zeros do not count: 1500.50 needs 1)."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    if exponent >= 0:
        return 0
    trailing = 0
    for digit in reversed(digits):
        if digit != 0 or trailing >= -exponent:
            break
        trailing += 1
    return max(0, -exponent - trailing)


def _amount(value: object, path: str) -> Decimal:
    amount = _number(value, path)
    if amount <= 0:
        raise CheckError(path, "must be a positive amount")
    if amount > MAX_AMOUNT:
        raise CheckError(path, f"must not exceed {MAX_AMOUNT}")
    if decimal_places(amount) > 2:
        raise CheckError(path, "must have at most 2 decimals")
    return amount


def _origin_key(origin: Mapping[str, Any]) -> tuple[str, str, str]:
    return origin["accountNumber"], origin["accountType"], origin["currency"]


def check_payload(payload: object, path: str, reference: str, max_transactions: int) -> FileSummary:
    """Check a file payload `{"data": {"transaction": [...]}}` field by field.

    `reference` is what every `transferInfo.reference` must hold: "" at consent time, the consent id in
    an upload. One origin account and one currency per file. Raises CheckError naming the first problem.
    """
    top = exact_object(payload, path, ("data",))
    data = exact_object(top["data"], _join(path, "data"), ("transaction",))
    list_path = _join(path, "data.transaction")
    transactions = data["transaction"]
    if not isinstance(transactions, list):
        raise CheckError(list_path, "must be a JSON array")
    if not transactions:
        raise CheckError(list_path, "must hold at least one transaction")
    if len(transactions) > max_transactions:
        raise CheckError(list_path, f"holds {len(transactions)} transactions; at most {max_transactions} per file")
    total = Decimal(0)
    first_origin: tuple[str, str, str] | None = None
    for i, tx in enumerate(transactions):
        at = f"{list_path}[{i}]"
        record = exact_object(tx, at, TRANSACTION_FIELDS)
        origin = exact_object(record["originAccount"], f"{at}.originAccount", ORIGIN_FIELDS)
        dest = exact_object(record["destinationAccount"], f"{at}.destinationAccount", DESTINATION_FIELDS)
        info = exact_object(record["transferInfo"], f"{at}.transferInfo", TRANSFER_FIELDS)

        _pattern(origin["accountNumber"], f"{at}.originAccount.accountNumber", _ACCOUNT, "1 to 34 letters, digits or -")
        _one_of(origin["accountType"], f"{at}.originAccount.accountType", ACCOUNT_TYPES)
        currency = _pattern(origin["currency"], f"{at}.originAccount.currency", _CURRENCY, "an ISO 4217 code")
        _pattern(
            dest["accountNumber"], f"{at}.destinationAccount.accountNumber", _ACCOUNT, "1 to 34 letters, digits or -"
        )
        _one_of(dest["accountType"], f"{at}.destinationAccount.accountType", ACCOUNT_TYPES)
        _pattern(dest["currency"], f"{at}.destinationAccount.currency", _CURRENCY, "an ISO 4217 code")
        if dest["currency"] != currency:
            raise CheckError(f"{at}.destinationAccount.currency", f"must equal the origin currency {currency}")
        email = _text(dest["email"], f"{at}.destinationAccount.email", max_length=MAX_EMAIL)
        if _EMAIL.fullmatch(email) is None:
            raise CheckError(f"{at}.destinationAccount.email", "must be an e-mail address")

        _text(info["transactionType"], f"{at}.transferInfo.transactionType", max_length=MAX_TEXT)
        _one_of(info["debitType"], f"{at}.transferInfo.debitType", DEBIT_TYPES)
        total += _amount(info["transactionAmount"], f"{at}.transferInfo.transactionAmount")
        _one_of(info["executionType"], f"{at}.transferInfo.executionType", EXECUTION_TYPES)
        _text(info["concept"], f"{at}.transferInfo.concept", max_length=MAX_CONCEPT, allow_empty=True)
        ref = info["reference"]
        if not isinstance(ref, str):
            raise CheckError(f"{at}.transferInfo.reference", "must be a JSON string")
        if ref != reference:
            want = "must be empty at consent time" if not reference else f"must be the consent id {reference}"
            raise CheckError(f"{at}.transferInfo.reference", want)

        key = _origin_key(origin)
        if first_origin is None:
            first_origin = key
        elif key != first_origin:
            raise CheckError(
                f"{at}.originAccount", "must be the same origin account (number, type, currency) in every transaction"
            )
    assert first_origin is not None
    return FileSummary(len(transactions), total, first_origin[2], first_origin[0])


def check_initiation(initiation: object, max_transactions: int, path: str = "Data.Initiation") -> FileSummary:
    """Check a consent request's `Data.Initiation`: every field, its type and value, count, sum and hash."""
    init = exact_object(initiation, path, INITIATION_FIELDS)
    file_type = init["FileType"]
    if not isinstance(file_type, str):
        raise CheckError(f"{path}.FileType", "must be a JSON string")
    if file_type != FILE_TYPE:
        raise CheckError(f"{path}.FileType", f"must be {FILE_TYPE}")
    _text(init["FileReference"], f"{path}.FileReference", max_length=MAX_FILE_REFERENCE)
    declared_hash = init["FileHash"]
    if not isinstance(declared_hash, str):
        raise CheckError(f"{path}.FileHash", "must be a JSON string")
    try:
        digest = base64.b64decode(declared_hash, validate=True)
    except (binascii.Error, ValueError):
        digest = b""
    if len(digest) != 32:
        raise CheckError(f"{path}.FileHash", "must be the base64 form of a 32-byte SHA-256 digest")
    count = init["NumberOfTransactions"]
    if not isinstance(count, str):
        raise CheckError(f"{path}.NumberOfTransactions", "must be a JSON string")
    if _DIGITS.fullmatch(count) is None:
        raise CheckError(f"{path}.NumberOfTransactions", "must be a string of digits")
    control_sum = _number(init["ControlSum"], f"{path}.ControlSum")

    summary = check_payload(init["SupplementaryData"], f"{path}.SupplementaryData", "", max_transactions)
    if count != str(summary.count):
        raise CheckError(
            f"{path}.NumberOfTransactions",
            f'must be "{summary.count}", the number of transactions in SupplementaryData',
        )
    if control_sum != summary.control_sum:
        raise CheckError(
            f"{path}.ControlSum",
            f"must equal the sum of transactionAmount ({es_number(summary.control_sum)}), got {es_number(control_sum)}",
        )
    computed = payload_hash(init["SupplementaryData"])
    if declared_hash != computed:
        raise CheckError(
            f"{path}.FileHash",
            f"does not match base64(SHA-256(RFC 8785 JSON of SupplementaryData)), which is {computed}",
        )
    return summary


# --- the upload ------------------------------------------------------------------------------------------


def _show(value: object) -> str:
    text = canonical_json(value).decode("utf-8") if isinstance(value, str | int | Decimal) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def verify_upload(upload: object, initiation: Mapping[str, Any], consent_id: str, max_transactions: int) -> FileSummary:
    """Verify an uploaded file against the consent's `Initiation`; raise CheckError on the first discrepancy.

    Checks, in order: the payload's own format with every reference equal to `consent_id`; the number of
    records; each record field by field against `SupplementaryData` (amounts compared as decimals); the
    control sum; the hash of the upload with its references blanked against `FileHash`.
    """
    summary = check_payload(upload, "", consent_id, max_transactions)
    assert isinstance(upload, dict)
    sent = upload["data"]["transaction"]
    agreed = initiation["SupplementaryData"]["data"]["transaction"]
    if len(sent) != len(agreed) or str(summary.count) != initiation["NumberOfTransactions"]:
        raise CheckError(
            "data.transaction",
            f"holds {len(sent)} records; the consent agreed NumberOfTransactions {initiation['NumberOfTransactions']}",
        )
    for i, (mine, theirs) in enumerate(zip(sent, agreed, strict=True)):
        for group, fields in GROUPS:
            for name in fields:
                if group == "transferInfo" and name == "reference":
                    continue
                got, want = mine[group][name], theirs[group][name]
                if got != want:
                    raise CheckError(
                        f"data.transaction[{i}].{group}.{name}", f"is {_show(got)}; the consent agreed {_show(want)}"
                    )
    agreed_sum = Decimal(initiation["ControlSum"])
    if summary.control_sum != agreed_sum:
        raise CheckError(
            "data.transaction",
            f"amounts add up to {es_number(summary.control_sum)};"
            f" the consent agreed ControlSum {es_number(agreed_sum)}",
        )
    computed = payload_hash(blank_references(upload))
    if computed != initiation["FileHash"]:
        raise CheckError(
            "data",
            f"hashes to {computed} with references blanked; the consent agreed FileHash {initiation['FileHash']}",
        )
    return summary


# --- payment request against the consent -----------------------------------------------------------------


def _diff(sent: object, agreed: object) -> list[str] | None:
    """Path segments (innermost first) to the first difference, or None. Numbers compare as decimals."""
    if isinstance(agreed, dict):
        if not isinstance(sent, dict):
            return []
        for key in agreed:
            if key not in sent:
                return [f".{key}"]
        for key in sent:
            if key not in agreed:
                return [f".{key}"]
        for key, value in agreed.items():
            inner = _diff(sent[key], value)
            if inner is not None:
                inner.append(f".{key}")
                return inner
        return None
    if isinstance(agreed, list):
        if not isinstance(sent, list):
            return []
        if len(sent) != len(agreed):
            return [f"[{min(len(sent), len(agreed))}]"]
        for i, (a, b) in enumerate(zip(sent, agreed, strict=True)):
            inner = _diff(a, b)
            if inner is not None:
                inner.append(f"[{i}]")
                return inner
        return None
    if isinstance(agreed, bool) or agreed is None:
        return None if sent is agreed else []
    if isinstance(agreed, int | Decimal):
        if isinstance(sent, bool) or not isinstance(sent, int | Decimal) or sent != agreed:
            return []
        return None
    if isinstance(agreed, str):
        return None if isinstance(sent, str) and sent == agreed else []
    return None if sent == agreed else []


def first_difference(sent: object, agreed: object, path: str) -> str | None:
    """The path of the first place where `sent` differs from `agreed` (numbers as decimals), or None."""
    segments = _diff(sent, agreed)
    if segments is None:
        return None
    return path + "".join(reversed(segments))
