"""Rows of an ERP export, read through an export profile into our fields.

The file readers (`processor.exports`) hand over rows of cells, one at a time with the row's number as a
spreadsheet would show it; `RowMapper` skips the title rows, finds the header and the profile's columns in it,
sets aside footer rows and the total row, and turns each data row into our fields: text trimmed, amounts exact
(`processor.exports.numbers`). Every bad cell is reported with its row, the column as the ERP named it, and the
reason. The total row, when there is one, is checked against the sum of the rows. The first rows are kept, cell
by cell, for `--explain`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from processor.exports.numbers import NumberError, parse_amount, shown_decimal, shown_text
from processor.exports.profile import (
    OUR_COLUMNS,
    REQUIRED_COLUMNS,
    ColumnRef,
    ExportProfile,
    header_key,
    normalise_column,
)

EXPLAINED_ROWS: Final = 3


@dataclass(frozen=True, slots=True)
class NumberCell:
    """A spreadsheet number: the decimal text the workbook stored, and the cell's number format."""

    stored: str
    number_format: str = "General"


@dataclass(frozen=True, slots=True)
class ErrorCell:
    """A spreadsheet cell that holds no usable value (`#N/A`, a formula with no saved result)."""

    message: str


# A text cell is a plain `str` (CSV cells, spreadsheet text); an empty or missing cell is "".
Cell = str | NumberCell | ErrorCell


@dataclass(frozen=True, slots=True)
class RowProblem:
    """A problem with one row (`row`, as a spreadsheet numbers it; None: the file as a whole) in one ERP column."""

    row: int | None
    column: str
    reason: str


@dataclass(frozen=True, slots=True)
class MappedRow:
    """One data row in our fields (`RowMapper.fields` order; the amount's place is empty: it is `amount`, None
    when it could not be read)."""

    row: int
    values: tuple[str, ...]
    amount: Decimal | None


@dataclass(frozen=True, slots=True)
class ExplainedCell:
    """How one cell was read: the ERP's column, our field, what the file holds, what we took."""

    column: str
    field: str
    held: str
    value: str


@dataclass(frozen=True)
class TotalRow:
    """The export's total row: what it says, and what the rows add up to (None when an amount was unreadable)."""

    row: int
    stated: Decimal | None
    computed: Decimal | None
    rows: int

    @property
    def matches(self) -> bool:
        """Whether the stated total equals the sum of the rows."""
        return self.stated is not None and self.stated == self.computed


@dataclass
class Explanation:
    """What `--explain` shows: where the header was, which ERP column gave which field, the first rows."""

    profile: ExportProfile
    header_row: int | None = None
    columns: list[tuple[str, str]] = field(default_factory=list)  # (ERP column, our field)
    ignored_columns: list[str] = field(default_factory=list)
    skipped_rows: list[int] = field(default_factory=list)
    rows: list[tuple[int, list[ExplainedCell]]] = field(default_factory=list)
    data_rows: int = 0
    total: TotalRow | None = None
    footer_rows: list[int] = field(default_factory=list)


@dataclass
class MappingResult:
    """All rows of one export in our fields, with every problem found and the explanation. Not `readable` when
    the header, or a column of the profile in it, was not found: then no row was read."""

    fields: tuple[str, ...]
    rows: list[MappedRow]
    problems: list[RowProblem]
    explanation: Explanation
    labels: dict[str, str]  # our field -> the ERP's column name (our layout: our column's)
    readable: bool


def _fields(columns: Collection[str]) -> tuple[str, ...]:
    """Our fields a profile's columns give, in our order; the required ones always (`concept` may be unmapped)."""
    mapped = [name for name in OUR_COLUMNS if name in columns]
    return tuple(dict.fromkeys((*REQUIRED_COLUMNS, *mapped)))


def _is_blank(cells: Sequence[Cell]) -> bool:
    for cell in cells:  # noqa: SIM110 (once per row: all() over a generator costs six times this loop)
        if not isinstance(cell, str) or cell.strip():
            return False
    return True


def _held(cell: Cell | None) -> str:
    if cell is None:
        return "(no cell)"
    if isinstance(cell, NumberCell):
        return f"{cell.stored} (number, format {cell.number_format})"
    if isinstance(cell, ErrorCell):
        return f"({cell.message})"
    return repr(cell)


class RowMapper:
    """Feed it every row of the file in order (`feed`), then `finish()`. Holds only the footer rows back."""

    def __init__(self, profile: ExportProfile, *, fixed_width: bool, explain_rows: int = EXPLAINED_ROWS) -> None:
        self.profile = profile
        self.fixed_width = fixed_width  # CSV: a row with another number of fields than the header is refused
        self.explain_rows = explain_rows
        self.fields: tuple[str, ...] = _fields(profile.columns)
        self.positions: dict[str, int] = {}  # our field -> 0-based cell index
        self.plan: list[tuple[str, int | None]] = []  # per field in order: our field, its cell index (None: empty)
        self.labels: dict[str, str] = {}
        self.width: int | None = None
        self.header_done = False
        self.header_failed = False
        self.held: deque[tuple[int, Sequence[Cell]]] = deque()
        self.rows: list[MappedRow] = []
        self.problems: list[RowProblem] = []
        self.explanation = Explanation(profile)
        self.total: tuple[int, Decimal | None] | None = None
        self.sum = Decimal(0)
        self.unreadable = 0

    # -- feeding -----------------------------------------------------------------------------------------------

    def feed(self, number: int, cells: Sequence[Cell]) -> None:
        """One row of the file, `number` as a spreadsheet shows it (1-based)."""
        if _is_blank(cells):
            return
        if not self.header_done:
            if number <= self.profile.skip_rows:
                self.explanation.skipped_rows.append(number)
                return
            self.header_done = True
            if self.profile.header:
                self._header(number, cells)
                return
            self._columns_by_position(cells)
        if self.header_failed:
            return
        if self.profile.footer_rows:
            self.held.append((number, cells))
            if len(self.held) <= self.profile.footer_rows:
                return
            number, cells = self.held.popleft()
        self._data(number, cells)

    def finish(self) -> MappingResult:
        """Everything read: the footer rows are the ones still held back; the total is checked."""
        explanation = self.explanation
        explanation.footer_rows = [number for number, _ in self.held]
        if not self.header_done:
            self.problems.append(RowProblem(None, "header", "the file is empty"))
        if self.total is not None:
            row, stated = self.total
            computed = None if self.unreadable else self.sum
            explanation.total = TotalRow(row, stated, computed, len(self.rows))
            label = self.labels.get("amount", "amount")
            if stated is not None and computed is not None and stated != computed:
                self.problems.append(
                    RowProblem(
                        row,
                        label,
                        f"the total row says {stated} but the {len(self.rows)} rows add up to {computed}"
                        f" (difference {stated - computed})",
                    )
                )
        explanation.data_rows = len(self.rows)
        readable = self.header_done and not self.header_failed
        return MappingResult(self.fields, self.rows, self.problems, explanation, self.labels, readable)

    # -- header ------------------------------------------------------------------------------------------------

    def _header(self, number: int, cells: Sequence[Cell]) -> None:
        explanation = self.explanation
        explanation.header_row = number
        self.width = len(cells)
        if self.profile.ours:
            self._our_header(number, [cell if isinstance(cell, str) else "" for cell in cells])
            return
        names = [cell.strip() if isinstance(cell, str) else _held(cell) for cell in cells]
        keys = [header_key(name) for name in names]
        for ours, ref in self.profile.columns.items():
            position = self._find(number, ref, names, keys)
            if position is None:
                self.header_failed = True
                continue
            self.positions[ours] = position
            self.labels[ours] = names[position] or str(ref)
        used = set(self.positions.values())
        explanation.ignored_columns = [name for index, name in enumerate(names) if name and index not in used]
        self._planned()

    def _our_header(self, number: int, cells: list[str]) -> None:
        """Our own layout: the header names our columns; the required ones must be there, none twice."""
        names = [normalise_column(cell) for cell in cells]
        hint = (
            "required column is missing (see docs/submit.md for the layout)"
            if self.profile.unit == "line"
            else "required column is missing from the header row (our layout; the ERP's own headers need --profile)"
        )
        for column in REQUIRED_COLUMNS:
            if column not in names:
                self.problems.append(RowProblem(number, column, hint))
        for column in sorted({name for name in names if name and names.count(name) > 1}):
            self.problems.append(RowProblem(number, column, "column appears more than once"))
        if self.problems:
            self.header_failed = True
            return
        known = set(OUR_COLUMNS)
        self.positions = {name: index for index, name in enumerate(names) if name in known}
        self.labels = {name: name for name in self.positions}
        self.fields = _fields(self.positions)
        self.explanation.ignored_columns = [name for name in names if name and name not in known]
        self._planned()

    def _planned(self) -> None:
        """The columns found: what `--explain` lists, and where each of our fields is read from."""
        self.explanation.columns = [(self.labels[ours], ours) for ours in self.fields if ours in self.labels]
        self.plan = [(ours, self.positions.get(ours)) for ours in self.fields]

    def _find(self, number: int, ref: ColumnRef, names: list[str], keys: list[str]) -> int | None:
        if ref.position is not None:
            if ref.position > len(names):
                self.problems.append(
                    RowProblem(number, str(ref), f"the header has only {len(names)} columns (header row {number})")
                )
                return None
            return ref.position - 1
        assert ref.name is not None
        wanted = header_key(ref.name)
        found = [index for index, key in enumerate(keys) if key == wanted]
        if len(found) == 1:
            return found[0]
        if found:
            where = ", ".join(str(index + 1) for index in found)
            reason = f"appears more than once in the header (columns {where})"
            self.problems.append(RowProblem(number, ref.name, reason))
            return None
        present = ", ".join(repr(name) for name in names if name) or "none"
        self.problems.append(RowProblem(number, ref.name, f"no such column in the header row; it has {present}"))
        return None

    def _columns_by_position(self, cells: Sequence[Cell]) -> None:
        self.width = len(cells)
        for ours, ref in self.profile.columns.items():
            assert ref.position is not None  # a profile without a header maps by position only
            self.positions[ours] = ref.position - 1
            self.labels[ours] = str(ref)
        self._planned()

    # -- data --------------------------------------------------------------------------------------------------

    def _is_total(self, cells: Sequence[Cell]) -> bool:
        label = self.profile.total_label
        if label is None:
            return False
        first = next((cell for cell in cells if not (isinstance(cell, str) and not cell.strip())), None)
        if not isinstance(first, str):
            return False
        key, wanted = header_key(first), header_key(label)
        return key == wanted or (key.startswith(wanted) and key[len(wanted)] in " :")

    def _data(self, number: int, cells: Sequence[Cell]) -> None:
        if self.total is not None:
            self.problems.append(
                RowProblem(
                    number,
                    "row",
                    f"comes after the total row (row {self.total[0]}); only footer rows may follow it"
                    " (footer_rows in the profile)",
                )
            )
            return
        if self.profile.total_label is not None and self._is_total(cells):
            amount_cell = self._cell(cells, "amount")
            try:
                stated = self._amount(amount_cell)
            except NumberError as exc:
                self.problems.append(RowProblem(number, self.labels["amount"], f"total row: {exc}"))
                stated = None
            self.total = (number, stated)
            return
        if self.fixed_width and self.width is not None and len(cells) != self.width:
            self.problems.append(RowProblem(number, "row", f"has {len(cells)} fields, the header has {self.width}"))
            return
        explained: list[ExplainedCell] | None = None
        if len(self.explanation.rows) < self.explain_rows:
            explained = []
            self.explanation.rows.append((number, explained))
        values: list[str] = []
        amount: Decimal | None = None
        width = len(cells)
        for ours, position in self.plan:
            if position is None:
                values.append("")  # `concept` not mapped: empty
                continue
            cell = cells[position] if position < width else None
            if explained is None and ours != "amount" and type(cell) is str:
                values.append(cell.strip())  # text as text: most cells of most rows
                continue
            value = ""
            try:
                if ours == "amount":
                    amount = self._amount(cell)
                    if explained is not None:
                        value = format(amount, "f")
                else:
                    value = self._text(cell)
            except NumberError as exc:
                self.problems.append(RowProblem(number, self.labels[ours], str(exc)))
                if explained is not None:
                    explained.append(ExplainedCell(self.labels[ours], ours, _held(cell), f"refused: {exc}"))
            else:
                if explained is not None:
                    explained.append(ExplainedCell(self.labels[ours], ours, _held(cell), value))
            values.append(value)
        if amount is None:
            self.unreadable += 1
        elif self.profile.total_label is not None:
            self.sum += amount  # checked against the total row
        self.rows.append(MappedRow(number, tuple(values), amount))

    def _cell(self, cells: Sequence[Cell], ours: str) -> Cell | None:
        position = self.positions[ours]
        return cells[position] if position < len(cells) else None

    def _amount(self, cell: Cell | None) -> Decimal:
        if type(cell) is str:
            return parse_amount(cell, self.profile.numbers)
        if cell is None:
            raise NumberError("is empty")
        if isinstance(cell, NumberCell):
            return shown_decimal(cell.stored, cell.number_format)
        if isinstance(cell, ErrorCell):
            raise NumberError(f"the cell holds {cell.message}")
        return parse_amount(str(cell), self.profile.numbers)

    @staticmethod
    def _text(cell: Cell | None) -> str:
        if cell is None:
            return ""
        if isinstance(cell, NumberCell):
            return shown_text(cell.stored, cell.number_format)
        if isinstance(cell, ErrorCell):
            raise NumberError(f"the cell holds {cell.message}")
        return cell.strip()
