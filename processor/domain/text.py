"""Free text that reaches a person (a transfer's concept on the bank's consent page, a VRP reference): no control
characters and no bidirectional formatting characters, which can make a page show text other than what was sent
(U+202E turns `Payroll 0051` into something that reads backwards)."""

from __future__ import annotations

import re

# C0 and C1 controls (tab and newline included: one-line fields), DEL, and the bidi marks, embeddings, overrides
# and isolates (U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def unsafe_character(text: str) -> str | None:
    """A description of the first control or bidi formatting character in `text` (`U+202E at position 8`), or
    None when there is none."""
    found = _UNSAFE.search(text)
    if found is None:
        return None
    return f"U+{ord(found.group()):04X} at position {found.start() + 1}"


def any_unsafe(texts: str) -> bool:
    """Whether a text (or several joined) holds any such character: one C-speed scan."""
    return _UNSAFE.search(texts) is not None


def text_problem(text: str) -> str | None:
    """What makes `text` unfit for an identifier or a one-line free text, or None: a lone surrogate (not valid
    Unicode: no store or encoder takes it) or a control or bidi formatting character."""
    for position, char in enumerate(text, 1):
        if "\ud800" <= char <= "\udfff":
            return f"a lone surrogate (U+{ord(char):04X} at position {position}, not valid Unicode)"
    where = unsafe_character(text)
    return None if where is None else f"a control or bidi character ({where})"


def printable(text: str) -> str:
    """`text` safe to print on one terminal line: control, bidi and surrogate characters shown as `\\u....`
    escapes (an ESC sequence or a newline in a stored id must not forge a line of output)."""
    if _UNSAFE.search(text) is None and not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    return "".join(f"\\u{ord(c):04x}" if _UNSAFE.match(c) or "\ud800" <= c <= "\udfff" else c for c in text)


# OWASP "CSV injection": a cell a spreadsheet would run as a formula starts with one of these.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A value as a CSV cell that no spreadsheet runs as a formula: text that starts with `=`, `+`, `-`, `@`, a tab
    or a carriage return gets a leading `'` (OWASP's rule); other values are returned as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """`1 payment`, `2 payments`, `0 payments`; `plural` when it is not the noun and an `s` (`batches`)."""
    return f"{number} {noun}" if number == 1 else f"{number} {plural or noun + 's'}"
