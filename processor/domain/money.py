"""Amounts: exact `Decimal` with two decimals on the wire and on screen. Pure."""

from __future__ import annotations

from decimal import Decimal
from typing import Final

CENT: Final = Decimal("0.01")


def cents(amount: Decimal) -> Decimal:
    """`amount` with exactly two decimals when that keeps its value (`1.500` -> `1.50`, `7` -> `7.00`), so the
    Avro decimal of scale 2 takes it; an amount with more decimals (refused by validation) is left as it is."""
    if not amount.is_finite():
        return amount
    quantized = amount.quantize(CENT)
    return quantized if quantized == amount else amount


def money_text(amount: Decimal) -> str:
    """An amount as text with exactly two decimals (`1500.5` -> `1500.50`)."""
    return format(amount.quantize(CENT), "f")
