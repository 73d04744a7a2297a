"""`loads_decimal` reads JSON exactly as `json.loads(..., parse_float=Decimal)` does, by msgspec where it can."""

from __future__ import annotations

import json
from decimal import Decimal
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.domain import exact_json
from processor.domain.exact_json import loads_decimal


def _shape(value: Any) -> Any:
    """`value` with every number's type and text kept apart, so `Decimal("1.50")` differs from `Decimal("1.5")`
    and `1` from `Decimal("1")`, and with each object's keys in order."""
    if isinstance(value, dict):
        return ("object", [(key, _shape(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("array", [_shape(item) for item in value])
    if isinstance(value, (Decimal, float)):
        return (type(value).__name__, repr(value))
    return (type(value).__name__, value)


def _reference(data: str | bytes, constants: bool = True) -> Any:
    if constants:
        return json.loads(data, parse_float=Decimal)
    return json.loads(data, parse_float=Decimal, parse_constant=exact_json.refuse_constant)


def _outcome(read: Any, data: str | bytes) -> tuple[str, Any]:
    try:
        return "value", _shape(read(data))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return "error", f"{type(exc).__name__}: {exc}"


_NUMBER_TEXTS = st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)
_KEYS = st.text(alphabet=st.characters(codec="utf-8"), max_size=6) | st.sampled_from(["a", "a", "b", "Ñ"])


def _json_texts() -> st.SearchStrategy[str]:
    """JSON texts written by hand: numbers spelt in every way the grammar allows, strings with escapes
    (lone surrogates among them), repeated keys, and whitespace between tokens."""
    scalars = st.one_of(
        _NUMBER_TEXTS,
        st.sampled_from(
            ["true", "false", "null", "NaN", "-Infinity", '"\\ud800"', '"\\u00e9\\n\\/"', '"\\uD83D\\uDE00"']
        ),
        st.text(max_size=8).map(lambda text: json.dumps(text, ensure_ascii=False)),
        st.text(max_size=8).map(json.dumps),
    )

    def containers(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        arrays = st.lists(children, max_size=4).map(lambda items: "[" + " ,".join(items) + "]")
        members = st.lists(st.tuples(_KEYS.map(json.dumps), children), max_size=4)
        objects = members.map(lambda pairs: "{" + ",\n".join(f"{key} : {value}" for key, value in pairs) + "}")
        return arrays | objects

    return st.recursive(scalars, containers, max_leaves=20)


@settings(max_examples=400)
@given(_json_texts(), st.sampled_from(["str", "utf-8", "utf-16", "utf-8-sig"]), st.booleans())
def test_any_json_text_reads_as_the_standard_library_reads_it(text: str, form: str, constants: bool) -> None:
    data: str | bytes = text if form == "str" else text.encode(form, errors="surrogatepass")
    expected = _outcome(lambda raw: _reference(raw, constants), data)
    assert _outcome(lambda raw: loads_decimal(raw, constants=constants), data) == expected


@given(_json_texts(), st.data())
def test_broken_text_fails_as_the_standard_library_fails(text: str, data: st.DataObject) -> None:
    raw = text.encode("utf-8", errors="surrogatepass")
    cut = data.draw(st.integers(min_value=0, max_value=len(raw)))
    inserted = data.draw(st.sampled_from([b"", b",", b"]", b"}", b"\xff", b"\x00", b"01", b"1.", b"\\"]))
    broken = raw[:cut] + inserted + raw[cut:]
    assert _outcome(loads_decimal, broken) == _outcome(_reference, broken)


@pytest.mark.parametrize(
    "data",
    [
        b'{"amount": 1500.50, "fee": 1.0e5, "tiny": 1E-7, "zero": -0.000, "whole": 1e+2}',
        b'{"a": 1, "b": 2, "a": 3}',  # the last value at the first key's place
        b"123456789012345678901234567890",  # past 64 bits: exact
        b"1" * 4301,  # past Python's digit limit: json's ValueError
        b'"\\ud800"',  # a lone surrogate: msgspec refuses it, json reads it
        b'"\xed\xa0\x80"',  # one written raw: not UTF-8 for msgspec, read by json
        b'\xef\xbb\xbf{"a": 1}',  # a UTF-8 byte-order mark: msgspec refuses it, json reads past it
        '{"a": 1}'.encode("utf-16"),  # json tells UTF-16 from the bytes
        b"[NaN, Infinity]",
        b"[" * 5000 + b"]" * 5000,  # deeper than either reads
        b'{"a": "\x01"}',  # a control character in a string
    ],
)
def test_the_texts_msgspec_reads_differently_or_not_at_all(data: bytes) -> None:
    for constants in (True, False):
        expected = _outcome(partial(_reference, constants=constants), data)
        assert _outcome(partial(loads_decimal, constants=constants), data) == expected


def test_fractions_are_decimal_digit_for_digit_and_floats_never_appear() -> None:
    read = loads_decimal(b'{"amount": 1500.50, "e": 3.075E1, "n": 7}')
    assert read == {"amount": Decimal("1500.50"), "e": Decimal("30.75"), "n": 7}
    assert str(read["amount"]) == "1500.50" and type(read["n"]) is int


def test_nan_is_refused_when_asked() -> None:
    assert repr(loads_decimal("[NaN]")) == "[nan]"  # json's own reading: a float
    with pytest.raises(ValueError, match="NaN is not JSON"):
        loads_decimal("[NaN]", constants=False)


def test_a_text_with_a_byte_order_mark_fails_with_json_s_own_message() -> None:
    with pytest.raises(json.JSONDecodeError, match="Unexpected UTF-8 BOM"):
        loads_decimal('\ufeff{"a": 1}')
