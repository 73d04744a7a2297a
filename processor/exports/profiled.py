"""An export read through an export profile: an ERP's (`dispersion submit --profile NAME`, `dispersion exports
check`), or the built-in `our_layout` (a CSV or workbook in our own layout, read without `--profile`).

The file reader (`processor.exports.files.read_rows`) gives rows of cells, `processor.exports.mapping.RowMapper`
turns them into our fields, and `processor.exports.layout.build_export` builds the batch from them, so batch values,
defaults and every later check are the ones documented for our layout; problems name the row (our CSV: the line)
and the ERP's column (ours: our column).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from processor.exports.csv_rows import ByteCount
from processor.exports.errors import ExportFileError, ExportLimitError
from processor.exports.files import read_rows
from processor.exports.layout import BatchFields, Export, ExportError, Problem, build_export
from processor.exports.mapping import Explanation, MappingResult, RowMapper
from processor.exports.profile import ExportProfile, ProfileError, format_for, parse_profile


def profile_named(exports: object, name: str, source: str) -> ExportProfile:
    """The profile `[exports.NAME]` of a configuration's raw `exports` table; ProfileError otherwise."""
    if not isinstance(exports, Mapping) or not exports:
        raise ProfileError([f"{source}: no [exports.NAME] profiles are configured"])
    if name not in exports:
        known = ", ".join(sorted(str(key) for key in exports))
        raise ProfileError([f"{source}: no profile {name!r} (configured: {known})"])
    try:
        return parse_profile(name, exports[name])
    except ProfileError as exc:
        raise ProfileError([f"{source}: {problem}" for problem in exc.problems]) from None


def batch_defaults(profile: ExportProfile, defaults: BatchFields) -> BatchFields:
    """The profile's constant batch values over the command's defaults (the command line still wins)."""
    return replace(defaults, **profile.constants)


def map_rows(path: Path, profile: ExportProfile, *, on_row: Callable[[int, int], None] | None = None) -> MappingResult:
    """Read the whole file through the profile (`on_row(rows, bytes)`: the rows and, of a CSV, the bytes read so
    far); ExportError when the file itself cannot be read."""
    mapper = RowMapper(profile, fixed_width=format_for(profile, path.name) == "csv")
    counted = ByteCount()
    count = 0
    try:
        for number, cells in read_rows(path, profile, counted=counted):
            mapper.feed(number, cells)
            count += 1
            if on_row is not None:
                on_row(count, counted.count)
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start : exc.start + 1].hex()
        fix = "give --encoding" if profile.ours else "set encoding"
        raise ExportError(
            [Problem(None, "file", f"cannot be read as {profile.encoding}: byte 0x{byte} ({exc.reason}); {fix}")]
        ) from None
    except csv.Error as exc:
        raise ExportError([Problem(None, "file", f"cannot be read as CSV: {exc}")]) from None
    except ExportLimitError:
        raise  # not a problem of the data: the file is refused as a whole (exit 2)
    except ExportFileError as exc:
        raise ExportError([Problem(None, "file", str(exc))]) from None
    return mapper.finish()


def read_profiled(
    path: Path,
    profile: ExportProfile,
    fields: BatchFields,
    *,
    requested_at: datetime,
    defaults: BatchFields,
    explain: Callable[[Explanation], None] | None = None,
    on_row: Callable[[int, int], None] | None = None,
) -> Export:
    """The batch in `path` read through `profile` (an ERP's, or `our_layout`): ExportError listing every problem
    when it cannot be built, else an Export whose remaining problems `checks.check` reports."""
    result = map_rows(path, profile, on_row=on_row)
    if explain is not None:
        explain(result.explanation)
    if not result.readable:  # no header, or columns missing from it: no row could be read
        raise ExportError([Problem(found.row, found.column, found.reason, profile.unit) for found in result.problems])
    return build_export(result, profile, fields, requested_at=requested_at, defaults=batch_defaults(profile, defaults))


def explain_lines(explanation: Explanation, path: Path, constants: Mapping[str, Any]) -> list[str]:
    """`--explain`: where the header was, ERP column -> our field -> value for the first rows, the total."""
    profile = explanation.profile
    kind = format_for(profile, path.name)
    numbers = profile.numbers.example
    how = (
        f"sheet {profile.sheet or '(first)'}"
        if kind == "xlsx"
        else f"encoding {profile.encoding}, delimiter {profile.delimiter or '(detected)'!r}"
    )
    lines = [f"profile {profile.name}: {path.name} as {kind} ({how}); numbers written like {numbers}"]
    if explanation.skipped_rows:
        lines.append(f"skipped row(s) above the header: {_ranges(explanation.skipped_rows)}")
    if explanation.header_row is not None:
        lines.append(f"header: row {explanation.header_row}")
    elif not profile.header:
        lines.append("no header row: columns by position")
    named = [*explanation.columns, *(("(profile)", f"{ours} = {value}") for ours, value in constants.items())]
    if named:
        lines.append("columns:")
        width = max(len(column) for column, _ in named)
        lines.extend(f"  {column:<{width}} -> {ours}" for column, ours in named)
    if explanation.ignored_columns:
        lines.append(f"ignored column(s): {', '.join(explanation.ignored_columns)}")
    for number, cells in explanation.rows:
        lines.append(f"row {number}:")
        width = max((len(cell.column) for cell in cells), default=0)
        field_width = max((len(cell.field) for cell in cells), default=0)
        for cell in cells:
            lines.append(f"  {cell.column:<{width}} -> {cell.field:<{field_width}} {cell.held} -> {cell.value}")
    if explanation.data_rows > len(explanation.rows):
        lines.append(f"... {explanation.data_rows - len(explanation.rows):,} more row(s)")
    total = explanation.total
    if total is not None and (total.stated is None or total.computed is None):
        stated = "unreadable" if total.stated is None else total.stated
        lines.append(f"total row {total.row}: {stated} (not checked: an amount is unreadable)")
    elif total is not None:
        verdict = "matches" if total.matches else "DIFFERS"
        lines.append(f"total row {total.row}: {total.stated} (sum of {total.rows:,} rows: {total.computed}) {verdict}")
    elif profile.total_label is not None:
        lines.append(f"no total row (no row starting with {profile.total_label!r})")
    if explanation.footer_rows:
        lines.append(f"footer row(s) ignored: {_ranges(explanation.footer_rows)}")
    return lines


def _ranges(numbers: list[int]) -> str:
    """`1-3, 7`."""
    parts: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(parts)
