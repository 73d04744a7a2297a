"""What differs between two submissions under one batch id (a conflict), in words a payroll operator reads.

    batch_difference(stored_document, new_document)
    # "transfers: 1 changed (#2 amount 1266.25 -> 1366.25); control sum 4250.75 -> 4350.75 GTQ"

Transfers are compared by position (an ERP re-export keeps its order): changed fields of a transfer present in
both, transfers added at the end or removed from it; then the origin account, the integration, the file
reference and `execute_on`. Account numbers are masked. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from processor.domain.batch import BatchParseError, PayrollBatch, Transfer, batch_from_dict
from processor.domain.masking import mask_account
from processor.domain.money import money_text

SHOWN: Final = 5  # changed transfers named one by one; the rest are counted


def _transfer_changes(index: int, old: Transfer, new: Transfer) -> str | None:
    parts: list[str] = []
    if old.account_number != new.account_number:
        parts.append(f"account {mask_account(old.account_number)} -> {mask_account(new.account_number)}")
    if old.amount != new.amount:
        parts.append(f"amount {money_text(old.amount)} -> {money_text(new.amount)}")
    for name in ("account_type", "currency", "email", "concept", "employee_reference"):
        if getattr(old, name) != getattr(new, name):
            parts.append(f"{name} {getattr(old, name)!r} -> {getattr(new, name)!r}")
    return f"#{index} {', '.join(parts)}" if parts else None


def _total(batch: PayrollBatch) -> Decimal:
    return sum((t.amount for t in batch.transactions), Decimal(0))


def transfer_difference(old: PayrollBatch, new: PayrollBatch) -> list[str]:
    """The transfers' differences: changed, added, removed, and the control sums when they differ."""
    changed = [
        text
        for index, (a, b) in enumerate(zip(old.transactions, new.transactions, strict=False))
        if (text := _transfer_changes(index, a, b)) is not None
    ]
    parts: list[str] = []
    if changed:
        shown = "; ".join(changed[:SHOWN]) + (f"; and {len(changed) - SHOWN} more" if len(changed) > SHOWN else "")
        parts.append(f"transfers: {len(changed)} changed ({shown})")
    if len(new.transactions) > len(old.transactions):
        added = new.transactions[len(old.transactions) :]
        parts.append(f"{len(added)} transfer(s) added ({money_text(sum((t.amount for t in added), Decimal(0)))})")
    if len(new.transactions) < len(old.transactions):
        removed = old.transactions[len(new.transactions) :]
        amount = money_text(sum((t.amount for t in removed), Decimal(0)))
        parts.append(f"{len(removed)} transfer(s) removed ({amount})")
    if _total(old) != _total(new):
        parts.append(f"control sum {money_text(_total(old))} -> {money_text(_total(new))} {new.origin.currency}")
    return parts


def batch_difference(stored: Any, submitted: Any) -> str:
    """The difference between the stored batch document and a new submission (see the module docstring)."""
    if not isinstance(stored, Mapping) or not isinstance(submitted, Mapping):
        return "the stored batch or the new one cannot be read as a batch"
    try:
        old, new = batch_from_dict(stored), batch_from_dict(submitted)
    except BatchParseError as exc:
        return f"the new submission does not read as a batch: {exc.problems[0] if exc.problems else exc}"
    parts = transfer_difference(old, new)
    if old.origin != new.origin:
        parts.append(
            f"origin {mask_account(old.origin.number)} {old.origin.type} {old.origin.currency} -> "
            f"{mask_account(new.origin.number)} {new.origin.type} {new.origin.currency}"
        )
    for name in ("integration", "file_reference", "execute_on"):
        if getattr(old, name) != getattr(new, name):
            parts.append(f"{name} {getattr(old, name)!s} -> {getattr(new, name)!s}")
    return "; ".join(parts) or "nothing a payroll pays differs (only how it is written)"
