"""RFC 8785 canonical JSON: numbers, strings, key order, refusals; the `rfc8785` package is the oracle."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.domain.canonical import (
    ORJSON_STRINGS_MATCH,
    CanonicalizationError,
    canonicalize,
    canonicalize_pure,
    escape_string,
    number_text,
    string_literal,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("1500.50"), "1500.5"),
        (Decimal("100.00"), "100"),
        (Decimal("0.10"), "0.1"),
        (Decimal("0.01"), "0.01"),
        (Decimal("-0"), "0"),
        (Decimal("0E-10"), "0"),
        (Decimal("1E+2"), "100"),
        (Decimal("-12.340"), "-12.34"),
        (Decimal("9999999999999.99"), "9999999999999.99"),
        (Decimal("0.000001"), "0.000001"),
        (Decimal("0.0000001"), "1e-7"),
        (Decimal("1E+21"), "1e+21"),
        (Decimal("123456789012345680000"), "123456789012345680000"),
        (Decimal("1.5E+300"), "1.5e+300"),
        (0, "0"),
        (-42, "-42"),
        (2**53, "9007199254740992"),
        (-(2**53), "-9007199254740992"),
    ],
)
def test_number_text_prints_like_ecmascript(value: Decimal | int, text: str) -> None:
    assert number_text(value) == text


@pytest.mark.parametrize(
    "value",
    [
        Decimal("0.1000000000000000001"),  # 19 significant digits: the nearest double prints as 0.1
        Decimal("12345678901234567.89"),
        Decimal("1E+400"),  # beyond the double range
        Decimal("1E-400"),  # underflows to 0
        Decimal("NaN"),
        Decimal("Infinity"),
        Decimal("-Infinity"),
        2**53 + 1,
        2**60,  # exact double, but ECMAScript prints 1152921504606847000
        Decimal(0.1),  # noqa: RUF032 - the binary value's full expansion is not what "0.1" means
    ],
)
def test_number_text_refuses_inexact_or_non_finite(value: Decimal | int) -> None:
    with pytest.raises(CanonicalizationError):
        number_text(value)
    with pytest.raises(CanonicalizationError):
        canonicalize([value])


@pytest.mark.parametrize("value", [1.5, True, "1", None])
def test_number_text_refuses_other_types(value: object) -> None:
    with pytest.raises(TypeError):
        number_text(value)  # type: ignore[arg-type]


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_decimal_of_shortest_float_text_matches_rfc8785(value: float) -> None:
    # Decimal(repr(f)) is the decimal the double stands for; its JCS text must be the double's JCS text.
    assert number_text(Decimal(repr(value))).encode() == rfc8785.dumps(value)


@given(st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1))
def test_safe_integers_match_rfc8785(value: int) -> None:
    assert canonicalize(value) == rfc8785.dumps(value)
    assert number_text(Decimal(value)) == str(value)


@given(st.decimals(allow_nan=False, allow_infinity=False, places=2, min_value=-(10**13), max_value=10**13))
def test_amounts_with_two_decimals_are_always_exact(value: Decimal) -> None:
    text = number_text(value)
    assert Decimal(text) == value
    assert text == (format(value.normalize(), "f") if value else "0")


def test_strings_escape_like_rfc8785_over_the_whole_unicode_range() -> None:
    assert ORJSON_STRINGS_MATCH
    for start in range(0, 0x110000, 0x4000):
        chunk = "".join(chr(c) for c in range(start, min(start + 0x4000, 0x110000)) if not 0xD800 <= c <= 0xDFFF)
        expected = rfc8785.dumps(chunk)
        assert string_literal(chunk).encode() == expected
        assert canonicalize(chunk) == expected
        assert orjson.dumps(chunk) == expected  # the property the fast path relies on


def test_string_escapes_are_the_rfc8785_ones() -> None:
    assert string_literal('a"b\\c') == '"a\\"b\\\\c"'
    assert escape_string("\b\t\n\f\r") == "\\b\\t\\n\\f\\r"
    assert escape_string("\x00\x01\x1f\x7f") == "\\u0000\\u0001\\u001f\x7f"
    assert escape_string("é€\u2028😀") == "é€\u2028😀"
    assert escape_string("plain text") == "plain text"


@pytest.mark.parametrize("value", ["\ud800", "a\udfffb", {"k\ud83d": 1}, ["ok", "\udc00"]])
def test_lone_surrogates_are_refused(value: object) -> None:
    with pytest.raises(CanonicalizationError):
        canonicalize(value)
    with pytest.raises(CanonicalizationError):
        canonicalize_pure(value)


def test_keys_sort_by_utf16_code_units_not_code_points() -> None:
    # U+E000 is one UTF-16 unit 0xE000; U+10000 is the pair 0xD800 0xDC00, so it sorts first in JCS.
    value = {"\ue000": 1, "\U00010000": 2, "b": 3, "a": 4, "": 5}
    expected = rfc8785.dumps(value)
    assert canonicalize(value) == expected
    assert expected.index("\U00010000".encode()) < expected.index("\ue000".encode())


def test_rfc8785_appendix_style_example() -> None:
    numbers: list[object] = [Decimal("333333333.33333329"), Decimal("1E+30"), Decimal("4.50"), Decimal("0.002"), 0]
    value = {"numbers": numbers, "string": '€$\x0f\nA\'B"\\\\"/', "literals": [None, True, False]}
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,0],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    ).encode()
    # 333333333.33333329 is not exact (its double prints 333333333.3333333): refused, as promised.
    with pytest.raises(CanonicalizationError):
        canonicalize(value)
    numbers[0] = Decimal("333333333.3333333")
    assert canonicalize(value) == expected
    assert canonicalize_pure(value) == expected


@pytest.mark.parametrize("value", [1.0, {"a": 0.5}, [float("nan")], datetime.now(UTC), {1: "a"}, {"a": object()}])
def test_unsupported_values_are_refused(value: object) -> None:
    with pytest.raises((TypeError, CanonicalizationError)):
        canonicalize(value)


def test_tuples_are_arrays_and_bool_is_not_a_number() -> None:
    assert canonicalize((True, False, None, (1,))) == b"[true,false,null,[1]]"


def test_whitespace_and_order_of_the_input_do_not_matter() -> None:
    a = orjson.loads('{"b": [1, 2, {"y": "x", "x": null}], "a": "é"}')
    b = orjson.loads('{"a":"\\u00e9","b":[1,2,{"x":null,"y":"x"}]}')
    assert canonicalize(a) == canonicalize(b) == '{"a":"é","b":[1,2,{"x":null,"y":"x"}]}'.encode()


# --- generated values against the oracle -----------------------------------------------------------------------

_exact_decimals = st.floats(allow_nan=False, allow_infinity=False).map(lambda f: Decimal(repr(f)))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.text(),
    _exact_decimals,
    st.decimals(allow_nan=False, allow_infinity=False, places=2, min_value=-(10**12), max_value=10**12),
)
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


def _as_floats(value: Any) -> Any:
    """The oracle takes floats: each Decimal here is exactly its double's JCS text, so float() loses nothing."""
    if isinstance(value, Decimal):
        as_float = float(value)
        assert Decimal(repr(as_float)) == value or (as_float == 0 and value == 0)
        return as_float
    if isinstance(value, list):
        return [_as_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_floats(v) for k, v in value.items()}
    return value


@settings(max_examples=300)
@given(_values)
def test_canonical_json_equals_rfc8785(value: Any) -> None:
    expected = rfc8785.dumps(_as_floats(value))
    assert canonicalize(value) == expected
    assert canonicalize_pure(value) == expected


def test_exactness_criterion_matches_round_trip() -> None:
    for text in ("0.1", "0.2", "0.3", "1e23", "5e-324", "1.7976931348623157e308"):
        assert number_text(Decimal(text)) == rfc8785.dumps(float(text)).decode()
        assert math.isfinite(float(text))
