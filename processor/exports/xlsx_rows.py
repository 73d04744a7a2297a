"""`.xlsx` exports, read with openpyxl in read-only (streaming) mode: one row in memory at a time.

Numbers are handed over as the decimal text the workbook stored plus the cell's number format
(`NumberCell`), never as a Python float: openpyxl's own reader turns `<v>0.30000000000000004</v>` into a float,
so the sheet is parsed with a subclass of its parser that keeps that text. Formulas give their saved result
(`data_only`); a formula with no saved result, and error values such as `#N/A`, become `ErrorCell`s. Text cells
(shared or inline strings) stay text, leading zeros included.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from openpyxl import load_workbook
from openpyxl.cell.read_only import ReadOnlyCell
from openpyxl.utils.exceptions import InvalidFileException
from openpyxl.worksheet._reader import FORMULA_TAG, VALUE_TAG, WorkSheetParser

from processor.domain.export_rows import Cell, ErrorCell, NumberCell
from processor.exports.errors import ExportFileError

NO_SAVED_RESULT = "a formula with no saved result (open the file in the spreadsheet program and save it again)"


class _Stored(str):
    """The text of a number cell exactly as the workbook stored it."""

    __slots__ = ()


class _StoredNumberParser(WorkSheetParser):
    """openpyxl's sheet parser, keeping each number's stored text and marking formulas without a result."""

    def parse_cell(self, element: Any) -> dict[str, Any]:
        cell: dict[str, Any] = dict(super().parse_cell(element))
        if element.get("t", "n") == "n":
            stored = element.findtext(VALUE_TAG)
            if stored:
                cell["value"] = _Stored(stored)
        if cell["value"] is None and element.find(FORMULA_TAG) is not None:
            cell["value"] = ErrorCell(NO_SAVED_RESULT)
        return cell


def xlsx_rows(path: Path, *, sheet: str | None = None) -> Iterator[tuple[int, list[Cell]]]:
    """Every row of the sheet (`sheet`, else the first) that holds a cell, with its row number; missing cells
    are empty text. ExportFileError when the file is not a workbook or has no such sheet."""
    try:
        workbook = load_workbook(path, read_only=True, data_only=True)
    except (zipfile.BadZipFile, InvalidFileException, KeyError, ValueError) as exc:
        raise ExportFileError(f"{path.name}: not an .xlsx workbook ({exc})") from None
    try:
        if sheet is None:
            worksheet = workbook.worksheets[0]
        elif sheet in workbook.sheetnames:
            worksheet = workbook[sheet]
        else:
            names = ", ".join(repr(name) for name in workbook.sheetnames)
            raise ExportFileError(f"{path.name}: no sheet named {sheet!r} (sheets: {names})")
        try:
            yield from _rows(workbook, worksheet)
        except (SyntaxError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # ParseError: SyntaxError
            raise ExportFileError(f"{path.name}: the sheet cannot be read ({exc.__class__.__name__}: {exc})") from None
    finally:
        workbook.close()


def _rows(workbook: Any, worksheet: Any) -> Iterator[tuple[int, list[Cell]]]:
    formats: dict[int, str] = {}

    def number_format(style_id: int) -> str:
        if style_id not in formats:
            formats[style_id] = str(ReadOnlyCell(worksheet, 1, 1, None, "n", style_id).number_format)
        return formats[style_id]

    # openpyxl's read-only worksheet parses with its own parser; these are the arguments it passes it.
    with worksheet._get_source() as source:
        parser = _StoredNumberParser(
            source,
            worksheet._shared_strings,
            data_only=True,
            epoch=workbook.epoch,
            date_formats=workbook._date_formats,
            timedelta_formats=workbook._timedelta_formats,
        )
        for number, parsed in parser.parse():
            if not parsed:
                yield number, []
                continue
            cells: list[Cell] = [""] * max(cell["column"] for cell in parsed)
            for cell in parsed:
                cells[cell["column"] - 1] = _cell(cell, number_format)
            yield number, cells


def _cell(cell: dict[str, Any], number_format: Any) -> Cell:
    value = cell["value"]
    if value is None:
        return ""
    if isinstance(value, _Stored):
        return NumberCell(str(value), number_format(cell["style_id"] or 0))
    if isinstance(value, ErrorCell):
        return value
    if cell["data_type"] == "e":
        return ErrorCell(f"the error value {value}")
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, datetime | date | time | timedelta):
        return ErrorCell(f"a date or time ({value}), not a number or text")
    return str(value)
