"""The `dispersion.transfers` payloads built from a parsed batch (end_flow after the report) are those built from
the stored batch document (every other end), and are made one at a time."""

from __future__ import annotations

import json
from decimal import Decimal
from types import GeneratorType
from typing import Any

import pytest

from processor.domain.batch import batch_from_dict, loads_exact
from processor.engine.transfer_events import batch_transfers, document_transfers, transfer_payloads

DOCUMENT: dict[str, Any] = {
    "batch_id": "NOV-9",
    "integration": "sandbox",
    "file_reference": "PAYROLL-NOV",
    "origin_account": {"account_number": "0100123456", "account_type": "MONETARY", "currency": "GTQ"},
    "transactions": [
        {
            "destination_account": {
                "account_number": f"30000000{i}",
                "account_type": "SAVINGS",
                "currency": "GTQ",
                "email": f"e{i}@example.com",
            },
            "amount": amount,
            "concept": "Nómina",
            "employee_reference": reference,
        }
        for i, (amount, reference) in enumerate([("1500.50", "E-1"), ("10", None), ("0.10", "E-3"), ("7.25", "E-4")])
    ],
    "requested_at": "2026-11-26T10:00:00.000Z",
    "source": "erp pain.001",
}
RESULTS = [
    {"index": 0, "status": "COMPLETED"},
    {"index": 1, "status": "FAILED", "reason": "AC04 closed account"},
    {"index": 2, "status": "PENDING"},
    {"index": 3, "status": "COMPLETED"},
]


@pytest.mark.parametrize(
    ("results", "ended", "reason"),
    [(RESULTS, "COMPLETED", None), (None, "COMPLETED", None), (None, "REJECTED", "the approver rejected it")],
)
def test_the_parsed_batch_gives_the_stored_documents_payloads(
    results: list[dict[str, Any]] | None, ended: str, reason: str | None
) -> None:
    document = loads_exact(json.dumps(DOCUMENT))  # as end_flow reads the stored text
    common: dict[str, Any] = {
        "ended": ended,
        "reason": reason,
        "occurred_at": "2026-11-26T10:05:00.000Z",
        "original_indexes": (7, 8, 9, 10),
        "retry_of": "NOV-1",
        "from_pain001": True,
    }
    from_document = transfer_payloads(document_transfers("NOV-9", document), results, **common)
    from_batch = transfer_payloads(batch_transfers(batch_from_dict(document)), results, **common)
    assert isinstance(from_document, GeneratorType) and isinstance(from_batch, GeneratorType)
    expected = list(from_document)
    assert list(from_batch) == expected
    outcomes = [(p["index"], p["outcome"], p["amount"], p["reason_code"]) for p in expected]
    if results is not None:  # the pending transfer has no outcome yet
        assert outcomes == [(0, "COMPLETED", Decimal("1500.50"), None), (1, "FAILED", Decimal("10"), "AC04"),
                            (3, "COMPLETED", Decimal("7.25"), None)]  # fmt: skip
    else:
        assert [o[1] for o in outcomes] == ["COMPLETED" if ended == "COMPLETED" else "FAILED"] * 4
    assert {(p["currency"], p["origin_account"], p["original_index"] - p["index"]) for p in expected} == {
        ("GTQ", "0100123456", 7)
    }
