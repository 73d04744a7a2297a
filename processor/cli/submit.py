"""`dispersion submit`: an ERP payroll export (CSV or JSON) becomes one `payroll.batches` event.

    dispersion submit --config dispersion.toml export.csv [--origin-account 3001234567 --origin-currency GTQ]
                      [--batch-id ID] [--integration NAME] [--file-reference REF] [--bootstrap HOST:PORT]
                      [--topic T] [--delimiter ';'] [--execute-on YYYY-MM-DD] [--dry-run] [--quiet]
    dispersion submit --config dispersion.toml --profile NAME FILE [--dry-run [--explain]] [options as above]

`--profile NAME` reads the ERP's own export (CSV in any encoding and number format, or `.xlsx`) through the
configuration's `[exports.NAME]` profile (`processor.cli.submit_profile`; docs/submit.md, "Bring your ERP's export");
`--explain` prints how its first rows were read (ERP column -> our field -> value) before the result line.
An ISO 20022 `pain.001` (`FILE.xml`) becomes one batch per payment information block (`processor.cli.submit_iso`;
docs/submit.md, "From an ERP that speaks ISO 20022").

The export is read and checked completely before anything is sent: every unreadable or invalid row is reported
(with its line in the file) and, if there is any, nothing is produced (exit 1). A valid batch is encoded as Avro
(single-object encoding, `schemas/payroll_batches.v*.avsc`), keyed by its batch id, and produced with an
idempotent producer (`acks=all`); the command returns once Kafka acknowledged it. The CSV layout is in
docs/submit.md. Progress goes to standard error; the one result line to standard output.

Exit codes: 0 produced (or valid, with `--dry-run`); 1 the export is invalid; 2 bad arguments or configuration;
3 Kafka did not acknowledge the event.
"""

from __future__ import annotations

import argparse
import codecs
import csv
import io
import re
import sys
import time
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Final, Literal

from processor.cli.submit_wait import add_wait_arguments
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
from processor.domain.duplicates import ALLOW_DUPLICATE_HEADER
from processor.domain.export_profile import (
    BATCH_COLUMNS,
    REQUIRED_COLUMNS,
    ROW_COLUMNS,
    ExportProfile,
    kind_mismatch,
    sniff_delimiter,
)
from processor.domain.identity import payroll_id
from processor.domain.money import money_text
from processor.domain.outcomes import batch_id_problem
from processor.domain.schedule import Calendar
from processor.domain.validation import DEFAULT_LIMITS, Reason, ValidationLimits, validate
from processor.exports.errors import ExportLimitError

SOURCE: Final = "dispersion-submit"
EXIT_INVALID: Final = 1
EXIT_USAGE: Final = 2
EXIT_KAFKA: Final = 3

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


class Progress:
    """Progress on standard error: one updating line on a terminal, a line every few seconds otherwise."""

    def __init__(self, stream: IO[str] | None = None, *, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0
        self._pending = False

    def update(self, text: str, *, force: bool = False) -> None:
        """Show `text` if enough time passed since the last update (always with `force`)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < (0.2 if self.tty else 3.0):
            return
        self._last = now
        if self.tty:
            self.stream.write(f"\r\x1b[K{text}")
            self._pending = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self, text: str) -> None:
        """Finish the current line with `text`."""
        if not self.enabled:
            return
        if self.tty and self._pending:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()
        self._pending = False


class _CountingReader(io.RawIOBase):
    """Counts the bytes read from a binary file, so progress can be shown as a share of the file."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        buffer[: len(data)] = data
        self.count += len(data)
        return len(data)


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
    on_row: Any = None,
    line_of: Any = None,
) -> Export:
    """Build the batch from CSV rows (the first is the header). Reports every problem (`ExportError`).

    `line_of()` gives the file line of the row just read (csv.reader's `line_num`, which counts quoted newlines);
    `on_row(count)` is called after each row (progress).
    """
    problems: list[Problem] = []
    try:
        header = next(rows)
    except StopIteration:
        raise ExportError([Problem(None, "header", "the file is empty")]) from None
    names = [normalise_column(name) for name in header]
    if names and names[0].startswith("\ufeff"):
        names[0] = names[0][1:]
    index = {name: position for position, name in reversed(list(enumerate(names)))}
    for column in REQUIRED_COLUMNS:
        if column not in index:
            problems.append(Problem(1, column, "required column is missing (see docs/submit.md for the layout)"))
    repeated = sorted({name for name in names if names.count(name) > 1})
    for column in repeated:
        problems.append(Problem(1, column, "column appears more than once"))
    if problems:
        raise ExportError(problems)
    known = set(REQUIRED_COLUMNS) | set(ROW_COLUMNS) | set(BATCH_COLUMNS)
    ignored = tuple(name for name in names if name not in known)

    batch_values: dict[str, tuple[str, int]] = {}  # batch column -> (value, first line)
    transfers: list[Transfer] = []
    lines: list[int] = []
    unreadable: set[int] = set()
    count = 0
    for row in rows:
        line = int(line_of()) if line_of is not None else count + 2
        if not row or all(not cell.strip() for cell in row):
            continue  # blank line
        count += 1
        if on_row is not None:
            on_row(count)
        if len(row) != len(names):
            problems.append(Problem(line, "row", f"has {len(row)} fields, the header has {len(names)}"))
            continue

        def cell(column: str, row: list[str] = row) -> str | None:
            position = index.get(column)
            return None if position is None else row[position].strip()

        for column in BATCH_COLUMNS:
            value = cell(column)
            if value is None or value == "":
                continue
            first = batch_values.setdefault(column, (value, line))
            if first[0] != value:
                problems.append(
                    Problem(
                        line, column, f"{value!r} differs from {first[0]!r} on line {first[1]} (one file, one batch)"
                    )
                )
        amount_text = cell("amount") or ""
        amount = Decimal(0)
        if _AMOUNT_TEXT.fullmatch(amount_text):
            amount = Decimal(amount_text)
        else:
            unreadable.add(len(transfers))
            problems.append(
                Problem(
                    line,
                    "amount",
                    "expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)"
                    if amount_text
                    else "is empty",
                )
            )
        transfers.append(
            Transfer(
                account_number=cell("account_number") or "",
                account_type=cell("account_type") or DEFAULT_DESTINATION_ACCOUNT_TYPE,
                currency=cell("currency") or "",  # filled with the origin's currency below when empty
                email=cell("email") or "",
                amount=amount,
                concept=cell("concept") or "",
                employee_reference=cell("employee_reference") or None,
            )
        )
        lines.append(line)

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
            missing.append(Problem(None, name, f"is required: give {hint}, or a {name} column"))
    if missing:
        raise ExportError(missing + problems)
    assert batch_id and integration and origin_number and origin_currency
    transfers = [t if t.currency else replace(t, currency=origin_currency) for t in transfers]
    day = pick("execute_on")
    execute_on = iso_day(day) if day else None
    if day and execute_on is None:
        where = batch_values["execute_on"][1] if "execute_on" in batch_values else None
        problems.append(Problem(where, "execute_on", f"expected a date such as 2026-11-30 (YYYY-MM-DD), got {day!r}"))
    batch = PayrollBatch(
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
    return Export(batch, tuple(lines), ignored, problems=tuple(problems), unreadable_amounts=frozenset(unreadable))


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


def check(
    export: Export,
    *,
    integrations: Collection[str] | None = None,
    limits: ValidationLimits = DEFAULT_LIMITS,
    calendars: Mapping[str, Calendar] | None = None,
    now: datetime | None = None,
) -> list[Problem]:
    """Business validation (`processor.domain.validation`) with each bad row named by its line; empty when valid.
    With `now`, an `execute_on` is checked as the processor will check it (the integration's calendar, else UTC)."""
    problems: list[Problem] = list(export.problems)
    batch = export.batch
    unfit = batch_id_problem(batch.batch_id)
    if unfit is not None:
        problems.append(Problem(None, "batch_id", unfit))
    if integrations is not None and batch.integration not in integrations:
        known = ", ".join(sorted(integrations)) or "none"
        problems.append(Problem(None, "integration", f"{batch.integration!r} is not configured (configured: {known})"))
    if now is not None:
        late = (calendars or {}).get(batch.integration, Calendar()).problem(batch.execute_on, now)
        if late is not None:
            problems.append(Problem(None, "execute_on", late))
    for issue in validate(batch, limits).issues:
        if issue.index is None:
            problems.append(Problem(None, issue.field, f"{issue.reason.value}: {issue.message}"))
            continue
        if issue.index in export.unreadable_amounts and (
            issue.field == "amount" or issue.reason is Reason.DUPLICATE_TRANSFER
        ):
            continue  # already reported as unreadable (its value is unknown, so it is no known duplicate either)
        line = export.lines[issue.index] if export.lines is not None else None
        where = "" if line is not None else f"transactions[{issue.index}]."
        name = export.labels.get(issue.field, issue.field)
        message = f"{issue.reason.value}: {issue.message} (transaction {issue.index})"
        problems.append(Problem(line, f"{where}{name}", message, export.unit))
    problems.sort(key=lambda p: (p.line is not None, p.line or 0))  # the file as a whole first, then by line
    return problems


def control_sum(batch: PayrollBatch) -> Decimal:
    """The exact total of the amounts."""
    return sum((t.amount for t in batch.transactions), Decimal(0))


# -- command line -------------------------------------------------------------------------------------------------


def _execute_on(text: str) -> str:
    """`--execute-on`: a YYYY-MM-DD date (a bad argument, exit 2)."""
    if iso_day(text.strip()) is None:
        raise argparse.ArgumentTypeError(f"expected a date such as 2026-11-30 (YYYY-MM-DD), not {text!r}")
    return text.strip()


@dataclass
class _Context:
    integrations: Collection[str] | None = None
    calendars: Mapping[str, Calendar] = field(default_factory=dict)
    config_path: str | None = None
    kafka_options: Mapping[str, Any] = field(default_factory=dict)
    configured_bootstrap: str | None = None
    exports: object = None  # the configuration's raw [exports] table


def _delimiter(text: str) -> str:
    """`--delimiter`: one character (csv.reader takes no other)."""
    if len(text) != 1:
        raise argparse.ArgumentTypeError(f"must be one character, not {text!r} (a tab is detected by itself)")
    return text


def _encoding(name: str) -> str:
    """`--encoding`: a codec Python knows (a bad argument, exit 2, rather than a traceback while reading)."""
    try:
        codecs.lookup(name)
    except LookupError:
        raise argparse.ArgumentTypeError(f"unknown encoding {name!r}") from None
    return name


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion submit`."""
    p = argparse.ArgumentParser(
        prog="dispersion submit",
        description="Turn an ERP payroll export (CSV, JSON or pain.001) into payroll.batches events; validated first.",
        epilog="CSV layout: docs/submit.md. Nothing is produced when any row is invalid.",
    )
    p.add_argument("export", type=Path, help="the export file (.csv, .json, .xlsx, or a pain.001 .xml)")
    p.add_argument("--config", help="configuration file (default: $DISPERSION_CONFIG, or ./dispersion.toml if present)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: [kafka] or $KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--topic", help="topic to produce to (default: payroll.batches, or its [kafka.topics] name)")
    p.add_argument(
        "--format",
        choices=("csv", "json", "xlsx", "xml"),
        help="default: from the extension (.json, .xlsx/.xlsm, .xml: pain.001, else csv)",
    )
    p.add_argument(
        "--delimiter", type=_delimiter, help="CSV delimiter (default: detected from the header: ',', ';' or tab)"
    )
    p.add_argument("--encoding", type=_encoding, help="CSV text encoding (default utf-8-sig: UTF-8, BOM allowed)")
    p.add_argument("--profile", help="read the export through the configuration's [exports.NAME] profile")
    p.add_argument(
        "--explain", action="store_true", help="with --profile or a pain.001: show how the first rows were read"
    )
    p.add_argument(
        "--batch-id", help="default: the batch_id column, else payroll-<SHA-256 prefix of the origin and transfers>"
    )
    p.add_argument("--integration", help="bank configuration (default: the column, or the only configured one)")
    p.add_argument("--file-reference", help="FileReference (default: the column, else the batch id)")
    p.add_argument("--origin-account", help="origin account number (default: the origin_account_number column)")
    p.add_argument("--origin-account-type", help="default: the column, else MONETARY")
    p.add_argument("--origin-currency", help="ISO 4217 code (default: the origin_currency column)")
    p.add_argument(
        "--execute-on",
        type=_execute_on,
        metavar="YYYY-MM-DD",
        help="pay on that day (the integration's time zone): approved now, paid then (default: the execute_on "
        "column, else as soon as approved)",
    )
    p.add_argument("--dry-run", action="store_true", help="read and validate only; produce nothing")
    p.add_argument("--quiet", action="store_true", help="no progress on standard error")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for Kafka's acknowledgement")
    add_wait_arguments(p)
    return p


def _context(args: argparse.Namespace) -> _Context:
    from processor.cli.config import load_config, optional_config_path

    path = optional_config_path(args.config)
    if path is None:
        return _Context()
    config = load_config(path)
    return _Context(
        integrations=frozenset(config.integrations),
        calendars={name: integration.calendar for name, integration in config.integrations.items()},
        config_path=path,
        kafka_options=config.kafka.options,
        configured_bootstrap=config.kafka.bootstrap_servers,
        exports=config.exports,
    )


def _read(
    args: argparse.Namespace,
    fields: BatchFields,
    defaults: BatchFields,
    progress: Progress,
    profile: ExportProfile | None = None,
) -> Export:
    fmt = args.format or kind_by_extension(args.export.name)
    size = args.export.stat().st_size
    now = datetime.now(UTC)
    requested_at = now.replace(microsecond=now.microsecond // 1000 * 1000)
    if profile is None and fmt == "xlsx":
        from processor.cli.submit_profile import workbook_profile

        profile = workbook_profile(args.export)  # a workbook in our own layout: our column names in its first row
    if profile is not None:
        from processor.cli.submit_profile import read_for_submit

        export = read_for_submit(args, profile, fields, defaults, requested_at=requested_at, progress=progress.update)
        # the updates while reading are throttled (a workbook's first rows come at once): the real count, once
        progress.update(f"read {args.export.name}: {len(export.batch.transactions):,} rows", force=True)
        return replace(settle_batch_id(export, submitted_at=now), size=size)
    with args.export.open("rb") as opened:
        mismatch = kind_mismatch(args.export.name, fmt, opened.read(8))
    if mismatch is not None:
        raise ExportError([Problem(None, "file", mismatch)])
    if fmt == "json":
        data = args.export.read_bytes()
        progress.update(f"read {size:,} bytes", force=True)
        return replace(
            settle_batch_id(read_json(data, fields, requested_at=requested_at, defaults=defaults), submitted_at=now),
            size=size,
        )
    with args.export.open("rb") as raw:
        counter = _CountingReader(raw)
        text = io.TextIOWrapper(io.BufferedReader(counter), encoding=args.encoding or "utf-8-sig", newline="")
        first = text.readline()
        delimiter = args.delimiter or sniff_delimiter(first)
        reader = csv.reader(_chain(first, text), delimiter=delimiter)

        def on_row(count: int) -> None:
            share = f"{100 * counter.count / size:.0f}%" if size else ""
            progress.update(f"reading {args.export.name}: {count:,} rows {share}")

        export = read_csv(
            reader, fields, requested_at=requested_at, defaults=defaults, on_row=on_row, line_of=lambda: reader.line_num
        )
        # the updates above are throttled (the first row often reads the whole file): the real count, once
        progress.update(f"read {args.export.name}: {len(export.batch.transactions):,} rows 100%", force=True)
    return replace(settle_batch_id(export, submitted_at=now), size=size)


def kind_by_extension(name: str) -> Literal["csv", "json", "xlsx"]:
    """How a file is read when nothing says otherwise: `.json` as JSON, `.xlsx`/`.xlsm` as a workbook, else CSV."""
    lowered = name.lower()
    if lowered.endswith(".json"):
        return "json"
    return "xlsx" if lowered.endswith((".xlsx", ".xlsm")) else "csv"


def _chain(first: str, rest: IO[str]) -> Iterator[str]:
    yield first
    yield from rest


SHOWN_PROBLEMS: Final = 50  # printed one by one; the rest are summed up per column


def problem_summary(problems: list[Problem]) -> list[str]:
    """The closing lines: how many problems in how many rows, per column when there are many, and a hint when
    one column fails on nearly every row (a wrong profile or number format, not 300 wrong rows)."""
    rows = {p.line for p in problems if p.line is not None}
    lines: list[str] = []
    if len(problems) > SHOWN_PROBLEMS:
        lines.append(f"... and {len(problems) - SHOWN_PROBLEMS} more problem(s) like those")
    per_field = Counter(p.field for p in problems if p.line is not None)
    if len(per_field) > 1 and len(problems) > 10:
        lines.append("problems per column: " + ", ".join(f"{name} {n}" for name, n in per_field.most_common()))
    if per_field:
        field, count = per_field.most_common(1)[0]
        if count >= 10 and count >= 0.9 * len(rows):
            lines.append(
                f"{field} is refused on {count} of {len(rows)} rows: is it the right --profile, column or number "
                "format (1.234,56 or 1,234.56)? `--dry-run --explain` shows how each cell was read"
            )
    lines.append(f"dispersion submit: {len(problems)} problem(s); nothing was produced")
    return lines


def _report(problems: list[Problem], progress: Progress) -> None:
    progress.done("")
    for problem in problems[:SHOWN_PROBLEMS]:
        print(str(problem), file=sys.stderr)
    for line in problem_summary(problems):
        print(line, file=sys.stderr)


def main(argv: list[str]) -> int:
    """`dispersion submit`."""
    args = parser().parse_args(argv)
    progress = Progress(enabled=not args.quiet)
    from processor.domain.settings import ConfigError

    try:
        context = _context(args)
    except ConfigError as exc:
        print(f"dispersion submit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from processor.cli.submit_iso import is_pain001, submit_pain001

    if is_pain001(args):
        return submit_pain001(args, context, progress)
    try:
        profile = None
        if args.profile is not None or args.explain:
            from processor.cli.submit_profile import profile_for_submit

            profile = profile_for_submit(args, context.exports, context.config_path)
    except ConfigError as exc:
        print(f"dispersion submit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with args.export.open("rb"):
            pass  # readable: a missing or unreadable file is a bad argument (exit 2)
    except OSError as exc:
        print(f"dispersion submit: cannot read {args.export}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    defaults = file_defaults(context.integrations)
    fields = BatchFields(
        batch_id=args.batch_id,
        integration=args.integration,
        file_reference=args.file_reference,
        origin_account_number=args.origin_account,
        origin_account_type=args.origin_account_type,
        origin_currency=args.origin_currency,
        execute_on=args.execute_on,
    )
    started = time.monotonic()
    try:
        export = _read(args, fields, defaults, progress, profile)
    except ExportLimitError as exc:
        progress.done("")
        print(f"dispersion submit: {exc}; nothing was produced", file=sys.stderr)
        return EXIT_USAGE
    except ExportError as exc:
        _report(exc.problems, progress)
        return EXIT_INVALID
    except (UnicodeDecodeError, csv.Error) as exc:
        _report([Problem(None, "file", f"cannot be read as {args.encoding or 'utf-8-sig'} CSV: {exc}")], progress)
        return EXIT_INVALID
    batch = export.batch
    count = len(batch.transactions)
    if export.ignored_columns:
        print(f"note: ignored column(s): {', '.join(export.ignored_columns)}", file=sys.stderr)
    progress.update(f"validating {count:,} transactions", force=True)
    problems = check(export, integrations=context.integrations, calendars=context.calendars, now=batch.requested_at)
    if problems:
        _report(problems, progress)
        return EXIT_INVALID
    total = control_sum(batch)
    summary = f"batch {batch.batch_id}: {count:,} transactions, control sum {money_text(total)} {batch.origin.currency}"
    if batch.execute_on is not None:
        summary += f", to be paid on {batch.execute_on.isoformat()}"
    if args.dry_run:
        progress.done(f"valid ({time.monotonic() - started:.1f} s); --dry-run: nothing produced")
        print(f"valid {summary}")
        return 0
    return _produce(args, context, batch, summary, progress, started)


def _produce(
    args: argparse.Namespace,
    context: _Context,
    batch: PayrollBatch,
    summary: str,
    progress: Progress,
    started: float,
    *,
    note: bool = True,
    source: str = SOURCE,
) -> int:
    from confluent_kafka import KafkaError, Message

    import schemas
    from consumers.records import batch_record
    from processor.cli.kafka_noise import collapsed_kafka_logs, where_kafka_is
    from producers.clients import new_producer
    from producers.kafka import KafkaSetupError, producer_config, settings_from
    from schemas.topics import BATCHES_TOPIC

    try:
        settings = settings_from(
            context.kafka_options, bootstrap=args.bootstrap, configured=context.configured_bootstrap
        )
    except KafkaSetupError as exc:
        print(f"dispersion submit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    topic = args.topic or settings.topic(BATCHES_TOPIC)
    progress.update("encoding", force=True)
    try:
        value = schemas.WireCodec(BATCHES_TOPIC, settings.wire).encode(batch_record(batch, source=source), topic)
    except schemas.RegistryUnavailableError as exc:
        progress.done("")
        print(f"dispersion submit: {exc}; nothing was produced", file=sys.stderr)
        return EXIT_KAFKA
    progress.update(f"producing {len(value):,} bytes to {topic}", force=True)
    producer = new_producer(
        producer_config(
            settings,
            "submit",
            **{"compression.type": "lz4", "message.timeout.ms": int(args.timeout * 1000)},
        )
    )
    outcome: list[tuple[KafkaError | None, Message]] = []
    headers = [("source", SOURCE.encode()), ("export_file", args.export.name.encode("utf-8"))]
    if args.allow_duplicate_of:
        headers.append((ALLOW_DUPLICATE_HEADER, args.allow_duplicate_of.encode("utf-8")))
    producer.produce(
        topic,
        value=value,
        key=batch.batch_id.encode("utf-8"),
        headers=headers,
        on_delivery=lambda err, msg: outcome.append((err, msg)),
    )
    with collapsed_kafka_logs():  # an unreachable broker: each librdkafka line once, counted, not 100 of them
        producer.flush(args.timeout + 5)
    if not outcome or outcome[0][0] is not None:
        why = outcome[0][0].str() if outcome and outcome[0][0] is not None else "no acknowledgement"
        where = where_kafka_is(settings.bootstrap, args.bootstrap, args.config)
        progress.done("")
        print(
            f"dispersion submit: Kafka at {where} did not take the batch ({why}); it may be retried safely",
            file=sys.stderr,
        )
        return EXIT_KAFKA
    message = outcome[0][1]
    progress.done(f"done in {time.monotonic() - started:.1f} s")
    print(f"submitted {summary} -> {topic} partition {message.partition()} offset {message.offset()}")
    if not args.no_wait:
        from processor.cli.common import CliError
        from processor.cli.submit_wait import EXIT_NO_VERDICT, await_verdict, verdict_client

        try:
            client = verdict_client(args)
        except CliError as exc:
            print(f"dispersion submit: the processor's verdict cannot be asked: {exc}", file=sys.stderr)
            return EXIT_NO_VERDICT
        if client is not None:
            placed = (topic, message.partition() or 0, message.offset() or 0)
            return await_verdict(args, client, batch.batch_id, *placed)
        if not args.quiet:
            print(
                "note: not waiting for the processor's verdict: no admin token ($DISPERSION_ADMIN_TOKEN, or the "
                "variable [admin] token_env names); pass --no-wait to say so",
                file=sys.stderr,
            )
    if note and not args.quiet:
        print(
            f"note: batch {batch.batch_id} is identified by its content (not by when it was sent): submitting the same "
            "export again is recognised as the same batch and paid at most once; the same batch id with other "
            "transfers is refused as a conflict (dead letter)",
            file=sys.stderr,
        )
    return 0
