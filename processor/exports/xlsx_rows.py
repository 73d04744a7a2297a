"""`.xlsx` exports, read with openpyxl in read-only (streaming) mode: one row in memory at a time.

Numbers are handed over as the decimal text the workbook stored plus the cell's number format
(`NumberCell`), never as a Python float: openpyxl's own reader turns `<v>0.30000000000000004</v>` into a float,
so the sheet is parsed with a subclass of its parser that keeps that text. Formulas give their saved result
(`data_only`); a formula with no saved result, and error values such as `#N/A`, become `ErrorCell`s. Text cells
(shared or inline strings) stay text, leading zeros included.

A workbook is a zip of XML parts, so a small file can be huge once read. Before openpyxl opens it, every part is
checked (`guard`): at most `MAX_UNCOMPRESSED` bytes in all once uncompressed, the shared strings at most
`MAX_SHARED_STRINGS_BYTES` and `MAX_SHARED_STRINGS` strings (openpyxl keeps all of them in memory), and no DTD or
entity declaration in any part (no export has one: refusing them stops entity expansion, as defusedxml does).
While streaming, the first row past `max_rows` stops the reading. Each is an `ExportLimitError` naming the limit.
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

from processor.exports.errors import ExportFileError, ExportLimitError
from processor.exports.mapping import Cell, ErrorCell, NumberCell

MAX_UNCOMPRESSED = 512 * 1024 * 1024
MAX_SHARED_STRINGS_BYTES = 64 * 1024 * 1024
MAX_SHARED_STRINGS = 1_000_000
MAX_ROWS = 100_000 + 100  # a batch's most transfers, plus headers and titles above them
_CHUNK = 1024 * 1024
_DECLARATIONS = (b"<!DOCTYPE", b"<!ENTITY")

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


def _scan(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> int:
    """Read one part in chunks: refuse a DTD or an entity declaration; the number of shared strings it holds."""
    count, tail = 0, b""
    with archive.open(info) as part:
        while chunk := part.read(_CHUNK):
            window = tail + chunk
            if any(mark in window for mark in _DECLARATIONS):
                raise ExportLimitError(f"{name}: {info.filename} declares a DTD or entities, which no export has")
            count += window.count(b"<si>") + window.count(b"<si ") - tail.count(b"<si>") - tail.count(b"<si ")
            tail = window[-16:]
    return count


def guard(path: Path) -> None:
    """The checks before a workbook is opened (see the module docstring); ExportLimitError past a limit."""
    try:
        with zipfile.ZipFile(path) as archive:
            parts = archive.infolist()
            total = sum(info.file_size for info in parts)
            if total > MAX_UNCOMPRESSED:
                raise ExportLimitError(
                    f"{path.name}: {total:,} bytes once uncompressed; at most {MAX_UNCOMPRESSED:,} are read"
                )
            for info in parts:
                if not info.filename.lower().endswith((".xml", ".rels", ".vml")):
                    continue
                shared = info.filename.lower().endswith("sharedstrings.xml")
                if shared and info.file_size > MAX_SHARED_STRINGS_BYTES:
                    raise ExportLimitError(
                        f"{path.name}: its shared strings take {info.file_size:,} bytes; at most"
                        f" {MAX_SHARED_STRINGS_BYTES:,} are read"
                    )
                strings = _scan(archive, info, path.name)
                if shared and strings > MAX_SHARED_STRINGS:
                    raise ExportLimitError(
                        f"{path.name}: {strings:,} shared strings; at most {MAX_SHARED_STRINGS:,} are read"
                    )
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise ExportFileError(f"{path.name}: not an .xlsx workbook ({exc})") from None


def xlsx_rows(path: Path, *, sheet: str | None = None, max_rows: int = MAX_ROWS) -> Iterator[tuple[int, list[Cell]]]:
    """Every row of the sheet (`sheet`, else the first) that holds a cell, with its row number; missing cells
    are empty text. ExportFileError when the file is not a workbook or has no such sheet; ExportLimitError past
    a limit (checked before opening, and at the first row past `max_rows`)."""
    guard(path)
    try:
        workbook = load_workbook(path, read_only=True, data_only=True)
    except (zipfile.BadZipFile, InvalidFileException, KeyError, ValueError, SyntaxError) as exc:  # ParseError too
        raise ExportFileError(f"{path.name}: not an .xlsx workbook ({exc.__class__.__name__}: {exc})") from None
    try:
        if sheet is None:
            worksheet = workbook.worksheets[0]
        elif sheet in workbook.sheetnames:
            worksheet = workbook[sheet]
        else:
            names = ", ".join(repr(name) for name in workbook.sheetnames)
            raise ExportFileError(f"{path.name}: no sheet named {sheet!r} (sheets: {names})")
        try:
            for count, row in enumerate(_rows(workbook, worksheet), 1):
                if count > max_rows:
                    raise ExportLimitError(
                        f"{path.name}: more than {max_rows:,} rows, where at most {max_rows:,} are read (a batch"
                        " holds at most 100,000 transfers: split the export)"
                    )
                yield row
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
