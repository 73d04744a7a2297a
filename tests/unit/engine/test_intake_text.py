"""A decoded record handed over to the intake is written as the text to store a transfer at a time, each let go
of once written: the same text as the whole record written at once, without the text built beside the record."""

from __future__ import annotations

import copy
import tracemalloc
from datetime import UTC, date, datetime
from decimal import Decimal
from types import MappingProxyType
from typing import Any

import pytest

from processor.engine.intake import _as_text, _handed_text


def _record(transfers: int) -> dict[str, Any]:
    return {
        "batch_id": "B-1",
        "requested_at": datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=UTC),
        "transactions": [
            {
                "destination_account": {"account_number": f"{3000000000 + i}", "account_type": "SAVINGS"},
                "amount": Decimal("1234.50"),
                "concept": f'Bonificación "{i}" \\ Ő\n',
                "employee_reference": None,
            }
            for i in range(transfers)
        ],
        "origin_account": {"account_number": "1", "currency": "GTQ"},
        "execute_on": date(2026, 12, 1),
    }


@pytest.mark.parametrize(
    "document",
    [
        _record(3),
        _record(0),
        {"transactions": [{"amount": Decimal("1.00")}], "batch_id": "first the transfers"},
        {"batch_id": "no list", "transactions": {"not": "a list"}},
        {"batch_id": "none"},
    ],
    ids=["record", "no transfers", "transfers first", "not a list", "no transfers member"],
)
def test_a_handed_record_is_written_as_the_same_text(document: dict[str, Any]) -> None:
    expected = _as_text(copy.deepcopy(document))
    assert _handed_text(document) == expected
    assert expected.isascii()


def test_what_is_not_a_decoded_records_shape_is_written_whole_and_kept() -> None:
    document: dict[Any, Any] = {5: "a number as a key", "transactions": [{"a": 1}]}
    assert _handed_text(document) == _as_text(document) == '{"5":"a number as a key","transactions":[{"a":1}]}'
    assert document["transactions"]  # nothing let go of
    proxy = MappingProxyType({"transactions": [1]})
    with pytest.raises(TypeError, match="mappingproxy"):  # refused as the whole record's writing refuses it
        _handed_text(proxy)
    assert proxy["transactions"] == [1]


def test_a_handed_record_is_let_go_of_as_its_text_grows() -> None:
    """Written whole, the encoder's pieces and the text were built beside the whole record (about twice the text
    above it); a transfer at a time, the record shrinks as the text grows."""
    tracemalloc.start()
    try:
        record = _record(20_000)
        before = tracemalloc.get_traced_memory()[0]
        text = _handed_text(record)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert record["transactions"] == []
    assert peak - before < len(text) / 4, (peak - before, len(text))
