"""RFC 8785 canonical JSON in sandbox.filecheck, checked against the `rfc8785` package as an oracle."""

from __future__ import annotations

import base64
import hashlib
from decimal import Decimal
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import filecheck
from sandbox.filecheck import canonical_json, es_number, payload_hash
from sandbox.jsonutil import loads

SAFE_INT = 2**53 - 1

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE_INT, max_value=SAFE_INT)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def _as_decimals(value: Any) -> Any:
    """The same value with every float replaced by the Decimal of its shortest repr (what a parser sees)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, list):
        return [_as_decimals(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_decimals(v) for k, v in value.items()}
    return value


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_matches_rfc8785_on_json_values(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_decimals_serialise_like_the_floats_they_equal(value: Any) -> None:
    assert canonical_json(_as_decimals(value)) == rfc8785.dumps(value)


@settings(max_examples=300, deadline=None)
@given(st.decimals(min_value=Decimal("0.01"), max_value=Decimal("9999999999999.99"), places=2))
def test_money_amounts_match_the_oracle(amount: Decimal) -> None:
    # Up to 15 significant digits: a double holds each exactly, so the float oracle is valid here.
    assert es_number(amount) == rfc8785.dumps(float(amount)).decode()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1500.50", "1500.5"),
        ("100.00", "100"),
        ("0.10", "0.1"),
        ("-0.0", "0"),
        ("1E+2", "100"),
        ("1e21", "1e+21"),
        ("123456789012345678901", "123456789012345678901"),
        ("0.000001", "0.000001"),
        ("0.0000001", "1e-7"),
        ("1.5e-7", "1.5e-7"),
        ("2.50e25", "2.5e+25"),
        ("-42.10", "-42.1"),
    ],
)
def test_es_number_examples(text: str, expected: str) -> None:
    assert es_number(Decimal(text)) == expected


def test_integers_and_integral_decimals_agree() -> None:
    assert es_number(750) == es_number(Decimal("750.00")) == "750"
    assert es_number(10**21) == "1e+21"
    with pytest.raises(TypeError):
        es_number(True)
    with pytest.raises(ValueError, match="NaN"):
        es_number(Decimal("NaN"))


def test_rfc8785_sample_strings_and_order() -> None:
    # The RFC's string-escaping rules: only quote, backslash and C0 controls are escaped (lowercase hex).
    value = {"b": "\u20ac$\u000f\nA'\u0042\u0022\u005c\\\"/", "a": ["\u007f", "\u00e9"]}
    assert canonical_json(value) == rfc8785.dumps(value)
    assert canonical_json("\u000f") == b'"\\u000f"'
    assert canonical_json("\u007f\u00e9") == '"\u007f\u00e9"'.encode()
    # Keys sort by UTF-16 code units: U+1F600 (surrogate pair D83D...) sorts before U+FB01.
    keyed = {"\ufb01": 1, "\U0001f600": 2, "a": 3}
    assert canonical_json(keyed) == rfc8785.dumps(keyed)
    assert canonical_json(keyed).decode().index("\U0001f600") < canonical_json(keyed).decode().index("\ufb01")


def test_whitespace_and_key_order_do_not_change_the_form() -> None:
    a = loads(b'{"b": [1, 2.50, {"y": true, "x": null}], "a": "t"}')
    b = loads(b'{"a":"t","b":[1,2.5,{"x":null,"y":true}]}')
    assert canonical_json(a) == canonical_json(b) == b'{"a":"t","b":[1,2.5,{"x":null,"y":true}]}'


def test_refuses_what_jcs_cannot_express() -> None:
    with pytest.raises(ValueError, match="surrogate"):
        canonical_json({"a": "\ud800"})
    nested: Any = 1
    for _ in range(100):
        nested = [nested]
    with pytest.raises(ValueError, match="nesting"):
        canonical_json(nested)
    with pytest.raises(TypeError):
        canonical_json({"a": object()})
    with pytest.raises(TypeError):
        canonical_json({1: "x"})


def test_payload_hash_is_base64_sha256_of_the_canonical_form() -> None:
    value = {"data": {"transaction": [{"transferInfo": {"transactionAmount": Decimal("10.50"), "reference": ""}}]}}
    canonical = b'{"data":{"transaction":[{"transferInfo":{"reference":"","transactionAmount":10.5}}]}}'
    assert canonical_json(value) == canonical
    assert payload_hash(value) == base64.b64encode(hashlib.sha256(canonical).digest()).decode()


def test_member_order_cache_keeps_only_narrow_key_sets() -> None:
    wide = {f"k{i:03d}-{'é' if i % 2 else ''}": i for i in range(200, 0, -1)}
    narrow = {"zz-cache-test": 1, "aa-cache-test": 2}
    assert canonical_json(wide) == rfc8785.dumps(wide)
    assert canonical_json(narrow) == rfc8785.dumps(narrow)
    assert tuple(wide) not in filecheck._MEMBER_ORDERS  # a wide object is sorted, used, and not kept
    assert tuple(narrow) in filecheck._MEMBER_ORDERS
