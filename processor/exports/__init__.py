"""File readers for ERP exports: a CSV in any encoding and delimiter, an `.xlsx` workbook (openpyxl, streaming).

Each yields `(row number, cells)` for `processor.domain.export_rows.RowMapper`, the row number as a spreadsheet
program shows it. Imports only `processor.domain` of ours.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from processor.domain.export_profile import ExportProfile, format_for, kind_mismatch
from processor.domain.export_rows import Cell
from processor.exports.csv_rows import csv_rows
from processor.exports.errors import ExportFileError, ExportLimitError
from processor.exports.xlsx_rows import xlsx_rows

__all__ = ["ExportFileError", "ExportLimitError", "csv_rows", "read_rows", "xlsx_rows"]


def read_rows(path: Path, profile: ExportProfile) -> Iterator[tuple[int, Sequence[Cell]]]:
    """The rows of `path` read as the profile says (CSV or workbook); ExportFileError when it cannot be opened.
    A CSV may also raise UnicodeDecodeError or csv.Error while it is read."""
    if path.suffix.lower() == ".xls" and profile.format is None:
        raise ExportFileError(f"{path.name}: an Excel 97-2003 workbook (.xls) cannot be read; save it as .xlsx")
    kind = format_for(profile, path.name)
    with path.open("rb") as opened:
        problem = kind_mismatch(path.name, kind, opened.read(8))
    if problem is not None:
        raise ExportFileError(problem)
    if kind == "xlsx":
        return xlsx_rows(path, sheet=profile.sheet)
    return csv_rows(path, encoding=profile.encoding, delimiter=profile.delimiter, skip_rows=profile.skip_rows)
