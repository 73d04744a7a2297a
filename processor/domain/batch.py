"""The payroll batch: the input topic's event (DESIGN.md, "Contracts") as typed, immutable objects.

Input shape (a plain dict from Avro, or JSON text); keys not listed are ignored so the schema can grow:

    {
      "batch_id": "erp-2024-11-0001",              non-empty string, the ERP's unique id
      "integration": "bank-gt",                    non-empty string, which bank configuration
      "file_reference": "PAYROLL-2024-11",         string
      "origin_account": {"account_number": "...", "account_type": "MONETARY", "currency": "GTQ"},
      "transactions": [
        {"destination_account": {"account_number": "...", "account_type": "SAVINGS", "currency": "GTQ",
                                 "email": "..."},
         "amount": 1500.50,                        JSON number or decimal string; Decimal in Python, never float
         "concept": "Payroll November",
         "employee_reference": "E-0042"}           optional (null or absent)
      ],
      "requested_at": "2024-11-30T12:00:00.000Z",  ISO 8601 with a UTC offset (or an aware datetime)
      "source": "erp-x",                           string
      "execute_on": "2024-11-30"                   optional (null or absent): the day to pay on (ISO date)
    }

This is the Avro schema `schemas/payroll_batches.v2.avsc` read by fastavro (amounts arrive as `Decimal`,
`requested_at` as an aware datetime, `execute_on` as a `date`; v1 records have no `execute_on`). In JSON,
`origin_account.account_type` may be left out (`MONETARY`) and so may `destination_account.account_type` (`SAVINGS`).

Parsing checks shape and types only and reports every problem it finds at once (`BatchParseError.problems`,
each with a path such as `transactions[3].amount`). Business rules (amount sign, decimals, currencies, account
and e-mail formats, duplicates, limits) belong to `processor.domain.validation`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from sys import intern
from typing import Any, Final

from processor.domain.exact_json import loads_decimal

__all__ = [
    "DEFAULT_DESTINATION_ACCOUNT_TYPE",
    "DEFAULT_ORIGIN_ACCOUNT_TYPE",
    "BatchParseError",
    "OriginAccount",
    "ParseProblem",
    "PayrollBatch",
    "Transfer",
    "batch_from_dict",
    "batch_from_json",
    "batch_from_stored",
    "iso_day",
    "loads_exact",
]

DEFAULT_ORIGIN_ACCOUNT_TYPE: Final = "MONETARY"
DEFAULT_DESTINATION_ACCOUNT_TYPE: Final = "SAVINGS"

# A decimal written as text: optional minus, digits, optional fraction. No exponent, spaces, '_' or NaN, all of
# which `Decimal()` would otherwise accept.
_DECIMAL_TEXT: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True, slots=True)
class OriginAccount:
    """The account every transfer of the batch is debited from."""

    number: str
    type: str
    currency: str


@dataclass(frozen=True, slots=True)
class Transfer:
    """One transaction of the batch: a credit to one destination account."""

    account_number: str
    account_type: str
    currency: str
    email: str
    amount: Decimal
    concept: str
    employee_reference: str | None = None


@dataclass(frozen=True, slots=True)
class PayrollBatch:
    """A payroll batch as received from the ERP (parsed, not yet validated)."""

    batch_id: str
    integration: str
    file_reference: str
    origin: OriginAccount
    transactions: tuple[Transfer, ...]
    requested_at: datetime
    source: str
    # The day the file payment is to be made on, in the integration's time zone (None: as soon as approved).
    execute_on: date | None = None


@dataclass(frozen=True, slots=True)
class ParseProblem:
    """One shape or type problem, located by a path into the input (`transactions[3].amount`)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class BatchParseError(ValueError):
    """The input is not a payroll batch; `problems` lists every problem found."""

    def __init__(self, problems: list[ParseProblem]) -> None:
        self.problems: tuple[ParseProblem, ...] = tuple(problems)
        shown = "; ".join(str(p) for p in self.problems[:10])
        more = f"; and {len(self.problems) - 10} more" if len(self.problems) > 10 else ""
        super().__init__(f"invalid payroll batch: {shown}{more}")


# --- JSON ----------------------------------------------------------------------------------------------------


def _refuse_constant(text: str) -> Any:
    raise ValueError(f"{text} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r} in a JSON object")
            seen.add(key)
    return out


def loads_exact(raw: str | bytes) -> Any:
    """Parse JSON reading every fraction as `Decimal` (never float); NaN/Infinity and duplicate keys refused."""
    return json.loads(raw, parse_float=Decimal, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)


_ROW_KEYS: Final = frozenset({"destination_account", "amount", "concept", "employee_reference"})


def _rows_as_transfers(pairs: list[tuple[str, Any]]) -> Any:
    # A well-formed transfer row becomes its Transfer as soon as it is parsed, so a 100,000-row batch never exists
    # as 100,000 dicts too (the parse's peak halves). Only objects of row keys alone are taken: anything else, or a
    # row with a problem, stays a dict for `batch_from_dict` to read and report with its path.
    out = _unique_keys(pairs)
    if "destination_account" in out and out.keys() <= _ROW_KEYS:
        return _plain_transfer(out) or out
    return out


def batch_from_json(raw: str | bytes) -> PayrollBatch:
    """Parse a batch from JSON text (numbers read as `Decimal`); raises `BatchParseError`."""
    try:
        data = json.loads(
            raw, parse_float=Decimal, parse_constant=_refuse_constant, object_pairs_hook=_rows_as_transfers
        )
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise BatchParseError([ParseProblem("$", f"not valid JSON: {exc}")]) from exc
    return batch_from_dict(data)


# A stored batch's text up to this size is read by msgspec as plain objects (`batch_from_stored`); a larger one row
# by row by `batch_from_json`, so 100,000 rows never exist as dicts.
STORED_AS_OBJECTS_CHARS: Final = 1 << 20


def batch_from_stored(raw: str) -> PayrollBatch:
    """`batch_from_json` of a text the intake accepted and stored (it passed that reading then: no repeated key,
    no NaN), by msgspec's decoder (`exact_json`) when not large: 260 against 413 us for 100 transfers, read again
    at each step whose payload is no longer cached (A3 and the completion at month end)."""
    if len(raw) > STORED_AS_OBJECTS_CHARS:
        return batch_from_json(raw)
    try:
        data = loads_decimal(raw, constants=False)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BatchParseError([ParseProblem("$", f"not valid JSON: {exc}")]) from exc
    return batch_from_dict(data)


# --- dict -> objects -----------------------------------------------------------------------------------------


class _Reader:
    """Collects problems while reading fields, so one pass reports all of them."""

    def __init__(self) -> None:
        self.problems: list[ParseProblem] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(ParseProblem(path, message))

    def mapping(self, data: object, path: str) -> Mapping[str, Any] | None:
        if isinstance(data, Mapping):
            return data
        if type(data) is Transfer:  # a row-shaped object parsed early where no row belongs: read as it was
            return _row_dict(data)
        self.fail(path, f"expected an object, got {_kind(data)}")
        return None

    def text(self, data: Mapping[str, Any], key: str, path: str, *, default: str | None = None) -> str:
        value = data.get(key)
        if value is None:
            if default is not None:
                return default
            self.fail(_join(path, key), "is required")
            return ""
        if not isinstance(value, str):
            self.fail(_join(path, key), f"expected a string, got {_kind(value)}")
            return ""
        return value

    def required_text(self, data: Mapping[str, Any], key: str, path: str) -> str:
        value = self.text(data, key, path)
        if key in data and isinstance(data[key], str) and not value.strip():
            self.fail(_join(path, key), "must not be empty")
        return value

    def optional_text(self, data: Mapping[str, Any], key: str, path: str) -> str | None:
        value = data.get(key)
        if value is None or isinstance(value, str):
            return value
        self.fail(_join(path, key), f"expected a string or null, got {_kind(value)}")
        return None

    def amount(self, data: Mapping[str, Any], key: str, path: str) -> Decimal:
        value = data.get(key)
        where = _join(path, key)
        if value is None:
            self.fail(where, "is required")
        elif isinstance(value, Decimal):
            if value.is_finite():
                return value
            self.fail(where, f"must be a finite number, got {value}")
        elif isinstance(value, bool):
            self.fail(where, "expected a decimal number, got boolean")
        elif isinstance(value, int):
            return Decimal(value)
        elif isinstance(value, str):
            if _DECIMAL_TEXT.fullmatch(value):
                try:
                    return Decimal(value)
                except InvalidOperation:  # pragma: no cover - the pattern only lets valid text through
                    pass
            self.fail(where, "expected a decimal number such as 1500.50 (digits, optional '.' and fraction)")
        elif isinstance(value, float):
            self.fail(where, "a float is refused for money: send a JSON number parsed as Decimal or a decimal string")
        else:
            self.fail(where, f"expected a decimal number, got {_kind(value)}")
        return Decimal(0)

    def timestamp(self, data: Mapping[str, Any], key: str, path: str) -> datetime:
        value = data.get(key)
        where = _join(path, key)
        parsed: datetime | None = None
        if isinstance(value, datetime):
            parsed = value
        elif isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError:
                self.fail(where, "expected an ISO 8601 timestamp such as 2024-11-30T12:00:00.000Z")
                return _EPOCH
        elif value is None:
            self.fail(where, "is required")
            return _EPOCH
        else:
            self.fail(where, f"expected an ISO 8601 timestamp string, got {_kind(value)}")
            return _EPOCH
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            self.fail(where, "must carry a UTC offset (for example Z or +00:00)")
            return _EPOCH
        return parsed.astimezone(UTC)

    def day(self, data: Mapping[str, Any], key: str, path: str) -> date | None:
        value = data.get(key)
        if value is None:
            return None
        if isinstance(value, date) and not isinstance(value, datetime):
            return value
        parsed = iso_day(value) if isinstance(value, str) else None
        if parsed is not None:
            return parsed
        self.fail(_join(path, key), f"expected a date such as 2024-11-30 (YYYY-MM-DD) or null, got {value!r}"[:200])
        return None


_ISO_DATE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def iso_day(text: str) -> date | None:
    """A calendar day written `YYYY-MM-DD` (as `execute_on` is), or None when `text` is not one."""
    if not _ISO_DATE.fullmatch(text):
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:  # 2026-02-30
        return None


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: object) -> str:
    names = {type(None): "null", bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    return names.get(type(value), "object" if isinstance(value, Mapping | Transfer) else type(value).__name__)


def _row_dict(transfer: Transfer) -> dict[str, Any]:
    destination = {
        "account_number": transfer.account_number,
        "account_type": transfer.account_type,
        "currency": transfer.currency,
        "email": transfer.email,
    }
    return {
        "destination_account": destination,
        "amount": transfer.amount,
        "concept": transfer.concept,
        "employee_reference": transfer.employee_reference,
    }


def _plain_transfer(item: object) -> Transfer | None:
    """The usual well-formed row, read without bookkeeping; None sends the row to the problem-collecting reader."""
    if type(item) is not dict:
        return None
    dest = item.get("destination_account")
    if type(dest) is not dict:
        return None
    number, currency, email = dest.get("account_number"), dest.get("currency"), dest.get("email")
    account_type = dest.get("account_type")
    if account_type is None:
        account_type = DEFAULT_DESTINATION_ACCOUNT_TYPE
    amount, concept = item.get("amount"), item.get("concept")
    reference = item.get("employee_reference")
    # An int, or a decimal string as the reader takes it (a stored batch's amounts are strings).
    if type(amount) is int or (type(amount) is str and _DECIMAL_TEXT.fullmatch(amount)):
        amount = Decimal(amount)
    if not (
        type(number) is str
        and type(account_type) is str
        and type(currency) is str
        and type(email) is str
        and type(concept) is str
        and (reference is None or type(reference) is str)
        and type(amount) is Decimal
        and amount.is_finite()
    ):
        return None
    return Transfer(number, intern(account_type), intern(currency), email, amount, concept, reference)


def _transfer(reader: _Reader, item: object, path: str) -> Transfer | None:
    if type(item) is Transfer:  # read while parsing (`_rows_as_transfers`)
        return item
    plain = _plain_transfer(item)
    if plain is not None:
        return plain
    row = reader.mapping(item, path)
    if row is None:
        return None
    before = len(reader.problems)
    dest_path = _join(path, "destination_account")
    dest = reader.mapping(row.get("destination_account"), dest_path)
    number = account_type = currency = email = ""
    if dest is not None:
        number = reader.text(dest, "account_number", dest_path)
        account_type = reader.text(dest, "account_type", dest_path, default=DEFAULT_DESTINATION_ACCOUNT_TYPE)
        currency = reader.text(dest, "currency", dest_path)
        email = reader.text(dest, "email", dest_path)
    amount = reader.amount(row, "amount", path)
    concept = reader.text(row, "concept", path)
    employee_reference = reader.optional_text(row, "employee_reference", path)
    if dest is None or len(reader.problems) != before:
        return None
    # Types and currencies repeat on every row: one shared object each saves memory and cache misses later.
    return Transfer(number, intern(account_type), intern(currency), email, amount, concept, employee_reference)


def batch_from_dict(data: object) -> PayrollBatch:
    """Build a `PayrollBatch` from a plain dict (JSON or Avro record); raises `BatchParseError` listing all problems.

    Amounts must be `Decimal`, `int` or decimal strings; a `float` amount is refused.
    """
    reader = _Reader()
    top = reader.mapping(data, "$")
    if top is None:
        raise BatchParseError(reader.problems)
    batch_id = reader.required_text(top, "batch_id", "")
    integration = reader.required_text(top, "integration", "")
    file_reference = reader.text(top, "file_reference", "")
    source = reader.text(top, "source", "")
    requested_at = reader.timestamp(top, "requested_at", "")
    execute_on = reader.day(top, "execute_on", "")

    origin = None
    origin_data = reader.mapping(top.get("origin_account"), "origin_account")
    if origin_data is not None:
        origin = OriginAccount(
            reader.text(origin_data, "account_number", "origin_account"),
            reader.text(origin_data, "account_type", "origin_account", default=DEFAULT_ORIGIN_ACCOUNT_TYPE),
            reader.text(origin_data, "currency", "origin_account"),
        )

    transfers: list[Transfer] = []
    items = top.get("transactions")
    if not isinstance(items, list | tuple):
        reader.fail("transactions", f"expected an array, got {_kind(items)}" if items is not None else "is required")
    else:
        for index, item in enumerate(items):
            transfer = _transfer(reader, item, f"transactions[{index}]")
            if transfer is not None:
                transfers.append(transfer)

    if reader.problems or origin is None:
        raise BatchParseError(reader.problems)
    return PayrollBatch(
        batch_id=batch_id,
        integration=integration,
        file_reference=file_reference,
        origin=origin,
        transactions=tuple(transfers),
        requested_at=requested_at,
        source=source,
        execute_on=execute_on,
    )
