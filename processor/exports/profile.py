"""Export profiles: how one ERP's payroll export maps onto our fields (`[exports.NAME]` in the configuration).

A profile names, for each of our fields, the ERP's column (by its header text or its 1-based position), how the
export writes numbers, where the header and the data are (rows above the header, a total row, footer rows),
constant batch values, and how the batch id is found. `parse_profile` validates one raw TOML table and reports
every problem at once, each naming its key (`exports.planilla.decimal_separator`). The layout is in
docs/submit.md, "Bring your ERP's export".
"""

from __future__ import annotations

import codecs
import difflib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from processor.exports.numbers import DECIMAL_SEPARATORS, THOUSANDS_SEPARATORS, NumberStyle

# Our columns (docs/submit.md, "CSV layout"): the same vocabulary names a profile's `columns`.
REQUIRED_COLUMNS: Final = ("account_number", "amount", "email", "concept")
ROW_COLUMNS: Final = ("account_type", "currency", "employee_reference")
BATCH_COLUMNS: Final = (
    "batch_id",
    "integration",
    "file_reference",
    "origin_account_number",
    "origin_account_type",
    "origin_currency",
    "execute_on",  # the day to pay on, YYYY-MM-DD (a scheduled batch)
)
# A profile must map these; `concept` may be left out (empty, as an empty concept column would be).
PROFILE_REQUIRED: Final = ("account_number", "amount", "email")
# Profile key -> the batch value it sets.
CONSTANTS: Final = {
    "integration": "integration",
    "origin_account": "origin_account_number",
    "origin_account_type": "origin_account_type",
    "origin_currency": "origin_currency",
    "file_reference": "file_reference",
}
FORMATS: Final = ("csv", "xlsx")
BATCH_ID_SOURCES: Final = ("file", "column")
MAX_SKIPPED_ROWS: Final = 1000
_KEYS: Final = frozenset(
    {
        "format",
        "encoding",
        "delimiter",
        "sheet",
        "header",
        "skip_rows",
        "footer_rows",
        "total_label",
        "decimal_separator",
        "thousands_separator",
        "batch_id",
        "columns",
        *CONSTANTS,
    }
)

Format = Literal["csv", "xlsx"]


class ProfileError(ValueError):
    """A profile that cannot be used; `problems` lists every `key: reason` found."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class ColumnRef:
    """An ERP column: its header text, or its 1-based position."""

    name: str | None = None
    position: int | None = None

    def __str__(self) -> str:
        return self.name if self.name is not None else f"column {self.position}"


@dataclass(frozen=True)
class ExportProfile:
    """One `[exports.NAME]` table, validated."""

    name: str
    columns: Mapping[str, ColumnRef]
    numbers: NumberStyle = field(default_factory=NumberStyle)
    format: Format | None = None  # None: from the file's extension
    encoding: str = "utf-8-sig"
    delimiter: str | None = None  # None: detected from the header line
    sheet: str | None = None  # None: the workbook's first sheet
    header: bool = True
    skip_rows: int = 0
    footer_rows: int = 0
    total_label: str | None = None
    constants: Mapping[str, str] = field(default_factory=dict)  # batch field -> value
    batch_id: Literal["file", "column"] = "file"


def header_key(text: str) -> str:
    """A header cell as matched against a profile's column names: Unicode NFC, case-folded, whitespace (also
    no-break spaces) collapsed, trimmed. Accents count: `Código` is not `Codigo`."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def sniff_delimiter(header_line: str) -> str:
    """The most frequent of `,`, `;` and tab in the header line (`,` when none appears)."""
    counts = {delimiter: header_line.count(delimiter) for delimiter in (",", ";", "\t")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def format_for(profile: ExportProfile, file_name: str) -> Format:
    """The profile's format, else the file's extension (`.xlsx`/`.xlsm` a workbook, anything else CSV)."""
    if profile.format is not None:
        return profile.format
    return "xlsx" if file_name.lower().endswith((".xlsx", ".xlsm")) else "csv"


def parse_profile(name: str, table: object) -> ExportProfile:
    """Validate one `[exports.NAME]` table; ProfileError naming every bad key."""
    return _ProfileReader(name).read(table)


class _ProfileReader:
    def __init__(self, name: str) -> None:
        self.name = name
        self.where = f"exports.{name}"
        self.problems: list[str] = []

    def fail(self, key: str, message: str) -> None:
        self.problems.append(f"{self.where}.{key}: {message}" if key else f"{self.where}: {message}")

    def read(self, raw: object) -> ExportProfile:
        if not isinstance(raw, Mapping):
            raise ProfileError([f"{self.where}: must be a table, not {type(raw).__name__}"])
        table: Mapping[str, Any] = raw
        for key in table:
            if key not in _KEYS:
                close = difflib.get_close_matches(key, sorted(_KEYS), n=1)
                self.fail(key, "unknown key" + (f" (did you mean {close[0]!r}?)" if close else ""))
        header = self.boolean(table, "header", True)
        columns = self.columns(table.get("columns"), header)
        numbers = self.numbers(table)
        constants = {CONSTANTS[key]: value for key in CONSTANTS if (value := self.text(table, key, None)) is not None}
        for key, target in CONSTANTS.items():
            if target in constants and target in columns:
                self.fail(key, f"give either {key} or columns.{target}, not both")
        batch_id = self.choice(table, "batch_id", BATCH_ID_SOURCES)
        if batch_id == "column" and "batch_id" not in columns:
            self.fail("batch_id", '"column" needs columns.batch_id (the ERP column holding it)')
        if batch_id == "file" and "batch_id" in columns:
            self.fail("columns.batch_id", 'is mapped, so set batch_id = "column" (the default is "file")')
        file_format = self.choice(table, "format", (None, *FORMATS))
        encoding = self.text(table, "encoding", "utf-8-sig") or "utf-8-sig"
        try:
            codecs.lookup(encoding)
        except LookupError:
            self.fail("encoding", f"unknown encoding {encoding!r} (e.g. utf-8, cp1252, latin-1)")
        delimiter = self.text(table, "delimiter", None)
        if delimiter is not None and (len(delimiter) != 1 or delimiter in "\r\n\"'"):
            self.fail("delimiter", f"must be one character (not a quote or line break), not {delimiter!r}")
        total_label = self.text(table, "total_label", None)
        if total_label is not None and not total_label.strip():
            self.fail("total_label", "must not be empty")
        if self.problems:
            raise ProfileError(self.problems)
        return ExportProfile(
            name=self.name,
            columns=columns,
            numbers=numbers,
            format=file_format,  # type: ignore[arg-type]  # one of FORMATS, checked by choice()
            encoding=encoding,
            delimiter=delimiter,
            sheet=self.text(table, "sheet", None),
            header=header,
            skip_rows=self.count(table, "skip_rows"),
            footer_rows=self.count(table, "footer_rows"),
            total_label=total_label.strip() if total_label else None,
            constants=constants,
            batch_id="column" if batch_id == "column" else "file",
        )

    def columns(self, raw: object, header: bool) -> dict[str, ColumnRef]:
        if raw is None:
            self.fail("columns", "is required: a table mapping our fields to the ERP's columns")
            return {}
        if not isinstance(raw, Mapping):
            self.fail("columns", f"must be a table, not {type(raw).__name__}")
            return {}
        known = (*REQUIRED_COLUMNS, *ROW_COLUMNS, *BATCH_COLUMNS)
        columns: dict[str, ColumnRef] = {}
        given = set(raw)  # a required field given badly is reported as bad, not also as missing
        for ours, ref in raw.items():
            key = f"columns.{ours}"
            if ours not in known:
                close = difflib.get_close_matches(str(ours), known, n=1)
                self.fail(key, "not one of our fields" + (f" (did you mean {close[0]!r}?)" if close else ""))
            elif isinstance(ref, bool) or not isinstance(ref, str | int):
                self.fail(key, f"must be the ERP's column name or its position (1, 2, ...), not {ref!r}")
            elif isinstance(ref, int):
                if not 1 <= ref <= 16384:
                    self.fail(key, f"a position must be between 1 and 16384, not {ref}")
                else:
                    columns[ours] = ColumnRef(position=ref)
            elif not header_key(ref):
                self.fail(key, "must not be empty")
            elif not header:
                self.fail(key, f"names a column ({ref!r}) but header = false: give its position (1, 2, ...)")
            else:
                columns[ours] = ColumnRef(name=ref.strip())
        names = [header_key(ref.name) for ref in columns.values() if ref.name is not None]
        for ours, ref in columns.items():
            if ref.name is not None and names.count(header_key(ref.name)) > 1:
                self.fail(f"columns.{ours}", f"{ref.name!r} is mapped to more than one of our fields")
        for ours in PROFILE_REQUIRED:
            if ours not in given:
                self.fail(f"columns.{ours}", "is required (the ERP column that holds it)")
        return columns

    def numbers(self, table: Mapping[str, Any]) -> NumberStyle:
        decimal = self.choice(table, "decimal_separator", DECIMAL_SEPARATORS)
        thousands = self.choice(table, "thousands_separator", THOUSANDS_SEPARATORS)
        if decimal is None or thousands is None:
            return NumberStyle()
        if decimal == thousands:
            self.fail("thousands_separator", f"must differ from decimal_separator ({decimal!r})")
            return NumberStyle()
        return NumberStyle(decimal, thousands)

    def text(self, table: Mapping[str, Any], key: str, default: str | None) -> str | None:
        value = table.get(key, default)
        if value is not None and not isinstance(value, str):
            self.fail(key, f"must be a string, not {type(value).__name__}")
            return default
        return value

    def boolean(self, table: Mapping[str, Any], key: str, default: bool) -> bool:
        value = table.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, not {value!r}")
            return default
        return value

    def count(self, table: Mapping[str, Any], key: str) -> int:
        value = table.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SKIPPED_ROWS:
            self.fail(key, f"must be a whole number of rows from 0 to {MAX_SKIPPED_ROWS}, not {value!r}")
            return 0
        return value

    def choice(self, table: Mapping[str, Any], key: str, options: tuple[str | None, ...]) -> str | None:
        value = table.get(key, options[0])
        if value not in options:
            shown = ", ".join(repr(option) for option in options if option is not None)
            self.fail(key, f"must be one of {shown}, not {value!r}")
            return None
        return value if isinstance(value, str) else None


# What a file's first bytes say it is: a ZIP container (an .xlsx workbook), an OLE2 compound file (an Excel
# 97-2003 .xls workbook), a JSON document, or text (read as CSV).
FileKind = Literal["xlsx", "xls", "json", "csv"]
_KIND_NAMES: Final = {
    "xlsx": "an .xlsx workbook (a ZIP file)",
    "xls": "an Excel 97-2003 workbook (.xls)",
    "json": "a JSON document",
    "csv": "text (CSV)",
}


def sniff_kind(head: bytes) -> FileKind:
    """The kind of file its first bytes show (see `FileKind`)."""
    if head.startswith(b"PK\x03\x04"):
        return "xlsx"
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return "xls"
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return "json" if text[:1] in (b"{", b"[") else "csv"


def kind_mismatch(file_name: str, expected: Literal["csv", "json", "xlsx"], head: bytes) -> str | None:
    """A clear message when a file read as `expected` (from its extension, `--format` or the profile) is another
    kind of file; None when it is what it is named. Text that starts like JSON is left to the CSV reader when CSV
    is expected (a header cell may start with a bracket)."""
    found = sniff_kind(head)
    if found == expected or (expected == "csv" and found == "json"):
        return None
    if found == "xls":
        return f"{file_name} is {_KIND_NAMES['xls']}, which cannot be read: save it as .xlsx"
    fixes = {
        "xlsx": "name it .xlsx (it is read as a workbook with or without an export profile)",
        "json": "name it .json",
        "csv": "name it .csv (or set the profile's format)",
    }
    return f"{file_name} is read as {expected} but is {_KIND_NAMES[found]}: {fixes[found]}"
