"""Paying a batch's failed transfers again: a new batch `ID.retry-N` of the failed transfers only (corrected where
the operator gives a new destination account), with `retry_of` set, paid through the normal flow with its own
approval (it is stored RECEIVED like any batch; the worker takes it from there).

Which transfers: those the bank rejected in batch `ID` (every transfer when the whole file failed), minus those
an earlier retry paid, minus those an earlier retry still has in flight (never two payments of one transfer at
once). A transfer that failed again in a finished retry may be retried again. Everything is decided and written
in one transaction; two concurrent requests for the same batch cannot both create retry N (the second fails on
the retry record's key and is told to try again).
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from processor.domain.file_states import FlowState
from processor.domain.outcomes import retry_batch_id, retry_of
from processor.domain.time import iso_ms
from processor.domain.validation import ValidationLimits
from processor.engine.file_events import results_of
from processor.engine.intake import PreparedBatch, prepare_batch, store_batch
from processor.store import StoreTx

SOURCE = "dispersion-retry-failed"
_NOT_ATTEMPTED = (FlowState.REJECTED, FlowState.EXPIRED, FlowState.INVALID)


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
        "retry_of": str(original["batch_id"]),  # kept with the stored batch (the parser ignores it)
    }


@dataclass(frozen=True)
class RetryPlan:
    """A retry decided but not stored yet: which transfers, under which id, as which prepared batch."""

    batch_id: str
    retry_id: str
    number: int
    eligible: tuple[int, ...]
    corrected: tuple[int, ...]
    waiting: Mapping[int, str]
    prepared: PreparedBatch
    document: Mapping[str, Any]  # the original batch (for what a correction replaces)


def plan_retry(
    tx: StoreTx,
    batch_id: str,
    corrections: Mapping[int, Correction],
    *,
    now: datetime,
    integrations: Collection[str] | None,
    limits: ValidationLimits,
) -> RetryPlan | RetryOutcome:
    """The retry of `batch_id`'s failed transfers, decided in `tx` but not stored (a `RetryOutcome` when there is
    nothing to retry); `RetryError` when refused (see the module docstring)."""
    flow = tx.flows.get(batch_id)
    if flow is None:
        raise RetryError(404, f"batch {batch_id} is unknown")
    original_of = retry_of(batch_id)
    if original_of is not None and tx.operator.retry(batch_id) is not None:
        raise RetryError(400, f"{batch_id} is a retry of {original_of}: retry {original_of} (it counts every retry)")
    if not flow.terminal:
        raise RetryError(409, f"batch {batch_id} is {flow.state}, not final: nothing to retry yet")
    document = tx.flows.payload_document(batch_id)
    transfers = document.get("transactions") if isinstance(document, Mapping) else None
    if not isinstance(transfers, list):
        raise RetryError(409, f"batch {batch_id} holds no readable transfers")
    if flow.state in _NOT_ATTEMPTED:
        return RetryOutcome(
            batch_id,
            None,
            message=f"batch {batch_id} ended {flow.state}: nothing was paid or attempted; submit it again instead",
        )
    failed = _failed_indexes(tx, batch_id, flow.state, len(transfers))
    last, paid, in_flight = _retry_history(tx, batch_id)
    for index in corrections:
        if index not in failed:
            raise RetryError(400, f"transfer {index} of batch {batch_id} did not fail: it cannot be corrected")
        if index in paid:
            raise RetryError(400, f"transfer {index} of batch {batch_id} was paid by an earlier retry")
        if index in in_flight:
            raise RetryError(409, f"transfer {index} is being paid by {in_flight[index]}, not final yet")
    eligible = sorted(failed - paid - set(in_flight))
    waiting = {i: in_flight[i] for i in sorted(failed & set(in_flight))}
    if not eligible:
        if waiting:
            names = ", ".join(sorted(set(waiting.values())))
            return RetryOutcome(
                batch_id,
                None,
                in_flight=waiting,
                message=f"every failed transfer of {batch_id} is in a retry still running ({names}): nothing created",
            )
        return RetryOutcome(batch_id, None, message=f"batch {batch_id} has no failed transfer: nothing created")
    number = last + 1
    while tx.flows.get(retry_batch_id(batch_id, number)) is not None:
        number += 1  # a batch stored with that id before intake reserved the suffix: not a retry, skip its number
    retry_id = retry_batch_id(batch_id, number)
    prepared = prepare_batch(
        _document(document, retry_id, eligible, corrections, number, now),
        integrations=integrations,
        limits=limits,
        retry=True,
    )
    if prepared.reason is not None:
        raise RetryError(400, f"the retry batch would be invalid, nothing created: {prepared.reason}")
    return RetryPlan(
        batch_id, retry_id, number, tuple(eligible), tuple(sorted(corrections)), waiting, prepared, document
    )


def create_retry(tx: StoreTx, plan: RetryPlan, *, by: str, now: datetime) -> RetryOutcome:
    """Store a planned retry (the retry record and its batch) in `tx`."""
    tx.operator.record_retry(plan.retry_id, plan.batch_id, plan.number, list(plan.eligible), by=by, now=now)
    stored = store_batch(tx, plan.prepared, now=now)
    if not stored.created:
        raise RetryError(409, f"a batch {plan.retry_id} exists already (not made by retry-failed): nothing created")
    message = (
        f"created {plan.retry_id} with {len(plan.eligible)} failed transfer(s) of {plan.batch_id};"
        " it needs its own approval"
    )
    return RetryOutcome(plan.batch_id, plan.retry_id, plan.eligible, plan.corrected, plan.waiting, message)
