"""The duplicate-payroll guard's matching (processor.domain.duplicates), the conflict's difference
(processor.domain.difference) and the default batch id from what a payroll pays (processor.domain.identity)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from processor.domain.batch import OriginAccount, PayrollBatch, Transfer
from processor.domain.difference import batch_difference
from processor.domain.duplicates import Candidate, batch_keys, best_match, sketch, transfer_keys
from processor.domain.identity import pay_period, payroll_id

AT = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def payroll(batch_id: str, amounts: list[str], *, accounts: list[str] | None = None) -> PayrollBatch:
    accounts = accounts or [f"20010{i:04d}" for i in range(len(amounts))]
    return PayrollBatch(
        batch_id=batch_id,
        integration="sandbox",
        file_reference=batch_id[:40],
        origin=OriginAccount("3001234567", "MONETARY", "GTQ"),
        transactions=tuple(
            Transfer(account, "SAVINGS", "GTQ", f"e{i}@example.com", Decimal(amount), "Sueldo noviembre", f"E-{i}")
            for i, (account, amount) in enumerate(zip(accounts, amounts, strict=True))
        ),
        requested_at=AT,
        source="test",
    )


def document(batch: PayrollBatch) -> dict[str, object]:
    return {
        "batch_id": batch.batch_id,
        "integration": batch.integration,
        "file_reference": batch.file_reference,
        "origin_account": {"account_number": "3001234567", "account_type": "MONETARY", "currency": "GTQ"},
        "transactions": [
            {
                "destination_account": {
                    "account_number": t.account_number,
                    "account_type": t.account_type,
                    "currency": t.currency,
                    "email": t.email,
                },
                "amount": t.amount,
                "concept": t.concept,
                "employee_reference": t.employee_reference,
            }
            for t in batch.transactions
        ],
        "requested_at": AT.isoformat(),
        "source": "test",
    }


def candidate(batch: PayrollBatch) -> Candidate:
    return Candidate(batch.batch_id, AT, transfer_keys(batch))


def test_a_re_export_under_another_id_matches_every_transfer_with_the_figures() -> None:
    november = payroll("NOV-A", ["1500.50", "2000.00", "750.25", "99.00", "10.00"])
    again = replace(november, batch_id="NOV-B", file_reference="NOV-B")
    found = best_match(again, batch_keys(again), [candidate(november)])
    assert found is not None and found.exact and found.batch_id == "NOV-A"
    assert found.note("GTQ") == (
        "possible duplicate payroll of batch NOV-A (received 2026-11-25T12:00:00.000Z): 5 of 5 transfers "
        "(100 %, 4359.75 GTQ) pay the same account the same amount"
    )


def test_a_partial_overlap_is_flagged_from_the_threshold_and_not_below() -> None:
    old = payroll("OCT", ["100.00"] * 10)
    eight = payroll("NOV", ["100.00"] * 8 + ["200.00", "300.00"])  # 8 of 10 the same
    seven = payroll("DEC", ["100.00"] * 7 + ["200.00", "300.00", "400.00"])
    found = best_match(eight, batch_keys(eight), [candidate(old)])
    assert found is not None and (found.matched, found.total, found.amount) == (8, 10, Decimal("800.00"))
    assert "8 of 10 transfers (80 %, 800.00 GTQ)" in found.note("GTQ")
    assert best_match(seven, batch_keys(seven), [candidate(old)]) is None
    assert best_match(seven, batch_keys(seven), [candidate(old)], threshold=Decimal("0.7")) is not None


def test_amounts_count_by_value_and_repeated_transfers_as_a_multiset() -> None:
    old = payroll("A", ["1.5", "1.5"], accounts=["111", "111"])
    new = payroll("B", ["1.50", "1.50", "1.50"], accounts=["111", "111", "111"])
    found = best_match(new, batch_keys(new), [candidate(old)], threshold=Decimal("0.5"))
    assert found is not None and (found.matched, found.total) == (2, 3)


def test_a_batchs_own_retry_is_never_its_duplicate_and_a_name_proves_nothing() -> None:
    """A retry (by its record: `Candidate.retry_of`) pays the batch's failed transfers again on purpose; a batch
    merely named like a retry, without a record, is compared like any other."""
    old = payroll("NOV", ["100.00", "200.00"])
    retry = replace(old, batch_id="NOV.retry-1")
    made = Candidate(retry.batch_id, AT, transfer_keys(retry), retry_of="NOV")
    assert best_match(old, batch_keys(old), [made]) is None
    named = best_match(old, batch_keys(old), [candidate(retry)])
    assert named is not None and named.batch_id == "NOV.retry-1"


def test_the_sketch_is_the_smallest_distinct_keys() -> None:
    keys = batch_keys(payroll("BIG", [f"{i}.00" for i in range(1, 200)]))
    assert sketch(keys) == sorted(set(keys))[:64]
    assert sketch(keys + keys) == sketch(keys)


def test_the_default_batch_id_depends_on_what_is_paid_only() -> None:
    november = payroll("x", ["1500.50", "2000.00"])
    same = replace(november, batch_id="y", file_reference="other", source="z", requested_at=AT.replace(day=1))
    assert payroll_id(november, submitted_at=AT) == payroll_id(same, submitted_at=AT)
    assert payroll_id(november, submitted_at=AT).startswith("payroll-")
    assert len(payroll_id(november, submitted_at=AT)) == len("payroll-") + 16
    assert payroll_id(november, submitted_at=AT) != payroll_id(payroll("x", ["1500.50", "2000.01"]), submitted_at=AT)


def test_the_default_batch_id_names_the_pay_period() -> None:
    """The same transfers in the same UTC month are one id (a re-save on the 1st or the 30th); the next month's
    identical payroll is another id (for the duplicate-payroll guard to hold, not a "same batch" to drop); with
    `execute_on` the day decides, not the month it is submitted in."""
    november = payroll("x", ["1500.50", "2000.00"])
    first, last = datetime(2026, 11, 1, 0, 0, tzinfo=UTC), datetime(2026, 11, 30, 23, 59, 59, 999000, tzinfo=UTC)
    december = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
    assert payroll_id(november, submitted_at=first) == payroll_id(november, submitted_at=last)
    assert payroll_id(november, submitted_at=last) != payroll_id(november, submitted_at=december)
    # the UTC month, whatever the zone of the instant: 2026-12-01 00:30 in Madrid is still November in UTC
    madrid = datetime(2026, 12, 1, 0, 30, tzinfo=ZoneInfo("Europe/Madrid"))
    assert payroll_id(november, submitted_at=madrid) == payroll_id(november, submitted_at=last)
    scheduled = replace(november, execute_on=date(2026, 12, 15))
    assert pay_period(scheduled, last) == "2026-12-15" and pay_period(november, last) == "2026-11"
    assert payroll_id(scheduled, submitted_at=last) == payroll_id(scheduled, submitted_at=december)
    assert payroll_id(scheduled, submitted_at=december) != payroll_id(november, submitted_at=december)
    assert payroll_id(scheduled, submitted_at=last) != payroll_id(
        replace(november, execute_on=date(2027, 1, 15)), submitted_at=last
    )


def test_the_difference_names_changed_added_and_removed_transfers() -> None:
    old = payroll("HEX-2026-11-B", ["1000.00", "266.25"])
    new = payroll("HEX-2026-11-B", ["1000.00", "366.25", "5.00"])
    assert batch_difference(document(old), document(new)) == (
        "transfers: 1 changed (#1 amount 266.25 -> 366.25); 1 transfer(s) added (5.00); "
        "control sum 1266.25 -> 1371.25 GTQ"
    )
    moved = payroll("HEX-2026-11-B", ["1000.00"], accounts=["99887766"])
    assert batch_difference(document(old), document(moved)) == (
        "transfers: 1 changed (#0 account ****0000 -> ****7766); 1 transfer(s) removed (266.25); "
        "control sum 1266.25 -> 1000.00 GTQ"
    )
    other = dict(document(old), file_reference="OTHER")
    assert batch_difference(document(old), other) == "file_reference HEX-2026-11-B -> OTHER"
