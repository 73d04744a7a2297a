"""An ERP export read through an export profile (`dispersion submit --profile NAME`, `dispersion exports check`).

The file reader (`processor.exports.read_rows`) gives rows of cells, `processor.exports.mapping.RowMapper` turns
them into our fields, and the rows then go through `processor.exports.layout.read_csv` as if they were our own CSV
layout, so batch values, defaults and every later check are the ones documented for that layout; problems name the
row and the ERP's column. A workbook in our own layout is read through a built-in profile (`workbook_profile`).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from processor.exports.errors import ExportFileError, ExportLimitError
from processor.exports.files import read_rows
from processor.exports.layout import BatchFields, Export, ExportError, Problem, normalise_column, read_csv
from processor.exports.mapping import Explanation, MappingResult, RowMapper, RowProblem
from processor.exports.profile import (
    BATCH_COLUMNS,
    CONSTANTS,
    REQUIRED_COLUMNS,
    ROW_COLUMNS,
    ColumnRef,
    ExportProfile,
    ProfileError,
    format_for,
    parse_profile,
)

UNIT = "row"
# Validation's field names for a transaction -> our column.
_VALIDATION_FIELDS = {
    "destination_account.account_number": "account_number",
    "destination_account.account_type": "account_type",
    "destination_account.currency": "currency",
    "destination_account.email": "email",
    "amount": "amount",
    "concept": "concept",
    "employee_reference": "employee_reference",
}
_OPTION_OF = {target: key for key, target in CONSTANTS.items()}


def workbook_profile(path: Path) -> ExportProfile:
    """The profile of a workbook in our own layout (`submit export.xlsx` without `--profile`): the first sheet's
    first row holds our column names (docs/submit.md, "CSV layout", matched as there); ExportError naming the
    required columns it lacks."""
    header: list[str] = []
    row = 1
    try:
        for number, cells in read_rows(path, ExportProfile("(our columns)", {}, format="xlsx")):
            if any(isinstance(cell, str) and cell.strip() for cell in cells):
                row = number
                header = [cell if isinstance(cell, str) else "" for cell in cells]
                break
    except ExportLimitError:
        raise  # not a problem of the data: the file is refused as a whole (exit 2)
    except ExportFileError as exc:
        raise ExportError([Problem(None, "file", str(exc))]) from None
    known = {*REQUIRED_COLUMNS, *ROW_COLUMNS, *BATCH_COLUMNS}
    columns: dict[str, ColumnRef] = {}
    for text in header:
        name = normalise_column(text)
        if name in known and name not in columns:
            columns[name] = ColumnRef(name=text.strip())
    missing = [name for name in REQUIRED_COLUMNS if name not in columns]
    if missing:
        why = "required column is missing from the header row (our layout; the ERP's own headers need --profile)"
        raise ExportError([Problem(row, name, why, UNIT) for name in missing])
    source: Literal["file", "column"] = "column" if "batch_id" in columns else "file"
    return ExportProfile("(our columns)", columns, format="xlsx", batch_id=source)


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


def map_rows(path: Path, profile: ExportProfile, *, on_row: Callable[[int], None] | None = None) -> MappingResult:
    """Read the whole file through the profile; ExportError when the file itself cannot be read."""
    mapper = RowMapper(profile, fixed_width=format_for(profile, path.name) == "csv")
    count = 0
    try:
        for number, cells in read_rows(path, profile):
            mapper.feed(number, cells)
            count += 1
            if on_row is not None:
                on_row(count)
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start : exc.start + 1].hex()
        raise ExportError(
            [Problem(None, "file", f"cannot be read as {profile.encoding}: byte 0x{byte} ({exc.reason}); set encoding")]
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
    on_row: Callable[[int], None] | None = None,
) -> Export:
    """The batch in `path` read through `profile`, like `read_csv` reads our layout: ExportError listing every
    problem when it cannot be built, else an Export whose remaining problems `checks.check` reports."""
    result = map_rows(path, profile, on_row=on_row)
    if explain is not None:
        explain(result.explanation)
    found = [_problem(problem) for problem in result.problems]
    if (result.explanation.header_row is None and profile.header) or len(result.labels) < len(profile.columns):
        raise ExportError(found)  # no header, or columns missing from it: no row can be read
    current = [0]

    def rows() -> Iterator[list[str]]:
        yield list(result.fields)
        for row in result.rows:
            current[0] = row.row
            yield list(row.values)

    try:
        export = read_csv(
            rows(),
            fields,
            requested_at=requested_at,
            defaults=batch_defaults(profile, defaults),
            line_of=lambda: current[0],
        )
    except ExportError as exc:
        raise ExportError(found + [_renamed(problem, result.labels) for problem in exc.problems]) from None
    # read_csv's own amount problems are the unreadable amounts already reported, with the reason, above.
    later = [_renamed(problem, result.labels) for problem in export.problems if problem.field != "amount"]
    labels = {name: result.labels[ours] for name, ours in _VALIDATION_FIELDS.items() if ours in result.labels}
    return replace(export, problems=tuple(found + later), labels=labels, unit=UNIT, ignored_columns=())


def _problem(problem: RowProblem) -> Problem:
    return Problem(problem.row, problem.column, problem.reason, UNIT)


def _renamed(problem: Problem, labels: Mapping[str, str]) -> Problem:
    """A problem `read_csv` found, named by the ERP's column (or the profile key) instead of our column."""
    if problem.line is None and problem.field in _OPTION_OF:
        hint = f" (or {_OPTION_OF[problem.field]} in the profile)"
        return replace(problem, message=problem.message + hint, unit=UNIT)
    message = problem.message.replace(" on line ", f" on {UNIT} ")  # the first row holding another batch value
    return replace(problem, field=labels.get(problem.field, problem.field), message=message, unit=UNIT)


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
