"""Pure rules of sandbox.settlement: which transfers fail, how the payment status moves, the report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sandbox_files_support import payload, transaction

from sandbox.settlement import (
    INITIATION_COMPLETED,
    INITIATION_FAILED,
    INITIATION_PENDING,
    REJECTED,
    SETTLED,
    Outcome,
    payment_status,
    report,
    settled_count,
    transfer_outcome,
)

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("origin", "dest", "expected"),
    [
        ("100200300", "200100300", Outcome(SETTLED)),
        (
            "100200300",
            "5559901",
            Outcome(REJECTED, "AC01", "IncorrectAccountNumber: the destination account does not exist"),
        ),
        ("100200300", "GT-9902", Outcome(REJECTED, "AC04", "ClosedAccountNumber: the destination account is closed")),
        ("100200300", "9903", Outcome(REJECTED, "AC06", "BlockedAccount: the destination account is blocked")),
        (
            "100209904",
            "200100300",
            Outcome(REJECTED, "AM04", "InsufficientFunds: the origin account cannot cover the transfer"),
        ),
        # The origin rule wins over a destination rule.
        (
            "100209904",
            "5559901",
            Outcome(REJECTED, "AM04", "InsufficientFunds: the origin account cannot cover the transfer"),
        ),
        # Suffixes only: the digits elsewhere, or a suffix of another side, change nothing.
        ("100200300", "99010", Outcome(SETTLED)),
        ("100209901", "200100300", Outcome(SETTLED)),
        ("100200300", "2001009904", Outcome(SETTLED)),
    ],
)
def test_failure_table(origin: str, dest: str, expected: Outcome) -> None:
    assert transfer_outcome(origin, dest) == expected


def test_status_moves_after_the_delay_to_completed_or_failed() -> None:
    assert payment_status(T0, T0, 2.0, 3) == (INITIATION_PENDING, T0)
    just_before = T0 + timedelta(seconds=1.999)
    assert payment_status(T0, just_before, 2.0, 3) == (INITIATION_PENDING, T0)
    at = T0 + timedelta(seconds=2)
    assert payment_status(T0, at, 2.0, 1) == (INITIATION_COMPLETED, at)
    assert payment_status(T0, at + timedelta(hours=5), 2.0, 1) == (INITIATION_COMPLETED, at)
    assert payment_status(T0, at + timedelta(hours=5), 2.0, 0) == (INITIATION_FAILED, at)
    assert payment_status(T0, T0, 0.0, 0) == (INITIATION_FAILED, T0)


def test_settled_count() -> None:
    txs = payload(transaction("1"), transaction("29901"), transaction("39902"), transaction("4"))["data"]["transaction"]
    assert settled_count(txs) == 2
    assert settled_count(payload(transaction(origin="19904"))["data"]["transaction"]) == 0


def test_report_pending_then_final() -> None:
    txs = payload(
        transaction("200100300", "1500.50"),
        transaction("200109902", "99.95"),
        transaction("200100302", 750),
    )["data"]["transaction"]
    pending = report(txs, "pay-fi-x", final=False)
    assert [line["Status"] for line in pending["Transactions"]] == ["Pending"] * 3
    assert pending["Totals"]["Pending"] == {"Count": 3, "Amount": Decimal("2350.45")}
    assert pending["Totals"]["Settled"]["Count"] == 0

    final = report(txs, "pay-fi-x", final=True)
    assert final["Transactions"][1] == {
        "Index": 1,
        "DestinationAccount": "200109902",
        "Amount": Decimal("99.95"),
        "Currency": "GTQ",
        "Reference": "pay-fi-x",
        "Status": "Rejected",
        "ReasonCode": "AC04",
        "Reason": "ClosedAccountNumber: the destination account is closed",
    }
    assert final["Transactions"][0]["ReasonCode"] is None
    assert final["Totals"] == {
        "NumberOfTransactions": "3",
        "ControlSum": Decimal("2350.45"),
        "Currency": "GTQ",
        "Pending": {"Count": 0, "Amount": Decimal(0)},
        "Settled": {"Count": 2, "Amount": Decimal("2250.50")},
        "Rejected": {"Count": 1, "Amount": Decimal("99.95")},
    }
