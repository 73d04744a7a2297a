"""JSON with exact decimals: numbers with a fraction parse to `Decimal` and are written back verbatim."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import orjson


def _default(value: object) -> object:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError("non-finite decimal")
        return orjson.Fragment(format(value, "f").encode())
    raise TypeError(f"cannot serialise {type(value).__name__}")


def dumps(value: object, *, sort_keys: bool = False) -> bytes:
    """Serialise to compact JSON bytes; a `Decimal` is written as the number it holds."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_SORT_KEYS if sort_keys else None)


def _reject_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


_INT64 = range(-(2**63), 2**63)


def _parse_int(text: str) -> int | Decimal:
    # orjson (our writer) handles 64-bit integers only; bigger ones stay exact as Decimal.
    value = int(text)
    return value if value in _INT64 else Decimal(text)


def loads(raw: bytes | str) -> Any:
    """Parse JSON; fractions (and integers beyond 64 bits) become `Decimal`, NaN and Infinity are refused."""
    return json.loads(raw, parse_float=Decimal, parse_int=_parse_int, parse_constant=_reject_constant)
