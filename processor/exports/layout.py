"""The batch an export becomes (docs/submit.md), and the JSON layout read into one.

`build_export` builds the batch from an export's rows once they are in our fields (`processor.exports.mapping`:
our own CSV layout and workbooks through the built-in profile `our_layout`, an ERP's export through its profile),
so batch values, defaults and the checks are the same for all. `read_json` reads the `processor.domain.batch`
layout. Every problem is reported with its line (or row), all at once (`ExportError`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
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
from processor.exports.mapping import MappingResult
from processor.exports.profile import BATCH_COLUMNS, CONSTANTS, ExportProfile

SOURCE: Final = "dispersion-submit"
# Validation's field names for a transaction -> our column.
_VALIDATION_FIELDS: Final = {
    "destination_account.account_number": "account_number",
    "destination_account.account_type": "account_type",
    "destination_account.currency": "currency",
    "destination_account.email": "email",
    "amount": "amount",
    "concept": "concept",
    "employee_reference": "employee_reference",
}
_OPTION_OF: Final = {target: key for key, target in CONSTANTS.items()}  # batch value -> the profile key setting it


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


def build_export(
    result: MappingResult,
    profile: ExportProfile,
    fields: BatchFields,
    *,
    requested_at: datetime,
    defaults: BatchFields,
) -> Export:
    """The batch of an export's mapped rows: each batch value from the command line (`fields`), else the file's
    batch column (every row that fills it must agree), else `defaults`. ExportError when a required one is
    missing, listing it with every problem of the rows; else an Export whose problems `checks.check` reports."""
    unit, labels = profile.unit, result.labels
    problems = [Problem(found.row, found.column, found.reason, unit) for found in result.problems]
    index = {name: position for position, name in enumerate(result.fields)}
    batch_columns = [(name, index[name]) for name in BATCH_COLUMNS if name in index]
    batch_values: dict[str, tuple[str, int]] = {}  # batch column -> (value, the first row holding it)
    account, email, concept = index["account_number"], index["email"], index["concept"]
    kind, currency, reference = (index.get(name) for name in ("account_type", "currency", "employee_reference"))
    transfers: list[Transfer] = []
    lines: list[int] = []
    unreadable: set[int] = set()
    for row in result.rows:
        values = row.values
        for name, position in batch_columns:
            value = values[position]
            if value:
                first = batch_values.setdefault(name, (value, row.row))
                if first[0] != value:
                    message = f"{value!r} differs from {first[0]!r} on {unit} {first[1]} (one file, one batch)"
                    problems.append(Problem(row.row, labels.get(name, name), message, unit))
        amount = row.amount
        if amount is None:
            unreadable.add(len(transfers))  # reported by the mapping, with the reason
            amount = Decimal(0)
        transfers.append(
            Transfer(
                account_number=values[account],
                account_type=(kind is not None and values[kind]) or DEFAULT_DESTINATION_ACCOUNT_TYPE,
                currency=values[currency] if currency is not None else "",  # else the origin's, below
                email=values[email],
                amount=amount,
                concept=values[concept],
                employee_reference=(reference is not None and values[reference]) or None,
            )
        )
        lines.append(row.row)
    problems.sort(key=lambda problem: problem.line or 0)  # by row; a row's cells before its batch values
    batch = _batch(transfers, batch_values, fields, defaults, profile, labels, problems, requested_at)
    return Export(
        batch,
        tuple(lines),
        tuple(result.explanation.ignored_columns) if profile.ours else (),
        problems=tuple(problems),
        unreadable_amounts=frozenset(unreadable),
        labels=_validation_labels(profile, labels),
        unit=unit,
    )


def _validation_labels(profile: ExportProfile, labels: Mapping[str, str]) -> dict[str, str]:
    """How validation's problems name a transaction's fields: an ERP's columns; our layout keeps validation's."""
    if profile.ours:
        return {}
    return {name: labels[ours] for name, ours in _VALIDATION_FIELDS.items() if ours in labels}


def _batch(
    transfers: list[Transfer],
    batch_values: Mapping[str, tuple[str, int]],
    fields: BatchFields,
    defaults: BatchFields,
    profile: ExportProfile,
    labels: Mapping[str, str],
    problems: list[Problem],
    requested_at: datetime,
) -> PayrollBatch:
    """The batch of the rows read: batch values from the command line, else the file's columns, else the
    defaults; ExportError when a required one is missing (with the rows' problems)."""

    def pick(name: str) -> str | None:
        given = getattr(fields, name)
        if given is not None:
            return str(given)
        if name in batch_values:
            return batch_values[name][0]
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
            key = None if profile.ours else _OPTION_OF.get(name)
            also = f" (or {key} in the profile)" if key else ""
            missing.append(Problem(None, name, f"is required: give {hint}, or a {name} column{also}", profile.unit))
    if missing:
        raise ExportError(missing + problems)
    assert batch_id and integration and origin_number and origin_currency
    transfers = [t if t.currency else replace(t, currency=origin_currency) for t in transfers]
    day = pick("execute_on")
    execute_on = iso_day(day) if day else None
    if day and execute_on is None:
        where = batch_values["execute_on"][1] if "execute_on" in batch_values else None
        message = f"expected a date such as 2026-11-30 (YYYY-MM-DD), got {day!r}"
        problems.append(Problem(where, labels.get("execute_on", "execute_on"), message, profile.unit))
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
