"""One `dispersion.transfers` event per transfer outcome, for ledgers (docs/kafka.md, "For ledgers").

When a file flow ends (COMPLETED or FAILED with the bank's per-transfer results; FAILED, REJECTED or EXPIRED before
anything was paid), `end_flow` moves it and appends, in the same transaction as the state change and its status
event, one outbox event per transfer: COMPLETED or FAILED with the bank's reason. A transfer the bank's report
still shows pending gets none. The event id is deterministic (UUIDv5 of batch id, index and outcome), so the same
outcome published twice carries the same id; the Kafka headers are CloudEvents binary-mode attributes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Final, Unpack

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


def transfer_payloads(
    batch_id: str,
    document: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]] | None,
    *,
    ended: str,
    reason: str | None,
    occurred_at: str,
    original_indexes: Sequence[int] = (),
    retry_of: str | None = None,
    from_pain001: bool = False,
) -> list[dict[str, Any]]:
    """The `dispersion.transfers` payloads of a batch that ended `ended` (pure). With the bank's `results`, one per
    transfer the bank settled or rejected; without, every transfer FAILED with the batch's `reason` (COMPLETED when
    the batch completed with a report we could not read). `retry_of`: the original batch of a retry, from its retry
    record. `from_pain001`: the employee reference is the EndToEndId."""
    origin = document.get("origin_account")
    origin = origin if isinstance(origin, Mapping) else {}
    items = document.get("transactions")
    items = items if isinstance(items, list) else []
    by_index = {int(r["index"]): r for r in results or ()}
    payloads: list[dict[str, Any]] = []
    for index, item in enumerate(items):
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
        destination = item.get("destination_account") or {}
        reference = item.get("employee_reference")
        payloads.append(
            {
                "event_id": transfer_event_id(batch_id, index, outcome),
                "batch_id": batch_id,
                "index": index,
                "employee_reference": reference,
                "end_to_end_id": reference if from_pain001 else None,
                "amount": Decimal(str(item.get("amount"))),
                "currency": str(origin.get("currency") or destination.get("currency") or ""),
                "origin_account": str(origin.get("account_number") or ""),
                "destination_account": str(destination.get("account_number") or ""),
                "outcome": outcome,
                "reason_code": code,
                "reason": text,
                "retry_of": retry_of,
                "original_index": original_indexes[index] if index < len(original_indexes) else None,
                "occurred_at": occurred_at,
            }
        )
    return payloads


def end_flow(
    tx: StoreTx,
    flow: Flow,
    target: FlowState,
    *,
    now: datetime,
    event: StatusEvent | None,
    owner: str | None = None,
    release_lease: bool = False,
    **changes: Unpack[FlowFields],
) -> Flow:
    """`tx.flows.transition` to a final state (no next action unless `changes` name one), with one
    `dispersion.transfers` event per transfer outcome appended in the same transaction (none when the move
    publishes no status event)."""
    changes.setdefault("next_action_at", None)
    updated = tx.flows.transition(
        flow, target, now=now, owner=owner, event=event, release_lease=release_lease, **changes
    )
    if event is None or target not in _ENDS:
        return updated
    document = tx.flows.payload_document(flow.batch_id)
    if not isinstance(document, Mapping):
        return updated
    retry = tx.operator.retry(flow.batch_id)
    original = tx.flows.payload_document(retry.original_batch_id) if retry is not None else document
    source = str(original.get("source") or "") if isinstance(original, Mapping) else ""
    results = event.payload.get("transaction_results")
    occurred_at = str(event.payload.get("occurred_at") or iso_ms(now))
    payloads = transfer_payloads(
        flow.batch_id,
        document,
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
