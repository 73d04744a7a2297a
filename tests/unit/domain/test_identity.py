"""A batch's identity is its business content (processor/domain/identity.py): what a resubmission changes
(`requested_at`, `source`, how an amount is written) does not count; what it asks for does."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from processor.domain.identity import document_content_sha256, request_content_sha256


def _batch() -> dict[str, Any]:
    return {
        "batch_id": "NOV-1",
        "integration": "bank-gt",
        "file_reference": "PAYROLL-NOV",
        "origin_account": {"account_number": "3001234567", "account_type": "MONETARY", "currency": "GTQ"},
        "transactions": [
            {
                "destination_account": {
                    "account_number": "2001002001",
                    "account_type": "SAVINGS",
                    "currency": "GTQ",
                    "email": "ana@example.com",
                },
                "amount": Decimal("1500.50"),
                "concept": "Payroll",
                "employee_reference": "E-1",
            }
        ],
        "requested_at": datetime(2024, 11, 30, 12, tzinfo=UTC),
        "source": "erp-x",
    }


def test_a_resubmission_has_the_same_identity() -> None:
    again = _batch()
    again["requested_at"] = datetime.now(UTC) + timedelta(days=3)
    again["source"] = "dispersion-submit"
    again["transactions"][0]["amount"] = Decimal("1500.500")  # the same amount written otherwise
    del again["transactions"][0]["destination_account"]["account_type"]  # JSON form: the default applies
    assert document_content_sha256(again) == document_content_sha256(_batch())


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b["transactions"][0].__setitem__("amount", Decimal("1500.51")),
        lambda b: b["transactions"][0]["destination_account"].__setitem__("account_number", "2001002002"),
        lambda b: b["origin_account"].__setitem__("account_number", "3001234568"),
        lambda b: b.__setitem__("file_reference", "PAYROLL-DEC"),
        lambda b: b.__setitem__("integration", "bank-sv"),
        lambda b: b["transactions"].append(copy.deepcopy(b["transactions"][0])),
        lambda b: b["transactions"][0].__setitem__("employee_reference", "E-2"),
    ],
)
def test_other_business_content_is_another_batch(change: Any) -> None:
    other = _batch()
    change(other)
    assert document_content_sha256(other) != document_content_sha256(_batch())


def test_an_unreadable_batch_still_matches_its_resubmission_and_nothing_else() -> None:
    broken = {"batch_id": "X", "transactions": "not a list", "requested_at": "2024-11-30T12:00:00Z"}
    again = {**broken, "requested_at": "2024-12-01T08:00:00Z", "source": "other"}
    assert document_content_sha256(again) == document_content_sha256(broken)
    assert document_content_sha256({**broken, "transactions": "other"}) != document_content_sha256(broken)


def test_a_vrp_instruction_rerun_differs_only_in_requested_at() -> None:
    first = {"payment_id": "P1", "mandate_id": "M1", "amount": "10.00", "requested_at": "2024-11-30T12:00:00.000Z"}
    rerun = {**first, "requested_at": "2024-11-30T12:05:00.000Z"}
    assert request_content_sha256(rerun) == request_content_sha256(first)
    assert request_content_sha256({**first, "amount": "11.00"}) != request_content_sha256(first)
