"""Value conversions shared by the repositories: money, JSON documents, column kinds.

Money is `Decimal` with at most two decimals, checked on the way in (the store never rounds) and read back
with exactly two decimals from either engine. JSON documents are written with every `Decimal` as a string
(amounts as strings) and a float refused; they are read back with fractions as `Decimal`, so no amount ever
passes through a float.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

import orjson

from processor.domain.exact_json import loads_decimal
from processor.domain.money import holds_float
from processor.domain.time import iso_ms
from processor.store.db import to_datetime, to_decimal

Kind = Literal["text", "int", "ts", "money", "json", "date"]
CENT = Decimal("0.01")
MONEY_LIMIT = Decimal(10) ** 16  # NUMERIC(18,2)


def money(value: Decimal) -> Decimal:
    """Validate an amount for storage: a finite Decimal with at most 2 decimals that fits NUMERIC(18,2)."""
    if not isinstance(value, Decimal):
        raise TypeError(f"amounts must be Decimal, not {type(value).__name__}")
    if not value.is_finite():
        raise ValueError("amount must be finite")
    quantized = value.quantize(CENT)
    if quantized != value:
        raise ValueError(f"amount {value} has more than 2 decimals")
    if abs(quantized) >= MONEY_LIMIT:
        raise ValueError(f"amount {value} does not fit NUMERIC(18,2)")
    return quantized


def read_money(value: object) -> Decimal | None:
    """A stored amount back as a Decimal with two decimals."""
    amount = to_decimal(value)
    return None if amount is None else amount.quantize(CENT)


def _default(value: object) -> object:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError("non-finite decimal")
        return format(value, "f")
    if isinstance(value, datetime):
        return iso_ms(value)
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"cannot store {type(value).__name__} in JSON")


def dump_json(value: object) -> str:
    """Compact JSON text; `Decimal` as a string, `datetime` as ISO 8601 ms UTC, floats refused."""
    if holds_float(value):
        raise TypeError("JSON documents in the store must not hold floats; use Decimal or str")
    return orjson.dumps(value, default=_default, option=orjson.OPT_PASSTHROUGH_DATETIME).decode()


def load_json(text: str | bytes) -> Any:
    """Parse stored JSON; fractions become Decimal."""
    return loads_decimal(text)


def json_text(document: str | bytes | Mapping[str, Any] | list[Any]) -> str:
    """A document given as JSON text/bytes (kept verbatim after a validity check) or as a value (dumped)."""
    if isinstance(document, bytes):
        document = document.decode("utf-8")
    if isinstance(document, str):
        try:
            orjson.loads(document)  # refuse text that is not JSON (fast, and the parse is thrown away)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        return document
    return dump_json(document)


def sha256_hex(text: str) -> str:
    """Hex SHA-256 of text (UTF-8): used to tell whether a duplicate carries the same document."""
    return hashlib.sha256(text.encode()).hexdigest()


def encode(kind: Kind, value: object) -> object:
    """A Python value as the parameter for a column of this kind (None stays NULL)."""
    if value is None:
        return None
    if kind == "ts":
        if not isinstance(value, datetime):
            raise TypeError(f"expected datetime, got {type(value).__name__}")
        return value
    if kind == "money":
        if not isinstance(value, Decimal):
            raise TypeError(f"expected Decimal, got {type(value).__name__}")
        return money(value)
    if kind == "json":
        return dump_json(value)
    if kind == "date":  # ISO text on both engines
        if not isinstance(value, date) or isinstance(value, datetime):
            raise TypeError(f"expected date, got {type(value).__name__}")
        return value.isoformat()
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"expected int, got {type(value).__name__}")
        return value
    if not isinstance(value, str):
        raise TypeError(f"expected str, got {type(value).__name__}")
    return value


def decode(kind: Kind, value: object) -> object:
    """A stored column value back as the Python value of its kind."""
    if value is None:
        return None
    if kind == "ts":
        return to_datetime(value)
    if kind == "money":
        return read_money(value)
    if kind == "json":
        return load_json(value if isinstance(value, str | bytes) else json.dumps(value))
    if kind == "date":
        return value if isinstance(value, date) else date.fromisoformat(str(value))
    if kind == "int":
        return int(value) if isinstance(value, int | str | Decimal) else value
    return value
