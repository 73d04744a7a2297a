"""`holds_float`: the check that keeps floats out of the JSON the store and the bank client write."""

from __future__ import annotations

from collections import OrderedDict
from datetime import UTC, datetime
from decimal import Decimal
from types import MappingProxyType

import pytest

from processor.domain.money import holds_float


class Ratio(float):
    """A float under another name."""


@pytest.mark.parametrize(
    "value",
    [
        1.5,
        {"amount": 0.1},
        [{"rows": ({"amount": Decimal("1.00")}, {"amount": 2.0})}],
        (1, "a", None, [True, [3, [4.25]]]),
        MappingProxyType({"nested": MappingProxyType({"x": float("nan")})}),
        OrderedDict(a=[Ratio(0.5)]),
        {"deep": [[[[[[[[[[1e-9]]]]]]]]]]},
    ],
)
def test_a_float_anywhere_is_found(value: object) -> None:
    assert holds_float(value)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "1.5",
        Decimal("1.50"),
        {"amount": Decimal("0.10"), "n": 3, "ok": True, "none": None, "when": datetime(2026, 11, 30, tzinfo=UTC)},
        [{"rows": ({"amount": "2.00"},)}, [], {}],
        MappingProxyType({"x": [1, 2, (3, "4.0")]}),
        {1.5: "a float key is not a value"},
    ],
)
def test_values_without_a_float_pass(value: object) -> None:
    assert not holds_float(value)


def test_a_value_that_holds_itself_is_looked_through_once() -> None:
    ring: list[object] = ["a"]
    ring.append(ring)
    book: dict[str, object] = {"ring": ring}
    book["self"] = book
    assert not holds_float(book)
    ring.append(0.5)
    assert holds_float(book)
