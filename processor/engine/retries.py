"""Paying a batch's failed transfers again: a new batch `ID.retry-N` of the failed transfers only (corrected where
the operator gives a new destination account), with `retry_of` set, paid through the normal flow with its own
approval (it is stored RECEIVED like any batch; the worker takes it from there).

Which transfers: those the bank rejected in batch `ID` (every transfer when the whole file failed), minus those
an earlier retry paid, minus those an earlier retry still has in flight (never two payments of one transfer at
once). A transfer that failed again in a finished retry may be retried again: retrying `ID.retry-N` retries
those of its transfers still outstanding (as transfers of `ID`). `plan` decides without writing (the console's
confirmation step shows it; a corrected retry's request keeps it for the second person); `create` writes it
(`processor.engine.requests` decides who may and when). Everything is decided and written
in one transaction; two concurrent requests for the same batch cannot both create retry N (the second fails on
the retry record's key and is told to try again).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from processor.domain.file_states import FlowState, resubmit_hint
from processor.domain.masking import mask_account
from processor.domain.outcomes import retry_batch_id
from processor.domain.time import iso_ms
from processor.domain.validation import DEFAULT_LIMITS, ValidationLimits
from processor.engine.file_events import results_of
from processor.engine.intake import PreparedBatch, prepare_batch, store_batch
from processor.store import Store, StoreTx

SOURCE = "dispersion-retry-failed"
_NOT_ATTEMPTED = (FlowState.REJECTED, FlowState.EXPIRED, FlowState.INVALID, FlowState.WITHDRAWN)


class RetryError(Exception):
    """The retry cannot be made; `status` is the HTTP status the admin API answers (400, 404, 409)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Correction:
    """A new destination account for one transfer (by its index in the original batch)."""

    account_number: str
    account_type: str | None = None


@dataclass(frozen=True)
class RetryOutcome:
    """What a retry request did: the new batch (None when nothing was to retry) and why."""

    original_batch_id: str
    retry_batch_id: str | None
    transfer_indexes: tuple[int, ...] = ()
    corrected: tuple[int, ...] = ()
    in_flight: Mapping[int, str] = field(default_factory=dict)
    message: str = ""


def _failed_indexes(tx: StoreTx, batch_id: str, state: str, count: int) -> set[int]:
    """Transfers of a finished batch that were not paid: rejected lines, or all of a file that failed whole."""
    results = results_of(tx.flows.report(batch_id))
    if results:
        return {int(r["index"]) for r in results if r.get("status") == "FAILED"}
    if state == FlowState.FAILED or state in _NOT_ATTEMPTED:
        return set(range(count))
    return set()


def _retry_history(tx: StoreTx, batch_id: str) -> tuple[int, set[int], dict[int, str]]:
    """(last retry number, transfers a retry paid, transfers in an unfinished retry -> its batch id)."""
    last, paid, in_flight = 0, set(), {}
    for retry in tx.operator.retries_of(batch_id):
        last = max(last, retry.number)
        flow = tx.flows.get(retry.retry_batch_id)
        if flow is None or not flow.terminal:
            in_flight.update(dict.fromkeys(retry.transfer_indexes, retry.retry_batch_id))
            continue
        results = {int(r["index"]): r.get("status") for r in results_of(tx.flows.report(retry.retry_batch_id))}
        for position, original_index in enumerate(retry.transfer_indexes):
            # a COMPLETED retry whose bank reported no lines paid everything it held
            if flow.state == FlowState.COMPLETED and results.get(position, "COMPLETED") == "COMPLETED":
                paid.add(original_index)
    return last, paid, in_flight


def _document(
    original: Mapping[str, Any],
    retry_id: str,
    indexes: list[int],
    corrections: Mapping[int, Correction],
    number: int,
    now: datetime,
) -> dict[str, Any]:
    transactions = []
    for index in indexes:
        item = copy.deepcopy(original["transactions"][index])
        fix = corrections.get(index)
        if fix is not None:
            item["destination_account"]["account_number"] = fix.account_number
            if fix.account_type is not None:
                item["destination_account"]["account_type"] = fix.account_type
        transactions.append(item)
    suffix = f"-R{number}"
    reference = str(original.get("file_reference") or original["batch_id"])
    return {
        "batch_id": retry_id,
        "integration": original["integration"],
        "file_reference": reference[: 40 - len(suffix)] + suffix,
        "origin_account": original["origin_account"],
        "transactions": transactions,
        "requested_at": iso_ms(now),
        "source": SOURCE,
        "retry_of": str(original["batch_id"]),  # for a reader of the stored document; the retry record decides
    }


@dataclass(frozen=True)
class PlannedTransfer:
    """One transfer a retry will pay: its original number, employee, amount and (masked) account."""

    index: int
    employee_reference: str
    amount: Decimal
    account: str
    corrected: bool


@dataclass(frozen=True)
class RetryPlan:
    """What a retry would create, decided without writing: the confirmation page shows it, `create` stores it."""

    outcome: RetryOutcome
    number: int = 0
    currency: str = ""
    transfers: tuple[PlannedTransfer, ...] = ()
    prepared: PreparedBatch | None = None

    @property
    def amount(self) -> Decimal:
        """What the retry pays in all."""
        return sum((t.amount for t in self.transfers), Decimal("0.00"))


_TRANSACTION = re.compile(r"\btransaction (\d+)\b")


def _named_rows(reason: str, transfers: list[Any], indexes: list[int]) -> str:
    """A validation reason with each `transaction N` (a position in the retry) as `row #I / EMPLOYEE` (its
    number and employee in the original batch), which is what the operator sees."""

    def name(found: re.Match[str]) -> str:
        position = int(found.group(1))
        if position >= len(indexes):
            return found.group(0)
        index = indexes[position]
        item = transfers[index] if isinstance(transfers[index], Mapping) else {}
        employee = item.get("employee_reference")
        return f"row #{index}" + (f" / {employee}" if employee else "")

    return _TRANSACTION.sub(name, reason)


def _resolve(tx: StoreTx, batch_id: str) -> tuple[str, frozenset[int] | None]:
    """The batch to retry and the transfers to limit it to: a retry batch `ID.retry-N` retries its own failures,
    which are transfers of `ID` (the retries of a payroll are counted on the original)."""
    made = tx.operator.retry(batch_id)
    if made is None:
        return batch_id, None
    flow = tx.flows.get(batch_id)
    if flow is None or not flow.terminal:
        state = flow.state if flow else "unknown"
        raise RetryError(409, f"batch {batch_id} is {state}, not final: nothing to retry yet")
    return made.original_batch_id, frozenset(made.transfer_indexes)


def plan(
    tx: StoreTx,
    batch_id: str,
    corrections: Mapping[int, Correction],
    *,
    now: datetime,
    integrations: Collection[str] | None,
    limits: ValidationLimits,
) -> RetryPlan:
    """The retry of `batch_id`'s outstanding transfers, decided in `tx` without writing (see the module
    docstring); `RetryError` when refused."""
    if tx.flows.get(batch_id) is None:
        raise RetryError(404, f"batch {batch_id} is unknown")
    asked = batch_id
    batch_id, only = _resolve(tx, batch_id)
    flow = tx.flows.get(batch_id)
    if flow is None:
        raise RetryError(404, f"batch {batch_id} is unknown")
    if not flow.terminal:
        raise RetryError(409, f"batch {batch_id} is {flow.state}, not final: nothing to retry yet")
    document = tx.flows.payload_document(batch_id)
    transfers = document.get("transactions") if isinstance(document, Mapping) else None
    if not isinstance(transfers, list):
        raise RetryError(409, f"batch {batch_id} holds no readable transfers")
    if flow.state in _NOT_ATTEMPTED:
        message = (
            f"batch {batch_id} ended {flow.state}: nothing was paid; submit it again as a new attempt: "
            f"{resubmit_hint(batch_id)}"
        )
        return RetryPlan(RetryOutcome(batch_id, None, message=message))
    failed = _failed_indexes(tx, batch_id, flow.state, len(transfers))
    if only is not None:
        failed &= only
    last, paid, in_flight = _retry_history(tx, batch_id)
    for index in corrections:
        if index not in failed:
            raise RetryError(400, f"transfer {index} of batch {asked} did not fail: it cannot be corrected")
        if index in paid:
            raise RetryError(400, f"transfer {index} of batch {batch_id} was paid by an earlier retry")
        if index in in_flight:
            raise RetryError(409, f"transfer {index} is being paid by {in_flight[index]}, not final yet")
    eligible = sorted(failed - paid - set(in_flight))
    waiting = {i: in_flight[i] for i in sorted(failed & set(in_flight))}
    if not eligible:
        if waiting:
            names = ", ".join(sorted(set(waiting.values())))
            message = f"every failed transfer of {asked} is in a retry still running ({names}): nothing created"
            return RetryPlan(RetryOutcome(batch_id, None, in_flight=waiting, message=message))
        return RetryPlan(RetryOutcome(batch_id, None, message=f"batch {asked} has no failed transfer: nothing created"))
    number = last + 1
    while tx.flows.get(retry_batch_id(batch_id, number)) is not None:
        if tx.operator.retry(retry_batch_id(batch_id, number)) is not None:
            # A concurrent request made this retry after our history was read: it pays these transfers.
            raise RetryError(409, f"{retry_batch_id(batch_id, number)} was created meanwhile: nothing created")
        number += 1  # a batch stored with that id before intake reserved the suffix: not a retry, skip its number
    retry_id = retry_batch_id(batch_id, number)
    retry_document = _document(document, retry_id, eligible, corrections, number, now)
    prepared = prepare_batch(retry_document, integrations=integrations, limits=limits, retry=True)
    if prepared.reason is not None:
        reason = _named_rows(prepared.reason, transfers, eligible)
        raise RetryError(400, f"the retry batch would be invalid, nothing created: {reason}")
    planned = tuple(
        PlannedTransfer(
            index,
            str(item.get("employee_reference") or ""),
            Decimal(str(item.get("amount"))),
            mask_account(str(item["destination_account"].get("account_number"))),
            index in corrections,
        )
        for index, item in zip(eligible, retry_document["transactions"], strict=True)
    )
    origin = document.get("origin_account") if isinstance(document, Mapping) else None
    currency = str(origin.get("currency") or "") if isinstance(origin, Mapping) else ""
    message = f"created {retry_id} with {len(eligible)} failed transfer(s) of {batch_id}; it needs its own approval"
    outcome = RetryOutcome(batch_id, retry_id, tuple(eligible), tuple(sorted(corrections)), waiting, message)
    return RetryPlan(outcome, number, currency, planned, prepared)


def create(tx: StoreTx, planned: RetryPlan, *, by: str, now: datetime) -> RetryOutcome:
    """Store a planned retry in `tx` (the retry record and its batch); its outcome (nothing when none planned)."""
    outcome = planned.outcome
    if outcome.retry_batch_id is None or planned.prepared is None:
        return outcome
    retry_id = outcome.retry_batch_id
    indexes = list(outcome.transfer_indexes)
    tx.operator.record_retry(retry_id, outcome.original_batch_id, planned.number, indexes, by=by, now=now)
    stored = store_batch(tx, planned.prepared, now=now)
    if not stored.created:
        raise RetryError(409, f"a batch {retry_id} exists already (not made by retry-failed): nothing created")
    return outcome


async def preview(
    store: Store,
    batch_id: str,
    corrections: Mapping[int, Correction] | None = None,
    *,
    now: datetime,
    integrations: Collection[str] | None = None,
    limits: ValidationLimits = DEFAULT_LIMITS,
) -> RetryPlan:
    """What a retry would create now (nothing is written); `RetryError` when it would be refused."""
    fixes = dict(corrections or {})
    return await store.arun(
        lambda tx: plan(tx, batch_id, fixes, now=now, integrations=integrations, limits=limits), write=False
    )
