"""File payments, pure part: how a payment's status moves and which transfers settle.

Status is computed on read from the clock (no background task): a payment is `InitiationPending` until
`delay` seconds after its creation; from then on it is `InitiationCompleted` when at least one transfer
settled, else `InitiationFailed`, and its StatusUpdateDateTime is that moment.

Which transfers fail is a fixed, documented rule on account number suffixes (docs/sandbox-files.md), so a
payroll engineer can script failures by choosing account numbers:

| account | ends in | every affected transfer | code | reason |
|---|---|---|---|---|
| destination | 9901 | that transfer | AC01 | IncorrectAccountNumber |
| destination | 9902 | that transfer | AC04 | ClosedAccountNumber |
| destination | 9903 | that transfer | AC06 | BlockedAccount |
| origin | 9904 | every transfer of the file | AM04 | InsufficientFunds |

Every other transfer settles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

INITIATION_PENDING = "InitiationPending"
INITIATION_COMPLETED = "InitiationCompleted"
INITIATION_FAILED = "InitiationFailed"

PENDING = "Pending"
SETTLED = "Settled"
REJECTED = "Rejected"


@dataclass(frozen=True)
class Rule:
    """One row of the failure table."""

    side: str  # "destination" or "origin"
    suffix: str
    code: str
    reason: str


RULES: tuple[Rule, ...] = (
    Rule("destination", "9901", "AC01", "IncorrectAccountNumber: the destination account does not exist"),
    Rule("destination", "9902", "AC04", "ClosedAccountNumber: the destination account is closed"),
    Rule("destination", "9903", "AC06", "BlockedAccount: the destination account is blocked"),
    Rule("origin", "9904", "AM04", "InsufficientFunds: the origin account cannot cover the transfer"),
)


@dataclass(frozen=True)
class Outcome:
    """How one transfer ends: Settled, or Rejected with an ISO 20022 style reason code."""

    status: str
    code: str | None = None
    reason: str | None = None


SETTLES = Outcome(SETTLED)


def transfer_outcome(origin_account: str, destination_account: str) -> Outcome:
    """The final outcome of one transfer, from the failure table (the origin rule wins)."""
    for rule in RULES:
        if rule.side == "origin" and origin_account.endswith(rule.suffix):
            return Outcome(REJECTED, rule.code, rule.reason)
    for rule in RULES:
        if rule.side == "destination" and destination_account.endswith(rule.suffix):
            return Outcome(REJECTED, rule.code, rule.reason)
    return SETTLES


def outcomes(transactions: Sequence[Mapping[str, Any]]) -> list[Outcome]:
    """The outcome of each transaction of a (checked) file payload, in file order."""
    return [
        transfer_outcome(tx["originAccount"]["accountNumber"], tx["destinationAccount"]["accountNumber"])
        for tx in transactions
    ]


def settled_count(transactions: Sequence[Mapping[str, Any]]) -> int:
    """How many transfers of the file will settle."""
    return sum(1 for outcome in outcomes(transactions) if outcome.status == SETTLED)


def payment_status(created: datetime, now: datetime, delay_seconds: float, settled: int) -> tuple[str, datetime]:
    """The payment's status at `now` and the moment it took that status."""
    decided = created + timedelta(seconds=delay_seconds)
    if now < decided:
        return INITIATION_PENDING, created
    return (INITIATION_COMPLETED if settled > 0 else INITIATION_FAILED), decided


def _money(value: object) -> Decimal:
    assert isinstance(value, int | Decimal) and not isinstance(value, bool)
    return Decimal(value)


def report(transactions: Sequence[Mapping[str, Any]], reference: str, final: bool) -> dict[str, Any]:
    """The per-transaction report body: `Transactions` and `Totals`.

    While the payment is pending (`final` false) every transfer is `Pending`; afterwards each is `Settled`
    or `Rejected` with `ReasonCode` and `Reason` (both null unless rejected). `reference` is the value the
    uploaded file carried in each `transferInfo.reference` (the consent id).
    """
    lines: list[dict[str, Any]] = []
    totals: dict[str, dict[str, Any]] = {
        status: {"Count": 0, "Amount": Decimal(0)} for status in (PENDING, SETTLED, REJECTED)
    }
    grand = Decimal(0)
    for index, (tx, outcome) in enumerate(zip(transactions, outcomes(transactions), strict=True)):
        amount = _money(tx["transferInfo"]["transactionAmount"])
        shown = outcome if final else Outcome(PENDING)
        lines.append(
            {
                "Index": index,
                "DestinationAccount": tx["destinationAccount"]["accountNumber"],
                "Amount": tx["transferInfo"]["transactionAmount"],
                "Currency": tx["destinationAccount"]["currency"],
                "Reference": reference,
                "Status": shown.status,
                "ReasonCode": shown.code,
                "Reason": shown.reason,
            }
        )
        bucket = totals[shown.status]
        bucket["Count"] += 1
        bucket["Amount"] += amount
        grand += amount
    currency = transactions[0]["destinationAccount"]["currency"] if transactions else None
    return {
        "Transactions": lines,
        "Totals": {
            "NumberOfTransactions": str(len(lines)),
            "ControlSum": grand,
            "Currency": currency,
            **totals,
        },
    }
