"""How an account number is shown in logs, command output and pages: its last four characters only."""

from __future__ import annotations


def mask_account(value: object) -> str:
    """`****` and the last four characters (`****0301`); `?` when there is no number. The length is not shown."""
    text = "" if value is None else str(value)
    if not text:
        return "?"
    return "****" + text[-4:]
