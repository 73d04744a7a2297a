"""Hypothesis strategies for free text that intake accepts: any character but controls, surrogates and the bidi
formatting characters (refused by processor/domain/text.py; tests that mean to send them draw them on purpose)."""

from __future__ import annotations

from hypothesis import strategies as st

SAFE_CHARACTERS = st.characters(
    blacklist_categories=("Cc", "Cs"),
    blacklist_characters="\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
)
