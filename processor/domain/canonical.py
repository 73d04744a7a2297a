"""RFC 8785 JSON Canonicalization Scheme (JCS) for the file payload's data.

Accepted values: `dict` (string keys), `list`/`tuple`, `str`, `int`, `bool`, `None` and `Decimal`. A `float` is
refused: money never travels as a float here, and a float has no exact decimal meaning to preserve.

JCS writes numbers the way ECMAScript prints an IEEE 754 double (`Number.prototype.toString`). A `Decimal` or an
`int` is therefore written as ECMAScript would print the double nearest to it, and only when that text reads back
as the very same decimal value; anything else (e.g. `Decimal("0.1000000000000000001")`, `2**60`) raises
`CanonicalizationError` instead of silently changing the amount. Amounts with at most 2 decimals and at most 15
significant digits always pass and come out as their normalised decimal text (`Decimal("1500.50")` -> `1500.5`,
`Decimal("100.00")` -> `100`).

Strings are escaped as RFC 8785 section 3.2.2.2 says: `"` and `\\` backslash-escaped; U+0008, U+0009, U+000A, U+000C,
U+000D as `\\b \\t \\n \\f \\r`; the other C0 controls as `\\u00xx` (lower-case hex); everything else, DEL and
non-ASCII included, as literal UTF-8. Lone surrogates are refused (JCS needs valid Unicode). Object keys are
sorted by their UTF-16 code units.

Speed: `canonicalize` walks the value once to check types, then lets orjson write the bytes. That is sound because
(1) orjson's string escaping equals the one above for every code point (checked once at import, see
`ORJSON_STRINGS_MATCH`, and by a unit test over the whole Unicode range); (2) orjson sorts keys by code point,
which equals UTF-16 order whenever all keys are ASCII; (3) numbers reach orjson only as `orjson.Fragment` text
made by `number_text` or as ints inside the exactly-representable range. Whenever one of these does not hold the
pure-Python encoder (`canonicalize_pure`, also the reference implementation) does the work.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Final

import orjson

__all__ = [
    "ORJSON_STRINGS_MATCH",
    "CanonicalizationError",
    "canonicalize",
    "canonicalize_pure",
    "escape_string",
    "number_text",
    "string_literal",
]

# Integers in this range are exact doubles and ECMAScript prints them as plain digits.
_SAFE_INT: Final = 2**53


class CanonicalizationError(ValueError):
    """A value that JCS cannot represent exactly (non-finite or inexact number, lone surrogate, bad key)."""


# --- numbers -------------------------------------------------------------------------------------------------


def _es_layout(negative: bool, digits: str, n: int) -> str:
    """Lay out `0.digits x 10**n` (no leading/trailing zeros in `digits`) as ECMAScript Number::toString does."""
    k = len(digits)
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        exp = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        body = f"{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp)}"
    return "-" + body if negative else body


def _es_double_text(value: float) -> str:
    """ECMAScript's text for a finite double, from Python's shortest round-trip `repr` (same digits)."""
    if value == 0:
        return "0"  # -0 prints as 0 too
    text = repr(value)
    negative = text.startswith("-")
    if negative:
        text = text[1:]
    mantissa, _, exp_text = text.partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    all_digits = int_part + frac_part
    stripped = all_digits.lstrip("0")
    point = len(int_part) + (int(exp_text) if exp_text else 0) - (len(all_digits) - len(stripped))
    return _es_layout(negative, stripped.rstrip("0"), point)


def number_text(value: Decimal | int) -> str:
    """The JCS text of a number, refusing any value that the text would not represent exactly.

    Raises `CanonicalizationError` for NaN, infinities, values outside the double range and values whose nearest
    double prints as a different decimal; `TypeError` for `bool`, `float` and other types.
    """
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise TypeError(f"not a JCS number: {type(value).__name__}")
    if isinstance(value, int):
        if -_SAFE_INT <= value <= _SAFE_INT:
            return str(int(value))
        exact = Decimal(value)
    else:
        if not value.is_finite():
            raise CanonicalizationError(f"{value} is not a finite number")
        exact = value
    as_double = float(exact)
    if math.isinf(as_double):
        raise CanonicalizationError(f"{exact} is outside the range of a JSON number (IEEE 754 double)")
    text = _es_double_text(as_double)
    if Decimal(text) != exact:
        raise CanonicalizationError(f"{exact} cannot be represented exactly as a JSON number (would become {text})")
    return text


# --- strings -------------------------------------------------------------------------------------------------

_NEEDS_ESCAPE: Final = re.compile(r'["\\\x00-\x1f]')
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_SHORT_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_ESCAPES: Final = {chr(c): _SHORT_ESCAPES.get(chr(c), f"\\u{c:04x}") for c in range(0x20)} | _SHORT_ESCAPES


def _escape_match(match: re.Match[str]) -> str:
    return _ESCAPES[match.group()]


def escape_string(value: str) -> str:
    """The JCS-escaped inside of a string literal (no surrounding quotes); refuses lone surrogates."""
    if _SURROGATE.search(value) is not None:
        raise CanonicalizationError("string contains a lone surrogate (not valid Unicode)")
    if _NEEDS_ESCAPE.search(value) is None:
        return value
    return _NEEDS_ESCAPE.sub(_escape_match, value)


def string_literal(value: str) -> str:
    """The JCS string literal, quotes included."""
    return '"' + escape_string(value) + '"'


# --- the pure encoder (reference and fallback) ---------------------------------------------------------------


def _key_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _encode(value: object, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(string_literal(value))
    elif isinstance(value, int | Decimal):
        out.append(number_text(value))
    elif isinstance(value, dict):
        keys = list(value)
        for key in keys:
            if not isinstance(key, str):
                raise CanonicalizationError(f"object keys must be strings, got {type(key).__name__}")
        keys.sort(key=None if all(key.isascii() for key in keys) else _key_order)
        out.append("{")
        for position, key in enumerate(keys):
            if position:
                out.append(",")
            out.append(string_literal(key))
            out.append(":")
            _encode(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for position, item in enumerate(value):
            if position:
                out.append(",")
            _encode(item, out)
        out.append("]")
    elif isinstance(value, float):
        raise TypeError("float is refused: use Decimal for numbers (a float never carries an amount)")
    else:
        raise TypeError(f"cannot canonicalize {type(value).__name__}")


def canonicalize_pure(value: object) -> bytes:
    """JCS bytes of `value`, written entirely in Python (slower; the reference for the fast path)."""
    out: list[str] = []
    _encode(value, out)
    return "".join(out).encode("utf-8")


# --- the fast path -------------------------------------------------------------------------------------------


def _orjson_strings_match() -> bool:
    """Whether orjson escapes strings exactly as JCS does (probe: every escape class and some non-ASCII)."""
    probe = "".join(chr(c) for c in range(0x80)) + "\u00e9\u2028\u2029\ufeff\uffff\U0001f600"
    try:
        return orjson.dumps(probe) == string_literal(probe).encode("utf-8")
    except orjson.JSONEncodeError:
        return False


ORJSON_STRINGS_MATCH: Final[bool] = _orjson_strings_match()

_PLAIN_TYPES: Final = frozenset({str, bool, type(None)})


def _fast_path_ok(value: object) -> bool:
    """True when orjson's output for `value` is its JCS form; False means: use the pure encoder."""
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        kind = type(item)
        if kind in _PLAIN_TYPES or kind is Decimal:
            continue
        if kind is int and isinstance(item, int):
            if not -_SAFE_INT <= item <= _SAFE_INT:
                return False
        elif kind is dict and isinstance(item, dict):
            for key, child in item.items():
                if type(key) is not str or not key.isascii():
                    return False
                push(child)
        elif (kind is list or kind is tuple) and isinstance(item, list | tuple):
            stack.extend(item)
        else:
            return False  # floats, subclasses, anything else: the pure encoder decides (and refuses)
    return True


def _fragment(value: object) -> orjson.Fragment:
    if isinstance(value, Decimal):
        return orjson.Fragment(number_text(value))
    raise TypeError(f"cannot canonicalize {type(value).__name__}")


def canonicalize(value: object) -> bytes:
    """The RFC 8785 canonical JSON bytes of `value` (see the module docstring for what is accepted)."""
    if ORJSON_STRINGS_MATCH and _fast_path_ok(value):
        try:
            return orjson.dumps(value, default=_fragment, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            pass  # e.g. a lone surrogate: the pure encoder raises the precise error
    return canonicalize_pure(value)
