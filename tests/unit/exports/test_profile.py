"""Export profiles as the configuration gives them (`[exports.NAME]`, docs/submit.md "Bring your ERP's export"):
parsed with the pydantic model `ProfileTable`, every problem named by its key in the words users read."""

from __future__ import annotations

from typing import Any

import pytest

from processor.exports.numbers import NumberStyle
from processor.exports.profile import ColumnRef, ProfileError, parse_profile

COLUMNS = {"account_number": "Cuenta", "amount": "Monto", "email": "Correo"}


def problems(table: object) -> list[str]:
    with pytest.raises(ProfileError) as refused:
        parse_profile("p", table)
    return refused.value.problems


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (3, "exports.p: must be a table, not int"),
        ({"columns": COLUMNS, "skip_row": 1}, "exports.p.skip_row: unknown key (did you mean 'skip_rows'?)"),
        ({"columns": COLUMNS, "zzz": 1}, "exports.p.zzz: unknown key"),
        ({}, "exports.p.columns: is required: a table mapping our fields to the ERP's columns"),
        ({"columns": "Cuenta"}, "exports.p.columns: must be a table, not str"),
        (
            {"columns": {**COLUMNS, "monto": 4}},
            "exports.p.columns.monto: not one of our fields (did you mean 'amount'?)",
        ),
        (
            {"columns": {**COLUMNS, "concept": 1.5}},
            "exports.p.columns.concept: must be the ERP's column name or its position (1, 2, ...), not 1.5",
        ),
        (
            {"columns": {**COLUMNS, "concept": True}},
            "exports.p.columns.concept: must be the ERP's column name or its position (1, 2, ...), not True",
        ),
        (
            {"columns": {**COLUMNS, "concept": 0}},
            "exports.p.columns.concept: a position must be between 1 and 16384, not 0",
        ),
        ({"columns": {**COLUMNS, "concept": " "}}, "exports.p.columns.concept: must not be empty"),
        (
            {"header": False, "columns": {"account_number": 1, "amount": 2, "email": "Correo"}},
            "exports.p.columns.email: names a column ('Correo') but header = false: give its position (1, 2, ...)",
        ),
        (
            {"columns": {"account_number": 1, "email": 3}},
            "exports.p.columns.amount: is required (the ERP column that holds it)",
        ),
        ({"columns": COLUMNS, "header": "yes"}, "exports.p.header: must be true or false, not 'yes'"),
        (
            {"columns": COLUMNS, "decimal_separator": ";"},
            "exports.p.decimal_separator: must be one of '.', ',', not ';'",
        ),
        (
            {"columns": COLUMNS, "thousands_separator": "_"},
            "exports.p.thousands_separator: must be one of '', '.', ',', ' ', \"'\", not '_'",
        ),
        (
            {"columns": COLUMNS, "decimal_separator": ",", "thousands_separator": ","},
            "exports.p.thousands_separator: must differ from decimal_separator (',')",
        ),
        ({"columns": COLUMNS, "origin_currency": 320}, "exports.p.origin_currency: must be a string, not int"),
        (
            {"columns": {**COLUMNS, "integration": "Banco"}, "integration": "sandbox"},
            "exports.p.integration: give either integration or columns.integration, not both",
        ),
        ({"columns": COLUMNS, "batch_id": "row"}, "exports.p.batch_id: must be one of 'file', 'column', not 'row'"),
        (
            {"columns": COLUMNS, "batch_id": "column"},
            'exports.p.batch_id: "column" needs columns.batch_id (the ERP column holding it)',
        ),
        (
            {"columns": {**COLUMNS, "batch_id": "Lote"}},
            'exports.p.columns.batch_id: is mapped, so set batch_id = "column" (the default is "file")',
        ),
        ({"columns": COLUMNS, "format": "xls"}, "exports.p.format: must be one of 'csv', 'xlsx', not 'xls'"),
        ({"columns": COLUMNS, "encoding": 1252}, "exports.p.encoding: must be a string, not int"),
        (
            {"columns": COLUMNS, "encoding": "klingon"},
            "exports.p.encoding: unknown encoding 'klingon' (e.g. utf-8, cp1252, latin-1)",
        ),
        (
            {"columns": COLUMNS, "delimiter": ";;"},
            "exports.p.delimiter: must be one character (not a quote or line break), not ';;'",
        ),
        ({"columns": COLUMNS, "total_label": "  "}, "exports.p.total_label: must not be empty"),
        ({"columns": COLUMNS, "sheet": 2}, "exports.p.sheet: must be a string, not int"),
        (
            {"columns": COLUMNS, "skip_rows": -1},
            "exports.p.skip_rows: must be a whole number of rows from 0 to 1000, not -1",
        ),
        (
            {"columns": COLUMNS, "footer_rows": True},
            "exports.p.footer_rows: must be a whole number of rows from 0 to 1000, not True",
        ),
    ],
)
def test_each_kind_of_profile_problem_is_named_by_its_key(table: object, expected: str) -> None:
    assert problems(table) == [expected]


def test_one_erp_column_for_two_of_our_fields_names_both() -> None:
    assert problems({"columns": {**COLUMNS, "concept": " monto"}}) == [
        "exports.p.columns.amount: 'Monto' is mapped to more than one of our fields",
        "exports.p.columns.concept: 'monto' is mapped to more than one of our fields",
    ]


def test_an_unusable_column_is_not_also_reported_as_missing_and_the_order_is_the_tables() -> None:
    table: dict[str, Any] = {
        "footer_rows": 2000,
        "encoding": "klingon",
        "columns": {"amount": "", "account_number": "Cuenta", "monto": [1]},
        "header": 1,
    }
    assert problems(table) == [
        "exports.p.header: must be true or false, not 1",
        "exports.p.columns.amount: must not be empty",
        "exports.p.columns.monto: not one of our fields (did you mean 'amount'?)",
        "exports.p.columns.email: is required (the ERP column that holds it)",
        "exports.p.encoding: unknown encoding 'klingon' (e.g. utf-8, cp1252, latin-1)",
        "exports.p.footer_rows: must be a whole number of rows from 0 to 1000, not 2000",
    ]


def test_a_valid_table_becomes_the_profile() -> None:
    profile = parse_profile(
        "planilla",
        {
            "encoding": "cp1252",
            "delimiter": ";",
            "skip_rows": 1,
            "footer_rows": 2,
            "total_label": " TOTAL ",
            "decimal_separator": ",",
            "thousands_separator": ".",
            "origin_account": "3001234567",
            "origin_currency": "GTQ",
            "columns": {**COLUMNS, "employee_reference": 1, "batch_id": "Lote"},
            "batch_id": "column",
        },
    )
    assert profile.columns == {
        "account_number": ColumnRef(name="Cuenta"),
        "amount": ColumnRef(name="Monto"),
        "email": ColumnRef(name="Correo"),
        "employee_reference": ColumnRef(position=1),
        "batch_id": ColumnRef(name="Lote"),
    }
    assert profile.numbers == NumberStyle(",", ".")
    assert (profile.encoding, profile.delimiter, profile.skip_rows, profile.footer_rows) == ("cp1252", ";", 1, 2)
    assert (profile.total_label, profile.batch_id, profile.format, profile.header) == ("TOTAL", "column", None, True)
    assert profile.constants == {"origin_account_number": "3001234567", "origin_currency": "GTQ"}
