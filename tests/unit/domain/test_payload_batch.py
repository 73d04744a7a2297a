"""Parsing payroll batches from dicts and JSON: exact decimals, defaults, and clear errors listing every problem."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from processor.domain.batch import (
    BatchParseError,
    OriginAccount,
    PayrollBatch,
    Transfer,
    batch_from_dict,
    batch_from_json,
    batch_from_stored,
    loads_exact,
)


def batch_dict(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "batch_id": "erp-2024-11-0001",
        "integration": "bank-gt",
        "file_reference": "PAYROLL-2024-11",
        "origin_account": {"account_number": "0100123456", "account_type": "MONETARY", "currency": "GTQ"},
        "transactions": [
            {
                "destination_account": {
                    "account_number": "3000000001",
                    "account_type": "SAVINGS",
                    "currency": "GTQ",
                    "email": "ana@example.com",
                },
                "amount": Decimal("1500.50"),
                "concept": "Payroll November",
                "employee_reference": "E-1",
            },
            {
                "destination_account": {"account_number": "3000000002", "currency": "GTQ", "email": "luis@example.com"},
                "amount": "250.00",
                "concept": "Payroll November",
            },
        ],
        "requested_at": "2024-11-30T12:00:00.000Z",
        "source": "erp-x",
    }
    data.update(changes)
    return data


def problems(exc: BatchParseError) -> dict[str, str]:
    return {p.path: p.message for p in exc.problems}


def test_a_valid_dict_becomes_typed_objects() -> None:
    batch = batch_from_dict(batch_dict())
    assert batch == PayrollBatch(
        batch_id="erp-2024-11-0001",
        integration="bank-gt",
        file_reference="PAYROLL-2024-11",
        origin=OriginAccount("0100123456", "MONETARY", "GTQ"),
        transactions=(
            Transfer("3000000001", "SAVINGS", "GTQ", "ana@example.com", Decimal("1500.50"), "Payroll November", "E-1"),
            Transfer("3000000002", "SAVINGS", "GTQ", "luis@example.com", Decimal("250.00"), "Payroll November", None),
        ),
        requested_at=datetime(2024, 11, 30, 12, tzinfo=UTC),
        source="erp-x",
    )


def test_account_types_default_to_monetary_and_savings() -> None:
    data = batch_dict(origin_account={"account_number": "1", "currency": "GTQ"})
    batch = batch_from_dict(data)
    assert batch.origin.type == "MONETARY"
    assert batch.transactions[1].account_type == "SAVINGS"


def test_json_numbers_are_read_as_decimal_never_float() -> None:
    text = json.dumps(batch_dict(), default=str).replace('"1500.50"', "0.1").replace('"250.00"', "3")
    batch = batch_from_json(text)
    amounts = [t.amount for t in batch.transactions]
    assert amounts == [Decimal("0.1"), Decimal(3)]
    assert all(type(a) is Decimal for a in amounts)
    assert str(amounts[0]) == "0.1"  # not 0.1000000000000000055511151231257827...


def test_json_keeps_the_written_precision() -> None:
    assert loads_exact('{"a": 1500.50, "b": 1e2, "c": 7}') == {"a": Decimal("1500.50"), "b": Decimal("1E+2"), "c": 7}


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 1, "a": 2}'])
def test_json_constants_and_duplicate_keys_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"not valid JSON|duplicate key"):
        loads_exact(text)


def test_invalid_json_is_a_parse_error() -> None:
    with pytest.raises(BatchParseError) as caught:
        batch_from_json(b'{"batch_id": ')
    assert caught.value.problems[0].path == "$"
    assert "not valid JSON" in str(caught.value)


def test_float_amounts_are_refused_with_the_path() -> None:
    data = batch_dict()
    data["transactions"][1]["amount"] = 250.0
    with pytest.raises(BatchParseError) as caught:
        batch_from_dict(data)
    assert list(problems(caught.value)) == ["transactions[1].amount"]
    assert "float is refused" in str(caught.value)


@pytest.mark.parametrize("amount", ["1e3", " 12", "1_000", "NaN", "12.", ".5", "+5", "", "1,50"])
def test_amount_strings_must_be_plain_decimals(amount: str) -> None:
    data = batch_dict()
    data["transactions"][0]["amount"] = amount
    with pytest.raises(BatchParseError) as caught:
        batch_from_dict(data)
    assert "decimal number" in problems(caught.value)["transactions[0].amount"]


@pytest.mark.parametrize(("amount", "expected"), [(7, Decimal(7)), ("-3.25", Decimal("-3.25")), ("0", Decimal(0))])
def test_int_and_string_amounts_become_decimal(amount: object, expected: Decimal) -> None:
    data = batch_dict()
    data["transactions"][0]["amount"] = amount
    assert batch_from_dict(data).transactions[0].amount == expected


@pytest.mark.parametrize("amount", [Decimal("NaN"), Decimal("Infinity"), True, [1]])
def test_non_numeric_amounts_are_refused(amount: object) -> None:
    data = batch_dict()
    data["transactions"][0]["amount"] = amount
    with pytest.raises(BatchParseError, match=r"transactions\[0\]\.amount"):
        batch_from_dict(data)


def test_every_problem_is_reported_at_once() -> None:
    data = batch_dict(batch_id="", integration=None, requested_at="yesterday", source=5)
    data["origin_account"] = {"account_number": 123, "currency": "GTQ"}
    data["transactions"][0]["destination_account"] = "3000000001"
    data["transactions"][0]["concept"] = None
    data["transactions"][1]["destination_account"]["email"] = ["x"]
    data["transactions"].append("not an object")
    with pytest.raises(BatchParseError) as caught:
        batch_from_dict(data)
    found = problems(caught.value)
    assert found == {
        "batch_id": "must not be empty",
        "integration": "is required",
        "requested_at": "expected an ISO 8601 timestamp such as 2024-11-30T12:00:00.000Z",
        "source": "expected a string, got integer",
        "origin_account.account_number": "expected a string, got integer",
        "transactions[0].destination_account": "expected an object, got string",
        "transactions[0].concept": "is required",
        "transactions[1].destination_account.email": "expected a string, got array",
        "transactions[2]": "expected an object, got string",
    }
    assert str(caught.value).startswith("invalid payroll batch: batch_id: must not be empty")


def test_missing_transactions_and_origin() -> None:
    data = batch_dict()
    del data["transactions"], data["origin_account"]
    with pytest.raises(BatchParseError) as caught:
        batch_from_dict(data)
    assert problems(caught.value) == {"origin_account": "expected an object, got null", "transactions": "is required"}


def test_not_an_object() -> None:
    with pytest.raises(BatchParseError, match=r"\$: expected an object, got array"):
        batch_from_dict([1, 2])


def test_requested_at_needs_an_offset_and_is_kept_in_utc() -> None:
    with pytest.raises(BatchParseError, match="UTC offset"):
        batch_from_dict(batch_dict(requested_at="2024-11-30T12:00:00"))
    batch = batch_from_dict(batch_dict(requested_at="2024-11-30T06:00:00.000-06:00"))
    assert batch.requested_at == datetime(2024, 11, 30, 12, tzinfo=UTC)
    assert batch.requested_at.tzinfo is UTC
    aware = datetime(2024, 1, 1, tzinfo=UTC)
    assert batch_from_dict(batch_dict(requested_at=aware)).requested_at == aware


def test_an_empty_transaction_list_parses_and_is_left_to_validation() -> None:
    assert batch_from_dict(batch_dict(transactions=[])).transactions == ()


def test_unknown_keys_are_ignored_for_schema_growth() -> None:
    data = batch_dict(future_field={"x": 1})
    data["transactions"][0]["future"] = True
    assert len(batch_from_dict(data).transactions) == 2


def test_long_problem_lists_are_summarised() -> None:
    data = batch_dict(transactions=[{"amount": 1.5}] * 12)
    with pytest.raises(BatchParseError) as caught:
        batch_from_dict(data)
    assert len(caught.value.problems) == 12 * 3  # destination_account, amount, concept per row
    assert str(caught.value).endswith("and 26 more")


def test_a_record_through_the_avro_contract_parses_unchanged() -> None:
    from schemas.codec import decode, encode

    data = batch_dict(requested_at=datetime(2024, 11, 30, 12, 0, 0, 123000, tzinfo=UTC))
    data["transactions"][1]["amount"] = Decimal("250.00")
    data["transactions"][1]["destination_account"]["account_type"] = "SAVINGS"
    data["transactions"][1]["employee_reference"] = None
    record = decode("payroll.batches", encode("payroll.batches", data))
    assert batch_from_dict(record) == batch_from_dict(data)
    amounts = [t.amount for t in batch_from_dict(record).transactions]
    assert amounts == [Decimal("1500.50"), Decimal("250.00")] and all(type(a) is Decimal for a in amounts)


def test_the_fast_row_path_and_the_generic_reader_agree() -> None:
    from types import MappingProxyType

    variants: list[dict[str, Any]] = [
        {"amount": 7},
        {"amount": Decimal("0.10")},
        {"amount": "12.50"},
        {"employee_reference": None},
        {"employee_reference": "E-9"},
        {"account_type": None},
        {"account_type": "MONETARY"},
    ]
    rows = []
    for i, change in enumerate(variants):
        dest = {"account_number": f"A{i}", "currency": "GTQ", "email": f"p{i}@example.com"}
        row: dict[str, Any] = {"destination_account": dest, "amount": Decimal("1.00"), "concept": f"c{i}"}
        if "account_type" in change:
            dest["account_type"] = change.pop("account_type")
        row.update(change)
        rows.append(row)
    fast = batch_from_dict(batch_dict(transactions=rows))
    generic_rows = [
        MappingProxyType({**r, "destination_account": MappingProxyType(r["destination_account"])}) for r in rows
    ]
    generic = batch_from_dict(batch_dict(transactions=generic_rows))
    assert fast == generic
    assert [t.amount for t in fast.transactions][:3] == [Decimal(7), Decimal("0.10"), Decimal("12.50")]
    assert [t.account_type for t in fast.transactions][-2:] == ["SAVINGS", "MONETARY"]


def _generic(text: str) -> PayrollBatch | dict[str, str]:
    """The batch read the way that never takes a row while parsing: the whole document as dicts, then read."""
    try:
        return batch_from_dict(loads_exact(text))
    except BatchParseError as exc:
        return problems(exc)


def _parsed(text: str) -> PayrollBatch | dict[str, str]:
    try:
        return batch_from_json(text)
    except BatchParseError as exc:
        return problems(exc)


ROW = {
    "destination_account": {"account_number": "3000000009", "currency": "GTQ", "email": "eva@example.com"},
    "amount": "10.00",
}


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the stored form: decimal strings, read while parsing
        {"transactions": [ROW, {**ROW, "amount": "1e3"}, {**ROW, "amount": 1.5}, {**ROW, "note": "x"}]},
        {"transactions": [{**ROW, "destination_account": ROW}]},  # a row where a destination account belongs
        {"origin_account": ROW},  # a row where the origin account belongs
        {"transactions": ROW},  # a row where the list belongs
        {"batch_id": ROW},
    ],
    ids=["stored", "bad-rows", "row-as-destination", "row-as-origin", "row-as-list", "row-as-id"],
)
def test_rows_read_while_parsing_give_what_reading_the_whole_document_gives(changes: dict[str, Any]) -> None:
    text = json.dumps(batch_dict(**changes), default=str)
    assert _parsed(text) == _generic(text)


def _stored(text: str) -> PayrollBatch | dict[str, str]:
    try:
        return batch_from_stored(text)
    except BatchParseError as exc:
        return problems(exc)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"transactions": [ROW, {**ROW, "amount": "1e3"}, {**ROW, "amount": 1.5}, {**ROW, "note": "x"}]},
        {"transactions": [{**ROW, "amount": "0.10", "concept": "Nómina \u00e9 \ud83d\ude00"}]},
        {"origin_account": ROW},
        {"batch_id": ROW},
    ],
    ids=["stored", "bad-rows", "escapes", "row-as-origin", "row-as-id"],
)
def test_a_stored_batch_reads_as_batch_from_json_reads_it(changes: dict[str, Any]) -> None:
    for text in (
        json.dumps(batch_dict(**changes), default=str),
        json.dumps(batch_dict(**changes), default=str, ensure_ascii=False),
    ):
        assert _stored(text) == _parsed(text)


def test_a_stored_text_that_is_no_json_is_a_parse_error_at_the_top() -> None:
    assert _stored('{"batch_id": ') == {"$": _parsed('{"batch_id": ')["$"]}  # type: ignore[index]


def test_a_large_stored_batch_is_read_row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `STORED_AS_OBJECTS_CHARS` the rows are taken while parsing, never all held as dicts."""
    import processor.domain.batch as module

    taken: list[int] = []
    original = module._rows_as_transfers

    def counting(pairs: list[tuple[str, Any]]) -> Any:
        taken.append(1)
        return original(pairs)

    monkeypatch.setattr(module, "_rows_as_transfers", counting)
    text = json.dumps(batch_dict(), default=str)
    expected = batch_from_json(text)
    taken.clear()
    assert batch_from_stored(text) == expected
    assert not taken  # small: read as plain objects by msgspec
    monkeypatch.setattr(module, "STORED_AS_OBJECTS_CHARS", len(text) - 1)
    assert batch_from_stored(text) == expected
    assert taken  # large: each object taken while parsing


def test_a_document_that_is_a_row_is_refused_as_before() -> None:
    text = json.dumps(ROW)
    assert _parsed(text) == _generic(text)
    assert "batch_id" in _parsed(text)


def test_the_stored_form_is_read_on_the_fast_path_while_parsing() -> None:
    import processor.domain.batch as module

    calls = 0
    original = module._Reader.mapping

    def counting(self: Any, data: object, path: str) -> Any:
        nonlocal calls
        calls += path.startswith("transactions[")
        return original(self, data, path)

    module._Reader.mapping = counting  # type: ignore[method-assign]
    try:
        batch = batch_from_json(json.dumps(batch_dict(), default=str))
    finally:
        module._Reader.mapping = original  # type: ignore[method-assign]
    assert calls == 0  # no row went through the problem-collecting reader
    assert [t.amount for t in batch.transactions] == [Decimal("1500.50"), Decimal("250.00")]
