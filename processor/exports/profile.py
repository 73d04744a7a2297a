"""Export profiles: how one ERP's payroll export maps onto our fields (`[exports.NAME]` in the configuration).

A profile names, for each of our fields, the ERP's column (by its header text or its 1-based position), how the
export writes numbers, where the header and the data are (rows above the header, a total row, footer rows),
constant batch values, and how the batch id is found. `parse_profile` validates one raw TOML table with the
pydantic model `ProfileTable` (each key's type and values) plus the checks that span keys, and reports every
problem at once, each naming its key (`exports.planilla.decimal_separator`). The layout is in docs/submit.md,
"Bring your ERP's export".
"""

from __future__ import annotations

import codecs
import difflib
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator, ValidationError
from pydantic_core import PydanticCustomError

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
MAX_POSITION: Final = 16384  # a spreadsheet's last column (XFD)
OUR_COLUMNS: Final = (*REQUIRED_COLUMNS, *ROW_COLUMNS, *BATCH_COLUMNS)

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
    # The built-in profile of our own layout (`our_layout`): the header row names our columns (`normalise_column`),
    # so `columns` is found there; problems name our columns. Not a key of `[exports.NAME]`.
    ours: bool = False
    unit: Literal["row", "line"] = "row"  # what a problem's number counts: rows, or a CSV file's lines (ours)


OUR_LAYOUT: Final = "our_layout"


def our_layout(kind: Format, *, encoding: str | None = None, delimiter: str | None = None) -> ExportProfile:
    """The built-in profile of our own layout (docs/submit.md, "CSV layout"): a file read without `--profile`.
    Its first non-blank row names our columns (`Account Number` is `account_number`; other columns are ignored),
    amounts are plain numbers (`1500.50`), every row names its batch values or leaves them empty. A CSV's problems
    name its lines (a quoted line break counts), a workbook's its rows."""
    return ExportProfile(
        OUR_LAYOUT,
        {},
        numbers=NumberStyle(plain=True),
        format=kind,
        encoding=encoding or "utf-8-sig",
        delimiter=delimiter,
        ours=True,
        unit="line" if kind == "csv" else "row",
    )


def normalise_column(name: str) -> str:
    """A header as our layout matches it: trimmed, lower case, runs of spaces and hyphens as `_`."""
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


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


# -- parsing a [exports.NAME] table ----------------------------------------------------------------------------

_CHOICES: Final = {
    "format": FORMATS,
    "decimal_separator": DECIMAL_SEPARATORS,
    "thousands_separator": THOUSANDS_SEPARATORS,
    "batch_id": BATCH_ID_SOURCES,
}
# The order problems are listed in: as a reader of the table meets its concerns (columns before numbers, ...).
_ORDER: Final = {
    "header": 1.0,
    "columns": 2.0,
    "decimal_separator": 3.0,
    "thousands_separator": 3.1,
    **{key: 4.0 + index / 10 for index, key in enumerate(CONSTANTS)},
    "batch_id": 5.0,
    "format": 6.0,
    "encoding": 7.0,
    "delimiter": 8.0,
    "total_label": 9.0,
    "sheet": 10.0,
    "skip_rows": 11.0,
    "footer_rows": 12.0,
}
_Found = tuple[tuple[float, ...], str, str]  # (order, key, reason)


def _reason(text: str) -> PydanticCustomError:
    """A validation error whose message is `text` as the user reads it."""
    return PydanticCustomError("profile", "{reason}", {"reason": text})


def _known_encoding(value: str) -> str:
    if value:  # empty: the default
        try:
            codecs.lookup(value)
        except LookupError:
            raise _reason(f"unknown encoding {value!r} (e.g. utf-8, cp1252, latin-1)") from None
    return value


def _one_character(value: str) -> str:
    if len(value) != 1 or value in "\r\n\"'":
        raise _reason(f"must be one character (not a quote or line break), not {value!r}")
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise _reason("must not be empty")
    return value


def _our_field(name: str) -> str:
    if name not in OUR_COLUMNS:
        close = difflib.get_close_matches(name, OUR_COLUMNS, n=1)
        raise _reason("not one of our fields" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return name


def _column_ref(ref: object) -> ColumnRef:
    if isinstance(ref, bool) or not isinstance(ref, str | int):
        raise _reason(f"must be the ERP's column name or its position (1, 2, ...), not {ref!r}")
    if isinstance(ref, int):
        if not 1 <= ref <= MAX_POSITION:
            raise _reason(f"a position must be between 1 and {MAX_POSITION}, not {ref}")
        return ColumnRef(position=ref)
    if not header_key(ref):
        raise _reason("must not be empty")
    return ColumnRef(name=ref.strip())


OurField = Annotated[str, AfterValidator(_our_field)]  # a key of `columns`: one of our fields
Column = Annotated[ColumnRef, PlainValidator(_column_ref)]  # its value: the ERP column's name or position
Rows = Annotated[int, Field(ge=0, le=MAX_SKIPPED_ROWS)]  # rows skipped above the header, or footer rows


def parse_profile(name: str, table: object) -> ExportProfile:
    """Validate one `[exports.NAME]` table (`ProfileTable`); ProfileError naming every bad key, in the table's
    order of concerns (unknown keys, header, columns, numbers, constants, batch id, file)."""
    where = f"exports.{name}"
    if not isinstance(table, Mapping):
        raise ProfileError([f"{where}: must be a table, not {type(table).__name__}"])
    found: list[_Found] = []
    parsed: ProfileTable | None = None
    try:
        parsed = ProfileTable.model_validate(dict(table))
    except ValidationError as exc:
        found.extend(_field_problems(exc, table))
    found.extend(_cross_problems(table))
    if found:
        found.sort(key=lambda problem: problem[0])
        raise ProfileError([f"{where}.{key}: {reason}" for _, key, reason in found])
    assert parsed is not None
    return parsed.profile(name)


class ProfileTable(BaseModel):
    """The shape of one `[exports.NAME]` table (docs/submit.md, "Bring your ERP's export"): every key, its type
    and its allowed values. What depends on several keys is checked by `parse_profile`."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    format: Format | None = None
    encoding: Annotated[str, AfterValidator(_known_encoding)] = "utf-8-sig"
    delimiter: Annotated[str, AfterValidator(_one_character)] | None = None
    sheet: str | None = None
    header: bool = True
    skip_rows: Rows = 0
    footer_rows: Rows = 0
    total_label: Annotated[str, AfterValidator(_not_blank)] | None = None
    decimal_separator: Literal[".", ","] = "."
    thousands_separator: Literal["", ".", ",", " ", "'"] = ""
    batch_id: Literal["file", "column"] = "file"
    columns: dict[OurField, Column]
    integration: str | None = None
    origin_account: str | None = None
    origin_account_type: str | None = None
    origin_currency: str | None = None
    file_reference: str | None = None

    def profile(self, name: str) -> ExportProfile:
        """The profile these keys describe (valid: `parse_profile` checked what spans several keys)."""
        constants = {CONSTANTS[key]: value for key in CONSTANTS if (value := getattr(self, key)) is not None}
        return ExportProfile(
            name=name,
            columns=self.columns,
            numbers=NumberStyle(self.decimal_separator, self.thousands_separator),
            format=self.format,
            encoding=self.encoding or "utf-8-sig",
            delimiter=self.delimiter,
            sheet=self.sheet,
            header=self.header,
            skip_rows=self.skip_rows,
            footer_rows=self.footer_rows,
            total_label=self.total_label.strip() if self.total_label else None,
            constants=constants,
            batch_id=self.batch_id,
        )


def _field_problems(error: ValidationError, table: Mapping[str, Any]) -> list[_Found]:
    """pydantic's errors as `key: reason`, each reason as docs/submit.md words it."""
    keys = list(table)
    raw_columns = table.get("columns")
    items = list(raw_columns) if isinstance(raw_columns, Mapping) else []
    bad_names = {
        str(detail["loc"][1]) for detail in error.errors() if len(detail["loc"]) == 3 and detail["loc"][0] == "columns"
    }
    found: list[_Found] = []
    for detail in error.errors():
        loc, kind, value = detail["loc"], detail["type"], detail["input"]
        key = str(loc[0])
        if key == "columns" and len(loc) > 1:
            ours = str(loc[1])
            if len(loc) == 2 and ours in bad_names:
                continue  # not one of our fields: its column is not looked at
            found.append(((2.0, items.index(ours)), f"columns.{ours}", str(detail["ctx"]["reason"])))
            continue
        if kind == "extra_forbidden":
            close = difflib.get_close_matches(key, sorted(ProfileTable.model_fields), n=1)
            reason = "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
            found.append(((0.0, keys.index(key)), key, reason))
            continue
        found.append(((_ORDER[key],), key, _reason_for(key, kind, value, detail.get("ctx"))))
    return found


def _reason_for(key: str, kind: str, value: object, context: Mapping[str, Any] | None) -> str:
    if kind == "profile" and context is not None:
        return str(context["reason"])
    if kind == "missing":
        return "is required: a table mapping our fields to the ERP's columns"
    if key == "columns":
        return f"must be a table, not {type(value).__name__}"
    if key == "header":
        return f"must be true or false, not {value!r}"
    if key in ("skip_rows", "footer_rows"):
        return f"must be a whole number of rows from 0 to {MAX_SKIPPED_ROWS}, not {value!r}"
    if key in _CHOICES:
        shown = ", ".join(repr(option) for option in _CHOICES[key])
        return f"must be one of {shown}, not {value!r}"
    return f"must be a string, not {type(value).__name__}"


def _usable_columns(table: Mapping[str, Any]) -> dict[str, ColumnRef]:
    """The profile's columns that are valid by themselves (what the checks across keys look at)."""
    raw = table.get("columns")
    columns: dict[str, ColumnRef] = {}
    if not isinstance(raw, Mapping):
        return columns
    for ours, ref in raw.items():
        try:
            column = _column_ref(ref)
        except PydanticCustomError:
            continue
        if ours in OUR_COLUMNS and (column.name is None or table.get("header", True) is not False):
            columns[ours] = column
    return columns


def _cross_problems(table: Mapping[str, Any]) -> list[_Found]:
    """What spans several keys: names without a header, one ERP column for two fields, required fields, the two
    separators, a constant and a column for one value, where the batch id comes from."""
    found: list[_Found] = []
    columns = _usable_columns(table)
    raw = table.get("columns")
    if isinstance(raw, Mapping):
        for index, (ours, ref) in enumerate(raw.items()):
            named = isinstance(ref, str) and header_key(ref) and ours in OUR_COLUMNS
            if named and table.get("header", True) is False:
                reason = f"names a column ({ref!r}) but header = false: give its position (1, 2, ...)"
                found.append(((2.0, index), f"columns.{ours}", reason))
        names = [header_key(ref.name) for ref in columns.values() if ref.name is not None]
        for index, (ours, column) in enumerate(columns.items()):
            if column.name is not None and names.count(header_key(column.name)) > 1:
                reason = f"{column.name!r} is mapped to more than one of our fields"
                found.append(((2.5, index), f"columns.{ours}", reason))
        for index, ours in enumerate(PROFILE_REQUIRED):
            if ours not in raw:
                found.append(((2.6, index), f"columns.{ours}", "is required (the ERP column that holds it)"))
    decimal, thousands = table.get("decimal_separator", "."), table.get("thousands_separator", "")
    if decimal in DECIMAL_SEPARATORS and thousands in THOUSANDS_SEPARATORS and decimal == thousands:
        found.append(((3.2,), "thousands_separator", f"must differ from decimal_separator ({decimal!r})"))
    for index, (key, target) in enumerate(CONSTANTS.items()):
        if isinstance(table.get(key), str) and target in columns:
            found.append(((4.5 + index / 10,), key, f"give either {key} or columns.{target}, not both"))
    source = table.get("batch_id", "file")
    if source == "column" and "batch_id" not in columns:
        found.append(((5.1,), "batch_id", '"column" needs columns.batch_id (the ERP column holding it)'))
    if source == "file" and "batch_id" in columns:
        found.append(((5.2,), "columns.batch_id", 'is mapped, so set batch_id = "column" (the default is "file")'))
    return found


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
