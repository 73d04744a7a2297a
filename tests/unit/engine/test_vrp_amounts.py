"""How a VRP payment's amount reads (processor.engine.vrp_views): an INVALID payment has none, so it shows what it
asked for as it came, or "—" (its reason says why); the report's totals count payments in the singular or plural."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

from processor.domain.text import counted
from processor.engine.vrp_views import amount_text, payment_json, totals_by_mandate
from processor.store import VrpPayment

T0 = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)


def _payment(state: str, amount: str, request: dict[str, object]) -> VrpPayment:
    return VrpPayment(
        payment_id=f"p-{state}",
        mandate_id="m-1",
        state=state,
        amount=Decimal(amount),
        currency="GBP",
        instruction=json.dumps(request),
        request_sha256="x",
        domestic_vrp_id=None,
        idempotency_key=None,
        next_action_at=None,
        attempts=0,
        version=1,
        lease_owner=None,
        lease_expires_at=None,
        bank_status=None,
        last_error="amount: at most 2 decimals" if state == "INVALID" else None,
        created_at=T0,
        updated_at=T0,
    )


def test_an_invalid_payment_shows_what_it_asked_for_not_zero() -> None:
    asked = _payment("INVALID", "0.00", {"payment_id": "p-INVALID", "amount": "1.005"})
    assert amount_text(asked) == "1.005 requested"
    shown = payment_json(asked)
    assert (shown["amount"], shown["requested_amount"], shown["reason"]) == (
        None,
        "1.005",
        "amount: at most 2 decimals",
    )
    nothing = _payment("INVALID", "0.00", {"payment_id": "p-INVALID"})
    assert amount_text(nothing) == "—" and payment_json(nothing)["requested_amount"] is None
    paid = _payment("COMPLETED", "12.50", {"amount": "12.50"})
    assert amount_text(paid) == "12.50" and payment_json(paid)["amount"] == "12.50"
    assert payment_json(paid)["requested_amount"] is None
    [total] = totals_by_mandate([asked, paid])
    assert total["by_state"] == {
        "COMPLETED": {"payments": 1, "amount": "12.50"},
        "INVALID": {"payments": 1, "amount": None},
    }


def test_counts_read_in_the_singular_and_the_plural() -> None:
    assert [counted(n, "payment") for n in (0, 1, 2)] == ["0 payments", "1 payment", "2 payments"]
    assert counted(1, "batch", "batches") == "1 batch" and counted(3, "batch", "batches") == "3 batches"
