"""Money counted once (processor.domain.ledger): a payroll's totals added up from its batches' amounts (as the
status events give them) equal the sums of every transfer's final outcome followed through its retries."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.domain.ledger import Attempt, batch_amounts, payroll_totals, transfer_outcomes

ENDINGS = ("RUNNING", "COMPLETED_LINES", "COMPLETED", "FAILED", "REJECTED")


def _batch(draw: st.DrawFn, batch_id: str, indexes: list[int], amounts: list[Decimal]) -> tuple[Attempt, object]:
    ending = draw(st.sampled_from(ENDINGS))
    state = {"RUNNING": "AUTHORIZED", "COMPLETED_LINES": "COMPLETED"}.get(ending, ending)
    results: dict[int, dict[str, object]] = {}
    if ending == "COMPLETED_LINES":
        for position, index in enumerate(indexes):
            status = draw(st.sampled_from(("COMPLETED", "FAILED")))
            results[position] = {"index": position, "status": status, "amount": str(amounts[index])}
    money = batch_amounts(
        batch_id,
        currency="GTQ",
        state=state,
        control_sum=sum((amounts[i] for i in indexes), Decimal("0.00")),
        transfers=len(indexes),
        results=list(results.values()),
    )
    return Attempt(batch_id, state, indexes, results), money


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Decimal], Attempt, object, list[tuple[Attempt, object]]]:
    amounts = draw(st.lists(st.decimals("0.01", "9999.99", places=2), min_size=1, max_size=8))
    original, money = _batch(draw, "B", list(range(len(amounts))), amounts)
    retries: list[tuple[Attempt, object]] = []
    for number in range(1, draw(st.integers(0, 4)) + 1):
        outcomes = transfer_outcomes(original, [r for r, _ in retries])
        if any(o.final == "IN_PROGRESS" for o in outcomes.values()):
            break  # the engine makes no retry while a transfer is in flight (in this model)
        eligible = sorted(i for i, o in outcomes.items() if o.final == "OUTSTANDING")
        if not eligible:
            break
        retries.append(_batch(draw, f"B.retry-{number}", eligible, amounts))
    return amounts, original, money, retries


@settings(max_examples=300, deadline=None)
@given(histories())
def test_totals_from_batches_equal_the_transfers_final_outcomes(history: tuple) -> None:  # type: ignore[type-arg]
    amounts, original, money, retries = history
    totals = payroll_totals(money, [m for _, m in retries])
    outcomes = transfer_outcomes(original, [r for r, _ in retries])
    by_final: dict[str, Decimal] = {}
    for index, outcome in outcomes.items():
        by_final[outcome.final] = by_final.get(outcome.final, Decimal("0.00")) + amounts[index]
    assert totals.paid.amount == by_final.get("PAID", 0)
    assert totals.outstanding.amount == by_final.get("OUTSTANDING", 0)
    assert totals.in_progress.amount == by_final.get("IN_PROGRESS", 0)
    assert totals.not_paid.amount == by_final.get("NOT_PAID", 0)
    assert totals.failed.amount == sum(
        (amounts[i] for i, o in outcomes.items() if o.failed_in_original), Decimal("0.00")
    )
    counted = totals.paid.amount + totals.outstanding.amount + totals.in_progress.amount + totals.not_paid.amount
    assert counted == sum(amounts, Decimal("0.00"))  # every transfer once
    assert totals.outstanding.transfers == sum(1 for o in outcomes.values() if o.final == "OUTSTANDING")


def test_a_transfer_paid_by_the_second_retry_names_it() -> None:
    lines = [{"index": 0, "status": "COMPLETED", "amount": "10.00"}, {"index": 1, "status": "FAILED", "amount": "5.00"}]
    original = Attempt("B", "COMPLETED", [0, 1], dict(enumerate(lines)))
    first = Attempt("B.retry-1", "COMPLETED", [1], {0: {"index": 0, "status": "FAILED", "reason": "AC04 closed"}})
    second = Attempt("B.retry-2", "COMPLETED", [1], {0: {"index": 0, "status": "COMPLETED"}})
    assert transfer_outcomes(original, [first])[1].final == "OUTSTANDING"
    assert transfer_outcomes(original, [first])[1].reason == "AC04 closed"
    paid = transfer_outcomes(original, [first, second])[1]
    assert (paid.final, paid.by, paid.failed_in_original) == ("PAID", "B.retry-2", True)
