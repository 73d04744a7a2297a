"""What a batch's per-transfer results add up to, and how retry batches are named. Pure.

A COMPLETED batch may still hold transfers the bank rejected (a closed account): the status event says how many
and for how much (`outcome_totals`), and the command line exits 4 for it (`exit_code`), so a script never takes
such a batch for fully paid.

A retry of batch `ID`'s failed transfers is the batch `ID.retry-N` (N = 1, 2, ...): `retry_batch_id` names it.
Which batch a retry retries is known only from its retry record in the store (status events carry it as
`retry_of`), never read back from an id: intake refuses the suffix, and an id is no proof.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Final

from processor.domain.money import CENT
from processor.domain.text import text_problem

RETRY_SUFFIX: Final = re.compile(r"^(?P<original>.+)\.retry-(?P<number>[1-9][0-9]*)$")
# An ISO 20022 external status reason code (AC04, AM04, MS03, NARR) opens a rejected line's reason.
REASON_CODE: Final = re.compile(r"^[A-Z0-9]{4}$")

# `dispersion status --until-terminal` and `dispersion pay-file` (docs/operations.md, "Exit codes").
EXIT_PAID, EXIT_ENDED, EXIT_USAGE, EXIT_NOT_TERMINAL, EXIT_PARTLY_PAID = 0, 1, 2, 3, 4
EXIT_KAFKA_UNREACHABLE: Final = 8  # `status`: the broker did not answer (not "not final yet")
ENDED_STATUSES: Final = frozenset({"FAILED", "REJECTED", "EXPIRED", "INVALID"})


def _amount(value: Any) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def outcome_totals(results: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The status event's outcome fields from its `transaction_results` (all None when there are none):
    `transfers_completed`, `transfers_failed`, `amount_completed`, `amount_failed` (two decimals)."""
    if results is None:
        return {"transfers_completed": None, "transfers_failed": None, "amount_completed": None, "amount_failed": None}
    done = failed = 0
    done_sum = failed_sum = Decimal("0.00")
    for item in results:
        if item.get("status") == "COMPLETED":
            done += 1
            done_sum += _amount(item.get("amount", 0))
        elif item.get("status") == "FAILED":
            failed += 1
            failed_sum += _amount(item.get("amount", 0))
    return {
        "transfers_completed": done,
        "transfers_failed": failed,
        "amount_completed": done_sum.quantize(CENT),
        "amount_failed": failed_sum.quantize(CENT),
    }


def exit_code(status: str, transfers_failed: int | None) -> int | None:
    """The exit status for a terminal batch status (None: not terminal): 0 every transfer paid, 4 completed with
    failed transfers, 1 failed, rejected, expired or invalid."""
    if status == "COMPLETED":
        return EXIT_PARTLY_PAID if transfers_failed else EXIT_PAID
    if status in ENDED_STATUSES:
        return EXIT_ENDED
    return None


MAX_BATCH_ID = 200


def batch_id_problem(value: object, *, retry: bool = False) -> str | None:
    """Why `value` cannot be a batch id at intake, or None: not a non-empty string of at most 200 characters,
    a control, bidi or lone surrogate character, or the `.retry-N` suffix reserved for retry batches (only
    `retry=True`, the retry command's own batches, may carry it)."""
    if not isinstance(value, str) or not value.strip():
        return "batch_id is missing or not a non-empty string"
    if len(value) > MAX_BATCH_ID:
        return f"batch_id is longer than {MAX_BATCH_ID} characters"
    problem = text_problem(value)
    if problem is not None:
        return f"batch_id holds {problem}"
    if not retry and RETRY_SUFFIX.match(value):
        return f"batch_id {value!r} ends in .retry-N, which is reserved for retry batches (dispersion retry-failed)"
    return None


def retry_batch_id(original: str, number: int) -> str:
    """The id of the `number`-th retry of `original` (`ID.retry-1`, `ID.retry-2`, ...)."""
    if number < 1:
        raise ValueError("retry numbers start at 1")
    return f"{original}.retry-{number}"


def split_reason(reason: str | None) -> tuple[str | None, str | None]:
    """A transfer's reason as (bank reason code, text): `"AC04 closed account"` -> `("AC04", "closed account")`."""
    if not reason:
        return None, None
    head, _, rest = reason.partition(" ")
    if REASON_CODE.match(head):
        return head, rest or None
    return None, reason
