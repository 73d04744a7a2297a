"""Pure parts of flow A's completion: the per-transaction results and the origin currency read from the stored
batch text."""

from __future__ import annotations

from decimal import Decimal

import orjson

from processor.bank.models import FilePaymentReport
from processor.domain.batch import Transfer
from processor.engine.file_events import origin_currency, report_summary, transaction_results


def _transfer(reference: str | None, amount: str) -> Transfer:
    return Transfer("3001", "SAVINGS", "GTQ", "e@example.com", Decimal(amount), "Salary", reference)


def _report(*lines: tuple[int, str, str | None]) -> FilePaymentReport:
    body = {
        "Data": {
            "Status": "InitiationCompleted",
            "Transactions": [
                {
                    "Index": index,
                    "DestinationAccount": f"300{index}",
                    "Amount": 1,
                    "Currency": "GTQ",
                    "Status": status,
                    "ReasonCode": code,
                    "Reason": "closed account" if code else None,
                }
                for index, status, code in lines
            ],
        }
    }
    return FilePaymentReport.parse("fp-1", "application/json", orjson.dumps(body), "iid")


def test_results_follow_the_batch_order_with_its_references_and_amounts() -> None:
    transfers = [_transfer("E-1", "10.50"), _transfer(None, "7.25"), _transfer("E-3", "1.00")]
    results = transaction_results(
        _report((2, "Settled", None), (0, "Settled", None), (1, "Rejected", "AC04")), transfers
    )
    assert results == [
        {"index": 0, "employee_reference": "E-1", "amount": Decimal("10.50"), "status": "COMPLETED", "reason": None},
        {"index": 1, "employee_reference": None, "amount": Decimal("7.25"), "status": "FAILED",
         "reason": "AC04 closed account"},
        {"index": 2, "employee_reference": "E-3", "amount": Decimal("1.00"), "status": "COMPLETED", "reason": None},
    ]  # fmt: skip
    assert report_summary(results) == "2 of 3 transfers settled; 1 rejected (AC04)"
    unreadable = FilePaymentReport.parse("fp-1", "text/csv", b"a,b\n", "iid")
    assert transaction_results(unreadable, transfers) is None


def test_the_origin_currency_is_found_without_parsing_the_transfers() -> None:
    text = orjson.dumps(
        {
            "batch_id": "B-1",
            # A concept quoting the member name cannot fool the search: inside a string its quotes are escaped.
            "transactions": [{"concept": '"origin_account": {"currency": "USD"}'}],
            "origin_account": {"account_number": "3001", "account_type": "MONETARY", "currency": "GTQ"},
        }
    ).decode()
    assert origin_currency(text) == "GTQ"
    assert origin_currency('{"origin_account": {"currency": 5}}') is None
    assert origin_currency("not json") is None


def test_results_share_no_object_with_the_report() -> None:
    """The results outlive the report (they go into the stored report and the COMPLETED event); any int or str
    they shared with it would keep the pymalloc arena it was parsed in, and the report's memory with it."""
    count = 400
    report = _report(*((i, "Rejected" if i % 2 else "Settled", "AC04" if i % 2 else None) for i in range(count)))
    results = transaction_results(report, [_transfer("E", "1")] * count)
    assert results is not None and [r["index"] for r in results] == list(range(count))
    kept = {id(value) for result in results for value in result.values()}
    parsed = {id(value) for line in report.lines for value in (line.index, line.reason_code, line.reason)}
    shared = {id(i) for i in range(257)} | {id(None)}  # CPython's own small ints and None
    assert not (kept & parsed) - shared
    assert results[1]["reason"] == "AC04 closed account"
