"""The floor benchmark's sum (benchmarks/floor.py `floor_range`): each piece's count per batch times its CPU per
unit, the lowest and the highest round apart; a piece printed for reference (counted 0 times) adds nothing."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def floor(benchmark_script: Callable[[str], ModuleType]) -> ModuleType:
    return benchmark_script("floor")


def test_counts_times_units_low_and_high_apart(floor: ModuleType) -> None:
    rows = [
        ("bank calls", 9, [0.0006, 0.0005, 0.0007]),
        ("write transactions", 10, [0.0004, 0.0003]),
        ("the batch consumed", 1, [0.0008]),
    ]
    low, high = floor.floor_range(rows)
    assert low == pytest.approx(9 * 0.5 + 10 * 0.3 + 0.8)
    assert high == pytest.approx(9 * 0.7 + 10 * 0.4 + 0.8)


def test_a_reference_line_is_not_counted(floor: ModuleType) -> None:
    counted = [("bank calls, httpx", 9, [0.0007])]
    with_reference = [*counted, ("  aiohttp alone, for reference", 0, [0.0003])]
    assert floor.floor_range(with_reference) == floor.floor_range(counted)
    assert floor.floor_range(counted) == pytest.approx((6.3, 6.3))
