"""The chaos run's judgement of duplicates (benchmarks/chaos.py `duplicates`): a consent the processor replaced by
design is not a duplicate; any other consent or payment beyond one per batch is."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest


@pytest.fixture(scope="module")
def chaos(benchmark_script: Callable[[str], ModuleType]) -> ModuleType:
    return benchmark_script("chaos")


def held(chaos: ModuleType, consents: list[str], payments: dict[str, str]) -> Any:
    """One batch's holdings: `payments` maps each file payment to the consent it was made under."""
    return chaos.Holdings(consents=consents, payments=list(payments), paid_consents=set(payments.values()))


def test_one_consent_and_one_payment_per_batch_is_no_duplicate(chaos: ModuleType) -> None:
    assert chaos.duplicates({"b-1": held(chaos, ["c-1"], {"p-1": "c-1"})}, {}) == (0, 0, 0)


def test_a_consent_replaced_by_design_and_never_paid_is_counted_apart(chaos: ModuleType) -> None:
    holdings = {"b-1": held(chaos, ["c-1", "c-2"], {"p-1": "c-2"})}
    assert chaos.duplicates(holdings, {"c-1": "b-1"}) == (0, 0, 1)


@pytest.mark.parametrize(
    ("consents", "payments", "replaced", "expected"),
    [
        (["c-1", "c-2"], {"p-1": "c-2"}, {}, (1, 0, 0)),  # a second consent nothing explains
        (["c-1", "c-2"], {"p-1": "c-2"}, {"c-1": "b-2"}, (1, 0, 0)),  # recorded replaced for another batch
        (["c-1", "c-2"], {"p-1": "c-1", "p-2": "c-2"}, {"c-1": "b-1"}, (1, 1, 0)),  # the replaced one was paid
        (["c-1"], {"p-1": "c-1", "p-2": "c-1"}, {}, (0, 1, 0)),  # two payments under one consent
    ],
)
def test_anything_else_beyond_one_is_a_duplicate(
    chaos: ModuleType,
    consents: list[str],
    payments: dict[str, str],
    replaced: dict[str, str],
    expected: tuple[int, int, int],
) -> None:
    assert chaos.duplicates({"b-1": held(chaos, consents, payments)}, replaced) == expected
