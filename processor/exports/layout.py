"""Our own export layout (docs/submit.md, "CSV layout" and "JSON layout") read into a batch.

`read_csv` builds the batch from rows of our columns: from a CSV file, and from any export read through a profile
(`processor.exports.profiled`: the mapped rows are our columns), so batch values, defaults and the checks are the
same for all. `read_json` reads the `processor.domain.batch` layout. Every problem is reported with its line (or
row), all at once (`ExportError`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Final

from processor.domain.batch import (
    DEFAULT_DESTINATION_ACCOUNT_TYPE,
    DEFAULT_ORIGIN_ACCOUNT_TYPE,
    BatchParseError,
    OriginAccount,
    PayrollBatch,
    Transfer,
    batch_from_dict,
    iso_day,
    loads_exact,
)
from processor.domain.identity import payroll_id
from processor.exports.profile import BATCH_COLUMNS, REQUIRED_COLUMNS, ROW_COLUMNS

SOURCE: Final = "dispersion-submit"

# Digits, optionally '.' and decimals, optional leading minus (validation then refuses it with its own reason).
_AMOUNT_TEXT: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


class ExportError(Exception):
    """The export cannot become a batch; `problems` lists everything found, by line."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(f"{len(problems)} problem(s) in the export")
        self.problems = problems


@dataclass(frozen=True)
class Problem:
    """One problem in the export; `line` is the 1-based line in the file (None: the file as a whole), or the row
    (`unit` "row") of an export read through a profile."""

    line: int | None
    field: str
    message: str
    unit: str = "line"

    def __str__(self) -> str:
        where = f"{self.unit} {self.line}" if self.line is not None else "export"
        return f"{where}: {self.field}: {self.message}"


@dataclass(frozen=True)
class BatchFields:
    """Batch-level values: from the command line, else the file's batch columns (CSV) or fields (JSON), else
    the defaults named in docs/submit.md."""

    batch_id: str | None = None
    integration: str | None = None
    file_reference: str | None = None
    origin_account_number: str | None = None
    origin_account_type: str | None = None
    origin_currency: str | None = None
    execute_on: str | None = None  # YYYY-MM-DD: a scheduled batch, paid on that day (integration's time zone)


@dataclass(frozen=True)
class Export:
    """A parsed export: the batch, and for each transaction the file line it came from (CSV only)."""

    batch: PayrollBatch
    lines: tuple[int, ...] | None = None
    ignored_columns: tuple[str, ...] = ()
    size: int = 0
    problems: tuple[Problem, ...] = ()  # row problems found while reading (validation adds its own)
    unreadable_amounts: frozenset[int] = frozenset()  # transactions whose amount could not be read
    labels: Mapping[str, str] = field(default_factory=dict)  # validation field -> the ERP's column (profiles)
    unit: str = "line"  # how `lines` count: file lines, or rows (profiles)


def normalise_column(name: str) -> str:
    """A header as our layout matches it: trimmed, lower case, runs of spaces and hyphens as `_`."""
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


# The batch id a reader uses until the export is read: then `settle_batch_id` puts the id derived from what the
# payroll pays in its place (`processor.domain.identity.payroll_id`).
FROM_CONTENT: Final = "(from the transfers)"


def file_defaults(integrations: Collection[str] | None) -> BatchFields:
    """The defaults of docs/submit.md: the batch id from the business content (`settle_batch_id`), the integration
    when the configuration has exactly one."""
    only = sorted(integrations)[0] if integrations and len(integrations) == 1 else None
    return BatchFields(batch_id=FROM_CONTENT, integration=only)


def settle_batch_id(export: Export, *, submitted_at: datetime) -> Export:
    """An export read without a batch id gets `payroll-<SHA-256 prefix of its origin, transfers and pay period>`
    (and its file reference, when that defaulted to the batch id, the same): a re-saved or re-exported file is the
    same batch in the same pay period (its `execute_on`, else the UTC month of `submitted_at`, the clock's now),
    whatever its bytes or name; next month's is another."""
    batch = export.batch
    if batch.batch_id != FROM_CONTENT:
        return export
    batch_id = payroll_id(batch, submitted_at=submitted_at)
    reference = batch_id[:40] if batch.file_reference == FROM_CONTENT[:40] else batch.file_reference
    return replace(export, batch=replace(batch, batch_id=batch_id, file_reference=reference))


def read_csv(
    rows: Iterator[list[str]],
    fields: BatchFields,
    *,
    requested_at: datetime,
    defaults: BatchFields,
    on_row: Callable[[int], object] | None = None,
    line_of: Callable[[], int] | None = None,
) -> Export:
    """Build the batch from CSV rows (the first is the header). Reports every problem (`ExportError`).

    `line_of()` gives the file line of the row just read (csv.reader's `line_num`, which counts quoted newlines);
    `on_row(count)` is called after each row (progress).
    """
    try:
        header = next(rows)
    except StopIteration:
        raise ExportError([Problem(None, "header", "the file is empty")]) from None
    names = _header_names(header)
    known = set(REQUIRED_COLUMNS) | set(ROW_COLUMNS) | set(BATCH_COLUMNS)
    ignored = tuple(name for name in names if name not in known)
    body = _Body(names)
    for row in rows:
        body.add(row, on_row=on_row, line=int(line_of()) if line_of is not None else body.count + 2)
    batch = _batch(body, fields, defaults, requested_at)
    return Export(
        batch, tuple(body.lines), ignored, problems=tuple(body.problems), unreadable_amounts=frozenset(body.unreadable)
    )


def _header_names(header: list[str]) -> list[str]:
    """The header's column names as our layout matches them; ExportError for a missing or repeated column."""
    names = [normalise_column(name) for name in header]
    if names and names[0].startswith("\ufeff"):
        names[0] = names[0][1:]
    problems: list[Problem] = []
    for column in REQUIRED_COLUMNS:
        if column not in names:
            problems.append(Problem(1, column, "required column is missing (see docs/submit.md for the layout)"))
    repeated = sorted({name for name in names if names.count(name) > 1})
    for column in repeated:
        problems.append(Problem(1, column, "column appears more than once"))
    if problems:
        raise ExportError(problems)
    return names


class _Body:
    """The data rows of our layout, read one at a time: the transfers, their lines, the batch columns' values."""

    def __init__(self, names: list[str]) -> None:
        self.width = len(names)
        self.index = {name: position for position, name in reversed(list(enumerate(names)))}
        self.batch_values: dict[str, tuple[str, int]] = {}  # batch column -> (value, first line)
        self.transfers: list[Transfer] = []
        self.lines: list[int] = []
        self.unreadable: set[int] = set()
        self.problems: list[Problem] = []
        self.count = 0

    def add(self, row: list[str], *, line: int, on_row: Callable[[int], object] | None) -> None:
        """One row of the file at `line`: a transfer, or a problem (a blank line is skipped)."""
        if not row or all(not cell.strip() for cell in row):
            return
        self.count += 1
        if on_row is not None:
            on_row(self.count)
        if len(row) != self.width:
            self.problems.append(Problem(line, "row", f"has {len(row)} fields, the header has {self.width}"))
            return

        def cell(column: str) -> str | None:
            position = self.index.get(column)
            return None if position is None else row[position].strip()

        for column in BATCH_COLUMNS:
            value = cell(column)
            if value is None or value == "":
                continue
            first = self.batch_values.setdefault(column, (value, line))
            if first[0] != value:
                message = f"{value!r} differs from {first[0]!r} on line {first[1]} (one file, one batch)"
                self.problems.append(Problem(line, column, message))
        self.transfers.append(
            Transfer(
                account_number=cell("account_number") or "",
                account_type=cell("account_type") or DEFAULT_DESTINATION_ACCOUNT_TYPE,
                currency=cell("currency") or "",  # filled with the origin's currency when the batch is built
                email=cell("email") or "",
                amount=self._amount(cell("amount") or "", line),
                concept=cell("concept") or "",
                employee_reference=cell("employee_reference") or None,
            )
        )
        self.lines.append(line)

    def _amount(self, text: str, line: int) -> Decimal:
        if _AMOUNT_TEXT.fullmatch(text):
            return Decimal(text)
        self.unreadable.add(len(self.transfers))
        self.problems.append(
            Problem(
                line,
                "amount",
                "expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)"
                if text
                else "is empty",
            )
        )
        return Decimal(0)


def _batch(body: _Body, fields: BatchFields, defaults: BatchFields, requested_at: datetime) -> PayrollBatch:
    """The batch of the rows read: batch values from the command line, else the file's columns, else the
    defaults; ExportError when a required one is missing (with the rows' problems)."""
    problems = body.problems

    def pick(name: str) -> str | None:
        given = getattr(fields, name)
        if given is not None:
            return str(given)
        if name in body.batch_values:
            return body.batch_values[name][0]
        default = getattr(defaults, name)
        return None if default is None else str(default)

    batch_id = pick("batch_id")
    integration = pick("integration")
    origin_number = pick("origin_account_number")
    origin_currency = pick("origin_currency")
    missing: list[Problem] = []
    for name, value, hint in (
        ("batch_id", batch_id, "--batch-id"),
        ("integration", integration, "--integration or a configuration with exactly one integration"),
        ("origin_account_number", origin_number, "--origin-account"),
        ("origin_currency", origin_currency, "--origin-currency"),
    ):
        if not value:
            missing.append(Problem(None, name, f"is required: give {hint}, or a {name} column"))
    if missing:
        raise ExportError(missing + problems)
    assert batch_id and integration and origin_number and origin_currency
    transfers = [t if t.currency else replace(t, currency=origin_currency) for t in body.transfers]
    day = pick("execute_on")
    execute_on = iso_day(day) if day else None
    if day and execute_on is None:
        where = body.batch_values["execute_on"][1] if "execute_on" in body.batch_values else None
        problems.append(Problem(where, "execute_on", f"expected a date such as 2026-11-30 (YYYY-MM-DD), got {day!r}"))
    return PayrollBatch(
        batch_id=batch_id,
        integration=integration,
        file_reference=pick("file_reference") or batch_id[:40],
        origin=OriginAccount(
            origin_number, pick("origin_account_type") or DEFAULT_ORIGIN_ACCOUNT_TYPE, origin_currency
        ),
        transactions=tuple(transfers),
        requested_at=requested_at,
        source=SOURCE,
        execute_on=execute_on,
    )


def read_json(data: bytes, fields: BatchFields, *, requested_at: datetime, defaults: BatchFields) -> Export:
    """Build the batch from a JSON document in the `processor.domain.batch` layout (the Avro record's field names);
    command-line fields override the document's, defaults fill what it lacks."""
    try:
        document = loads_exact(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ExportError([Problem(None, "$", f"not valid JSON: {exc}")]) from None
    if not isinstance(document, dict):
        raise ExportError([Problem(None, "$", "expected a JSON object (one batch)")])
    origin = document.get("origin_account")
    if not isinstance(origin, dict):
        origin = {}
        document["origin_account"] = origin
    top = {"batch_id": "batch_id", "integration": "integration", "file_reference": "file_reference"}
    nested = {
        "origin_account_number": "account_number",
        "origin_account_type": "account_type",
        "origin_currency": "currency",
    }
    for name, key in top.items():
        if getattr(fields, name) is not None:
            document[key] = getattr(fields, name)
        elif document.get(key) in (None, "") and getattr(defaults, name) is not None:
            document[key] = getattr(defaults, name)
    for name, key in nested.items():
        if getattr(fields, name) is not None:
            origin[key] = getattr(fields, name)
    if fields.execute_on is not None:
        document["execute_on"] = fields.execute_on
    document.setdefault("requested_at", requested_at)
    document.setdefault("source", SOURCE)
    if document.get("file_reference") in (None, "") and isinstance(document.get("batch_id"), str):
        document["file_reference"] = document["batch_id"][:40]
    try:
        batch = batch_from_dict(document)
    except BatchParseError as exc:
        raise ExportError([Problem(None, p.path, p.message) for p in exc.problems]) from None
    return Export(batch)
