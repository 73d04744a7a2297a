"""One `dispersion.transfers` event per transfer outcome, for ledgers (docs/kafka.md, "For ledgers").

When a file flow ends (COMPLETED or FAILED with the bank's per-transfer results; FAILED, REJECTED or EXPIRED before
anything was paid), `end_flow` moves it and appends, in the same transaction as the state change and its status
event, one outbox event per transfer: COMPLETED or FAILED with the bank's reason. A transfer the bank's report
still shows pending gets none. The event id is deterministic (UUIDv5 of batch id, index and outcome), so the same
outcome published twice carries the same id; the Kafka headers are CloudEvents binary-mode attributes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Final, Unpack

from processor.domain.batch import PayrollBatch
from processor.domain.file_states import FlowState
from processor.domain.outcomes import split_reason
from processor.domain.time import iso_ms
from processor.store import Flow, NewEvent, StatusEvent, StoreTx
from processor.store.flows import FlowFields
from schemas.topics import TRANSFERS_TOPIC

EVENT_NAMESPACE: Final = uuid.UUID("6f0c7d1e-2b8a-5c43-9e61-0d2f3a4b5c6d")
CE_SOURCE: Final = "/dispersion/processor"
CE_TYPES: Final = {"COMPLETED": "dispersion.transfer.completed", "FAILED": "dispersion.transfer.failed"}
CONTENT_TYPE: Final = "application/avro"
_ENDS: Final = (FlowState.COMPLETED, FlowState.FAILED, FlowState.REJECTED, FlowState.EXPIRED)


def transfer_event_id(batch_id: str, index: int, outcome: str) -> str:
    """The deterministic id of one transfer's outcome."""
    return str(uuid.uuid5(EVENT_NAMESPACE, f"{batch_id}\x1f{index}\x1f{outcome}"))


def cloud_event_headers(event_id: str, outcome: str, batch_id: str, index: int, occurred_at: str) -> dict[str, str]:
    """CloudEvents 1.0 binary-mode Kafka headers (`ce_*`, and `content-type` for the data)."""
    return {
        "ce_id": event_id,
        "ce_source": CE_SOURCE,
        "ce_type": CE_TYPES[outcome],
        "ce_specversion": "1.0",
        "ce_time": occurred_at,
        "ce_subject": f"{batch_id}/{index}",
        "content-type": CONTENT_TYPE,
    }


# employee reference, amount (Decimal, or as the document has it), destination currency, destination account
_Row = tuple[Any, Any, str, str]


@dataclass(frozen=True, slots=True)
class Transfers:
    """A batch's transfers as its events read them: what every event shares, and one row per transfer."""

    batch_id: str
    currency: str  # the origin account's ("" when it has none: each transfer's own)
    origin_account: str
    rows: Iterable[_Row]


def document_transfers(batch_id: str, document: Mapping[str, Any]) -> Transfers:
    """The transfers of a stored batch document (a dict per transfer, read one at a time)."""
    origin = document.get("origin_account")
    origin = origin if isinstance(origin, Mapping) else {}
    items = document.get("transactions")
    rows = (_document_row(item) for item in (items if isinstance(items, list) else []))
    return Transfers(batch_id, str(origin.get("currency") or ""), str(origin.get("account_number") or ""), rows)


def batch_transfers(batch: PayrollBatch) -> Transfers:
    """The transfers of a parsed batch: the same rows as its stored document gives, without a dict per transfer."""
    rows = ((t.employee_reference, t.amount, t.currency, t.account_number) for t in batch.transactions)
    return Transfers(batch.batch_id, batch.origin.currency, batch.origin.number, rows)


def _document_row(item: Any) -> _Row:
    destination = item.get("destination_account") or {}
    return (
        item.get("employee_reference"),
        item.get("amount"),
        str(destination.get("currency") or ""),
        str(destination.get("account_number") or ""),
    )


def transfer_payloads(
    transfers: Transfers,
    results: Sequence[Mapping[str, Any]] | None,
    *,
    ended: str,
    reason: str | None,
    occurred_at: str,
    original_indexes: Sequence[int] = (),
    retry_of: str | None = None,
    from_pain001: bool = False,
) -> Iterator[dict[str, Any]]:
    """The `dispersion.transfers` payloads of a batch that ended `ended` (pure), one per transfer with an outcome,
    built as they are read (a 100,000-transfer batch's payloads never all exist at once: the outbox takes them 1000
    at a time). With the bank's `results`, one per transfer the bank settled or rejected; without, every transfer
    FAILED with the batch's `reason` (COMPLETED when the batch completed with a report we could not read).
    `retry_of`: the original batch of a retry, from its retry record. `from_pain001`: the employee reference is the
    EndToEndId."""
    by_index = {int(r["index"]): r for r in results or ()}
    for index, (reference, amount, currency, destination) in enumerate(transfers.rows):
        if results is not None:
            result = by_index.get(index)
            if result is None or result.get("status") not in ("COMPLETED", "FAILED"):
                continue
            outcome, why = str(result["status"]), result.get("reason")
        elif ended == FlowState.COMPLETED:
            outcome, why = "COMPLETED", None
        else:
            outcome, why = "FAILED", reason or f"the batch ended {ended}"
        code, text = split_reason(why) if outcome == "FAILED" else (None, None)
        yield {
            "event_id": transfer_event_id(transfers.batch_id, index, outcome),
            "batch_id": transfers.batch_id,
            "index": index,
            "employee_reference": reference,
            "end_to_end_id": reference if from_pain001 else None,
            "amount": amount if type(amount) is Decimal else Decimal(str(amount)),
            "currency": transfers.currency or currency,
            "origin_account": transfers.origin_account,
            "destination_account": destination,
            "outcome": outcome,
            "reason_code": code,
            "reason": text,
            "retry_of": retry_of,
            "original_index": original_indexes[index] if index < len(original_indexes) else None,
            "occurred_at": occurred_at,
        }


def end_flow(
    tx: StoreTx,
    flow: Flow,
    target: FlowState,
    *,
    now: datetime,
    event: StatusEvent | None,
    owner: str | None = None,
    release_lease: bool = False,
    batch: PayrollBatch | None = None,
    **changes: Unpack[FlowFields],
) -> Flow:
    """`tx.flows.transition` to a final state (no next action unless `changes` name one), with one
    `dispersion.transfers` event per transfer outcome appended in the same transaction (none when the move
    publishes no status event). `batch`: the flow's batch as the caller parsed it from the store, so the stored
    text is not read and parsed again (a 100,000-transfer batch is 24 MB of text and about 90 MiB as dicts)."""
    changes.setdefault("next_action_at", None)
    updated = tx.flows.transition(
        flow, target, now=now, owner=owner, event=event, release_lease=release_lease, **changes
    )
    if event is None or target not in _ENDS:
        return updated
    if batch is not None:
        transfers, source = batch_transfers(batch), batch.source
    else:
        document = tx.flows.payload_document(flow.batch_id)
        if not isinstance(document, Mapping):
            return updated
        transfers, source = document_transfers(flow.batch_id, document), str(document.get("source") or "")
    retry = tx.operator.retry(flow.batch_id)
    if retry is not None:
        original = tx.flows.payload_document(retry.original_batch_id)
        source = str(original.get("source") or "") if isinstance(original, Mapping) else ""
        del original
    results = event.payload.get("transaction_results")
    occurred_at = str(event.payload.get("occurred_at") or iso_ms(now))
    payloads = transfer_payloads(
        transfers,
        results if isinstance(results, list) else None,
        ended=str(target),
        reason=event.payload.get("reason"),
        occurred_at=occurred_at,
        original_indexes=retry.transfer_indexes if retry is not None else (),
        retry_of=retry.original_batch_id if retry is not None else None,
        from_pain001="pain.001" in source,  # `submit` names the message in the batch's source
    )
    events = (
        NewEvent(
            payload,
            cloud_event_headers(payload["event_id"], payload["outcome"], flow.batch_id, payload["index"], occurred_at),
            payload["event_id"],
        )
        for payload in payloads
    )
    tx.outbox.append_many(TRANSFERS_TOPIC, flow.batch_id, events, now=now)  # one round trip per 1000 events
    return updated
