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
