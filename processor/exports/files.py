"""An export file's rows as its profile says: a CSV in any encoding and delimiter, or an `.xlsx` workbook.

`read_rows` yields `(row number, cells)` for `processor.exports.mapping.RowMapper`, the row number as a spreadsheet
program shows it (or, for our own CSV layout, the file line the row ends on).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from processor.exports.csv_rows import ByteCount, csv_rows
from processor.exports.errors import ExportFileError
from processor.exports.mapping import Cell
from processor.exports.profile import ExportProfile, format_for, kind_mismatch
from processor.exports.xlsx_rows import xlsx_rows


def read_rows(
    path: Path, profile: ExportProfile, *, counted: ByteCount | None = None
) -> Iterator[tuple[int, Sequence[Cell]]]:
    """The rows of `path` read as the profile says (CSV or workbook); ExportFileError when it cannot be opened.
    A CSV may also raise UnicodeDecodeError or csv.Error while it is read; `counted` counts its bytes read."""
    if path.suffix.lower() == ".xls" and profile.format is None:
        raise ExportFileError(f"{path.name}: an Excel 97-2003 workbook (.xls) cannot be read; save it as .xlsx")
    kind = format_for(profile, path.name)
    with path.open("rb") as opened:
        problem = kind_mismatch(path.name, kind, opened.read(8))
    if problem is not None:
        raise ExportFileError(problem)
    if kind == "xlsx":
        return xlsx_rows(path, sheet=profile.sheet)
    return csv_rows(
        path,
        encoding=profile.encoding,
        delimiter=profile.delimiter,
        skip_rows=profile.skip_rows,
        lines=profile.unit == "line",
        counted=counted,
    )
