"""The sandbox's exact-decimal JSON: amounts never pass through float, big integers never crash the writer."""

from __future__ import annotations

from decimal import Decimal

import pytest

from sandbox.jsonutil import dumps, loads


def test_fractions_round_trip_exactly() -> None:
    data = loads(b'{"ControlSum": 3000.50, "n": 3, "tiny": 0.10}')
    assert data == {"ControlSum": Decimal("3000.50"), "n": 3, "tiny": Decimal("0.10")}
    assert dumps(data) == b'{"ControlSum":3000.50,"n":3,"tiny":0.10}'


@pytest.mark.parametrize("text", ["-9223372036854775809", "9223372036854775808", "1" + "0" * 40])
def test_integers_beyond_64_bits_stay_exact(text: str) -> None:
    data = loads(f'{{"Risk": {{"": {text}}}}}')
    assert dumps(data) == f'{{"Risk":{{"":{text}}}}}'.encode()


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_constants_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not JSON"):
        loads(f'{{"a": {text}}}')
