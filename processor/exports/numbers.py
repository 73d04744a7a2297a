"""Numbers as ERP exports write them: local separators in text, and spreadsheet cells shown through their format.

Text (`parse_amount`): each export profile names its decimal separator (`.` or `,`) and its thousands separator
(none, `.`, `,`, a space or `'`). `1.234,56`, `1 234,56` (also with no-break or narrow no-break spaces),
`1,234.56`, `(1,234.56)` (negative), `1.234,56-` (negative, as SAP writes it) are read exactly; anything the
profile does not settle (a separator it does not name, groups not of three digits, two decimal separators, other
characters) is refused with the reason, never guessed.

Spreadsheet numbers (`shown_decimal`, `shown_text`): a workbook stores a binary double written out as decimal
text (`0.30000000000000004`); what the payroll team sees and approves is that number through the cell's number
format (`#,##0.00` shows `0.30`). The stored text is taken to the 15 significant digits a spreadsheet works with,
then rounded half away from zero to the decimals the format shows, all in `Decimal`. Formats that change the
value (percent, scaling by thousands, scientific, fractions) or show a date are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Final

DECIMAL_SEPARATORS: Final = (".", ",")
THOUSANDS_SEPARATORS: Final = ("", ".", ",", " ", "'")
# What `thousands_separator = " "` accepts: a space, a no-break space, a narrow no-break space, a thin space.
SPACES: Final = frozenset(" \u00a0\u202f\u2009")
MINUS_SIGNS: Final = frozenset("-\u2212")
SIGNIFICANT_DIGITS: Final = 15  # a spreadsheet's precision: what it shows and computes with

_STORED_NUMBER: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_CONTEXT: Final = Context(prec=60)
# A plain number (`NumberStyle.plain`); a leading minus is read, and validation then refuses it with its reason.
_PLAIN_NUMBER: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_PLAIN_EXPECTED: Final = "expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)"


class NumberError(ValueError):
    """A number that cannot be read; the message is the reason, for the row's report."""


@dataclass(frozen=True, slots=True)
class NumberStyle:
    """How an export writes numbers as text: its decimal and thousands separators (`""`: none). `plain`: our own
    layout's numbers (docs/submit.md, "CSV layout"): digits, optionally `.` and decimals, an optional leading
    minus, and nothing else (no sign after, no brackets, no separators)."""

    decimal: str = "."
    thousands: str = ""
    plain: bool = False

    def __post_init__(self) -> None:
        if self.decimal not in DECIMAL_SEPARATORS:
            raise ValueError(f"decimal separator must be one of {DECIMAL_SEPARATORS}, not {self.decimal!r}")
        if self.thousands not in THOUSANDS_SEPARATORS:
            raise ValueError(f"thousands separator must be one of {THOUSANDS_SEPARATORS}, not {self.thousands!r}")
        if self.thousands == self.decimal:
            raise ValueError("the decimal and thousands separators must differ")
        if self.plain and (self.decimal, self.thousands) != (".", ""):
            raise ValueError("plain numbers have '.' as decimal separator and no thousands separator")

    @property
    def example(self) -> str:
        """One thousand two hundred thirty-four and 56 cents in this style (`1.234,56`)."""
        return f"1{self.thousands}234{self.decimal}56"

    def is_separator(self, char: str) -> bool:
        """Whether `char` separates thousands in this style."""
        if self.thousands == " ":
            return char in SPACES
        return bool(self.thousands) and char == self.thousands


def parse_amount(text: str, style: NumberStyle) -> Decimal:
    """The exact value of `text` written in `style`; NumberError with the reason otherwise (naming the other
    style when the text is written in it: `1,234.56` in a `1.234,56` profile)."""
    if style.plain:
        body = text.strip()
        if _PLAIN_NUMBER.fullmatch(body):
            return Decimal(body)
        raise NumberError(_PLAIN_EXPECTED if body else "is empty")
    try:
        return _parse(text, style)
    except NumberError:
        if {style.decimal, style.thousands} == {".", ","}:
            other = NumberStyle(style.thousands, style.decimal)
            try:
                _parse(text, other)
            except NumberError:
                pass
            else:
                raise NumberError(
                    f"{text.strip()!r} is written like {other.example}, but this profile expects numbers like"
                    f" {style.example}"
                ) from None
        raise


def _parse(text: str, style: NumberStyle) -> Decimal:
    body = text.strip()
    if not body:
        raise NumberError("is empty")
    signs = 0
    negative = False
    if body.startswith("(") and body.endswith(")"):
        signs, negative, body = 1, True, body[1:-1].strip()
    if body[:1] in MINUS_SIGNS or body[:1] == "+":
        signs, negative, body = signs + 1, body[0] != "+", body[1:].strip()
    elif body[-1:] in MINUS_SIGNS:
        signs, negative, body = signs + 1, True, body[:-1].strip()
    if signs > 1 or body[:1] in MINUS_SIGNS or body[-1:] in MINUS_SIGNS or body[:1] in "(+" or body[-1:] == ")":
        raise NumberError(f"{text.strip()!r}: more than one sign")
    for char in body:
        if not (char.isascii() and char.isdigit()) and char != style.decimal and not style.is_separator(char):
            raise NumberError(f"{text.strip()!r}: {_stray(char, style)}")
    if body.count(style.decimal) > 1:
        raise NumberError(f"{text.strip()!r}: more than one decimal separator {style.decimal!r} ({_expected(style)})")
    whole, _, fraction = body.partition(style.decimal)
    if style.decimal in body and not fraction:
        raise NumberError(f"{text.strip()!r}: no digits after the decimal separator ({_expected(style)})")
    if any(not char.isdigit() for char in fraction):
        raise NumberError(f"{text.strip()!r}: a thousands separator after the decimal separator ({_expected(style)})")
    digits = _grouped_digits(whole, style, text.strip())
    if not digits and not fraction:
        raise NumberError(f"{text.strip()!r}: no digits")
    value = Decimal(f"{digits or '0'}.{fraction}" if fraction else digits)
    return -value if negative else value


def _grouped_digits(whole: str, style: NumberStyle, text: str) -> str:
    """The digits of the integer part, checking that thousands separators split it in groups of three."""
    if not any(style.is_separator(char) for char in whole):
        return whole
    groups = re.split("[" + re.escape("".join(SPACES) if style.thousands == " " else style.thousands) + "]", whole)
    if not 1 <= len(groups[0]) <= 3 or any(len(group) != 3 for group in groups[1:]):
        raise NumberError(
            f"{text!r}: {style.thousands or 'the thousands separator'!r} must group the digits in threes"
            f" ({_expected(style)})"
        )
    return "".join(groups)


def _expected(style: NumberStyle) -> str:
    thousands = {"": "no thousands separator", " ": "a space between thousands"}.get(
        style.thousands, f"{style.thousands!r} between thousands"
    )
    return f"this profile expects numbers like {style.example}: {style.decimal!r} before the decimals, {thousands}"


def _stray(char: str, style: NumberStyle) -> str:
    if char in ".,' " or char in SPACES:
        return f"{char!r} is not a separator of this profile ({_expected(style)})"
    return f"unexpected character {char!r} ({_expected(style)})"


# -- spreadsheet cells ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shown:
    """What a number format does to a value: the decimals it shows and its minimum integer digits."""

    decimals: int | None  # None: General (as many as the value has, to 15 significant digits)
    integer_digits: int = 0


_LITERALS: Final = re.compile(r'"[^"]*"|\\.|_.|\*.|\[[^\]]*\]')


def _sections(number_format: str) -> list[str]:
    """The format's `;`-separated sections, with literal text, padding, fill and [colour/locale] blanked out."""
    cleaned = _LITERALS.sub(" ", number_format)
    return cleaned.split(";")


def format_shows(number_format: str, value: Decimal) -> Shown:
    """How `number_format` shows `value`; NumberError for formats that change or hide the value."""
    sections = _sections(number_format)
    if value < 0 and len(sections) > 1:
        section = sections[1]
    elif value == 0 and len(sections) > 2:
        section = sections[2]
    else:
        section = sections[0]
    code = section.strip()
    lowered = code.lower()
    if lowered in ("general", "@") or not number_format.strip():
        return Shown(None)
    if "%" in code:
        raise NumberError(f"the cell is formatted as a percentage ({number_format!r})")
    if re.search(r"[eE][+-]", code):
        raise NumberError(f"the cell is formatted in scientific notation ({number_format!r})")
    if "/" in code and re.search(r"[#?0]\s*/", code):
        raise NumberError(f"the cell is formatted as a fraction ({number_format!r})")
    if re.search(r"[ymdhsYMDHS]", code) or "AM/PM" in code.upper():
        raise NumberError(f"the cell is formatted as a date or time ({number_format!r}), not as a number")
    whole, _, fraction = code.partition(".")
    if re.search(r"[0#?],+(?![0#?])", whole) or (not fraction and re.search(r"[0#?],+\s*$", whole)):
        raise NumberError(f"the cell's format scales the value by thousands ({number_format!r})")
    if re.search(r"[0#?],+\s*$", fraction):
        raise NumberError(f"the cell's format scales the value by thousands ({number_format!r})")
    if "@" in code:
        return Shown(None)
    if not re.search(r"[0#?]", code):
        raise NumberError(f"the cell's format shows no number ({number_format!r})")
    return Shown(decimals=len(re.findall(r"[0#?]", fraction)), integer_digits=whole.count("0"))


def stored_decimal(stored: str) -> Decimal:
    """The decimal a workbook wrote for a number cell (`1.2E-3` included); NumberError when it is none."""
    text = stored.strip()
    if not _STORED_NUMBER.fullmatch(text):
        raise NumberError(f"the cell holds {stored!r}, not a number")
    return Decimal(text)


def shown_decimal(stored: str, number_format: str) -> Decimal:
    """The exact decimal a number cell shows: the stored value at 15 significant digits, rounded half away from
    zero to the decimals of its format (`0.30000000000000004` with `0.00` is `0.30`; with General, `0.3`)."""
    value = stored_decimal(stored)
    shows = format_shows(number_format, value)
    try:
        if value.is_zero():
            precise = Decimal(0)
        else:
            quantum = Decimal(1).scaleb(value.adjusted() - SIGNIFICANT_DIGITS + 1)
            precise = value.quantize(quantum, rounding=ROUND_HALF_UP, context=_CONTEXT)
        if shows.decimals is None:
            text = format(precise.normalize(_CONTEXT), "f")
            return Decimal(text)
        return precise.quantize(Decimal(1).scaleb(-shows.decimals), rounding=ROUND_HALF_UP, context=_CONTEXT)
    except InvalidOperation:
        raise NumberError(f"the cell holds {stored!r}, too large a number") from None


def shown_text(stored: str, number_format: str) -> str:
    """A number cell read as text (an account number stored as a number): the digits it shows, with the leading
    zeros of a `0000000000` format, without thousands grouping. NumberError when the spreadsheet cannot have kept
    every digit (more than 15 significant digits)."""
    value = stored_decimal(stored)
    if value == value.to_integral_value() and len(value.normalize(_CONTEXT).as_tuple().digits) > SIGNIFICANT_DIGITS:
        raise NumberError(
            f"the cell holds the number {stored!r}: a spreadsheet keeps only 15 digits of a number, so digits may be"
            " lost; store this column as text"
        )
    shown = shown_decimal(stored, number_format)
    shows = format_shows(number_format, value)
    text = format(abs(shown), "f")
    whole, dot, fraction = text.partition(".")
    whole = whole.lstrip("0").rjust(max(shows.integer_digits, 1), "0")
    return ("-" if shown < 0 else "") + whole + dot + fraction
