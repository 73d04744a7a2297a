"""The body form `x-idempotency-key` replays are compared in: one spelling per JSON value."""

from __future__ import annotations

from decimal import Decimal

import pytest

from sandbox.errors import ResourceError
from sandbox.idempotency import canonical_body
from sandbox.jsonutil import loads


def test_whitespace_key_order_and_number_spelling_do_not_count() -> None:
    a = loads(b'{"b": [1500.50, 100.00, -0.0, 1E+2, 0.10], "a": {"y": 1, "x": "t"}}')
    b = loads(b'{"a":{"x":"t","y":1},"b":[1500.5,100,0,100,0.1]}')
    assert canonical_body(a) == canonical_body(b) == b'{"a":{"x":"t","y":1},"b":[1500.5,100,0,100,0.1]}'


@pytest.mark.parametrize(
    ("first", "second"),
    [({"n": Decimal("1500.50")}, {"n": Decimal("1500.51")}), ({"s": "x"}, {"s": "X"}), ({"l": [1, 2]}, {"l": [2, 1]})],
)
def test_a_different_value_is_a_different_body(first: dict[str, object], second: dict[str, object]) -> None:
    assert canonical_body(first) != canonical_body(second)


def test_a_body_that_cannot_be_written_back_is_malformed() -> None:
    with pytest.raises(ResourceError) as caught:
        canonical_body(loads(b'{"s": "\\ud800"}'))
    assert caught.value.status == 400 and caught.value.code == "UK.OBIE.Resource.InvalidFormat"


def test_a_huge_exponent_stays_small() -> None:
    # A plain-digits spelling of 1E+999999999 would be a 1 GB string built before any validation.
    body = loads(b'{"n": 1E+999999999, "m": -2.5e-999999999}')
    assert canonical_body(body) == b'{"m":-2.5e-999999999,"n":1e+999999999}'


def test_integers_wider_than_64_bits_are_written_like_an_equal_decimal() -> None:
    wide = loads(b'{"n": 1000000000000000000000000000000, "s": [18446744073709551616, -9223372036854775809]}')
    assert canonical_body(wide) == b'{"n":1e+30,"s":[18446744073709551616,-9223372036854775809]}'
    reordered = loads(b'{"s": [18446744073709551616, -9223372036854775809], "n": 1E+30}')
    assert canonical_body(wide) == canonical_body(reordered)
