"""The relay's JSON -> Avro record conversion (`producers.avro_json`): the schema is compiled once and kept, and
the compiled form gives the records and errors the schema asks for."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

import schemas
from producers.avro_json import Coercion, CoercionError, convert

NODE: dict[str, Any] = {
    "type": "record",
    "name": "Node",
    "namespace": "t",
    "fields": [
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "again", "type": ["null", "Kind"]},
        {"name": "children", "type": {"type": "array", "items": "Node"}, "default": []},
    ],
}


def test_a_recursive_record_with_a_named_enum_converts_every_level() -> None:
    ctx = Coercion()
    document = {
        "amount": "1.5",
        "at": "2026-11-30T12:00:00.000+01:00",
        "kind": "A",
        "again": "B",
        "children": [{"amount": 2, "kind": "B", "extra": 1}],
    }
    assert convert(NODE, document, ctx, "$") == {
        "amount": Decimal("1.50"),
        "at": datetime(2026, 11, 30, 11, 0, tzinfo=UTC),
        "kind": "A",
        "again": "B",
        "children": [{"amount": Decimal("2.00"), "at": None, "kind": "B", "again": None, "children": []}],
    }
    assert ctx.dropped == ["children[0].extra"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"amount": "1.505", "kind": "A"}, r"^amount: 1.505 has more than 2 decimals$"),
        ({"amount": 1.5, "kind": "A"}, r"^amount: money must be a decimal string or Decimal, not float$"),
        ({"amount": "1", "kind": "C"}, r"^kind: 'C' is not one of A, B$"),
        ({"amount": "1"}, r"^kind: is required$"),
        ({"amount": "1", "kind": "A", "children": [{"amount": "1", "kind": "A", "at": "noon"}]},
         r"^children\[0\].at: 'noon' is not an ISO 8601 timestamp$"),
        ({"amount": "1", "kind": "A", "children": {}}, r"^children: expected an array, got dict$"),
    ],
)  # fmt: skip
def test_what_does_not_fit_is_refused_with_its_path(document: dict[str, Any], message: str) -> None:
    with pytest.raises(CoercionError, match=message):
        convert(NODE, document, Coercion(), "$")


def test_a_schema_is_compiled_once_and_an_equal_new_one_is_compiled_again() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    assert convert(schema, {"n": 1}, Coercion(), "$") == {"n": 1}
    schema["fields"] = [{"name": "s", "type": "string"}]  # the same object, changed: the compiled form is kept
    with pytest.raises(CoercionError, match="n: is required"):
        convert(schema, {"s": "x"}, Coercion(), "$")
    other = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}
    assert convert(other, {"s": "x"}, Coercion(), "$") == {"s": "x"}


def test_a_transfer_event_fits_its_topic_and_encodes() -> None:
    raw = schemas.schema("dispersion.transfers").path.read_text(encoding="utf-8")
    document = {
        "event_id": "e-1",
        "batch_id": "B-1",
        "index": 0,
        "employee_reference": "E-1",
        "amount": "10.1",
        "currency": "MXN",
        "origin_account": "1",
        "destination_account": "2",
        "outcome": "FAILED",
        "reason_code": "AC01",
        "reason": "closed",
        "occurred_at": "2026-11-30T12:00:00.000Z",
    }
    record = convert(json.loads(raw), document, Coercion(), "$")
    assert record["amount"] == Decimal("10.10") and record["end_to_end_id"] is None
    decoded = schemas.decode("dispersion.transfers", schemas.encode("dispersion.transfers", record))
    assert decoded["outcome"] == "FAILED" and decoded["amount"] == Decimal("10.10")
