"""Accepting a payroll batch into the engine: parse, validate, store, in one transaction.

- A valid batch becomes a flow in `RECEIVED`, due at once (the worker creates its consent next). A scheduled
  batch (`execute_on`) is checked against its integration's calendar at `now`: a day already past there, or
  further ahead than the integration allows, makes it INVALID (`processor.domain.schedule`).
- An invalid one becomes a flow in `INVALID` with an `INVALID` status event whose `reason` lists the bad rows
  (index and reason each), written in the same transaction; nothing is sent to the bank.
- A batch whose id is already stored changes nothing: the existing flow comes back (`created=False`), whatever
  the duplicate holds (`same_document` tells whether it was the same batch: the same business content,
  `processor.domain.identity`; `requested_at` and `source` do not count, so a resubmitted export is a duplicate,
  not a conflict).
- Input that has no readable `batch_id` cannot be stored; it comes back with `flow=None` and the reason, for the
  caller to dead-letter.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from processor.bank.integration import Integration
from processor.domain.batch import BatchParseError, batch_from_dict, loads_exact
from processor.domain.file_states import BatchStatus, FlowState
from processor.domain.identity import content_sha256, document_content_sha256
from processor.domain.outcomes import batch_id_problem
from processor.domain.payload import build_file_payload
from processor.domain.roles import Controls
from processor.domain.schedule import Calendar
from processor.domain.validation import DEFAULT_LIMITS, ValidationLimits, validated
from processor.domain.validation import InvalidBatchError as _Invalid
from processor.engine.accounts import review_at_intake
from processor.engine.file_events import status_payload
from processor.engine.tracing import continued, current_traceparent
from processor.store import Flow, Store, StoreTx
from processor.store.values import money, sha256_hex
from schemas.topics import STATUS_TOPIC

REASON_LIMIT = 50  # bad rows named in an INVALID event's reason; the rest are counted


@dataclass(frozen=True)
class IntakeResult:
    """What became of one submitted batch."""

    flow: Flow | None
    created: bool
    status: str  # the flow's state after intake (RECEIVED, INVALID, or the existing flow's state)
    reason: str | None = None
    same_document: bool = True
    review: str | None = None  # PENDING: held for a changed-account review; FLAGGED: changed accounts marked

    @property
    def invalid(self) -> bool:
        """The batch was refused (stored as INVALID, or not storable at all)."""
        return self.flow is None or (self.created and self.status == FlowState.INVALID)


def _document(raw: str | bytes | Mapping[str, Any]) -> tuple[Any, str | None]:
    """The parsed input and, when it is not JSON at all, why."""
    if isinstance(raw, Mapping):
        return raw, None
    try:
        return loads_exact(raw), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"not valid JSON: {exc}"


def _json_default(value: object) -> object:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, date):  # execute_on, as the Avro reader gives it
        return value.isoformat()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _as_text(raw: str | bytes | Mapping[str, Any]) -> str:
    """The batch as JSON text to store (kept verbatim when it came as text)."""
    if isinstance(raw, bytes):
        return raw.decode("utf-8")
    if isinstance(raw, str):
        return raw
    return json.dumps(raw, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def readable_batch_id(document: Any) -> str | None:
    """The `batch_id` of a document if it is a non-empty string of sane length, else None."""
    if isinstance(document, Mapping):
        value = document.get("batch_id")
        if isinstance(value, str) and value.strip() and len(value) <= 200:
            return value
    return None


@dataclass(frozen=True)
class PreparedBatch:
    """A batch checked outside any transaction (pure): what `store_batch` will insert."""

    batch_id: str | None
    integration: str
    text: str
    reason: str | None  # None: valid
    file_reference: str | None = None
    file_hash: str | None = None
    number_of_transactions: int | None = None
    control_sum: Decimal | None = None
    content_sha256: str | None = None  # the business-content hash (None: not even a batch id)
    execute_on: date | None = None


def prepare_batch(
    raw: str | bytes | Mapping[str, Any],
    *,
    integrations: Collection[str] | None = None,
    limits: ValidationLimits = DEFAULT_LIMITS,
    now: datetime | None = None,
    calendars: Mapping[str, Calendar] | None = None,
    retry: bool = False,
) -> PreparedBatch:
    """Parse and validate a batch and compute its file metadata; every bad row is named in `reason`. With `now`,
    an `execute_on` is checked against the integration's calendar (`calendars`; UTC when it has none). A batch id
    that is unfit (control or bidi characters, the reserved `.retry-N` suffix unless `retry`) is not storable:
    it comes back without an id, for the caller to refuse or dead-letter, so it can never block a real retry."""
    document, not_json = _document(raw)
    batch_id = readable_batch_id(document)
    if batch_id is None:
        return PreparedBatch(None, "", "", not_json or "batch_id is missing or not a non-empty string")
    unfit = batch_id_problem(batch_id, retry=retry)
    if unfit is not None:
        return PreparedBatch(None, "", "", unfit)
    text = _as_text(raw)
    if not_json is not None:
        return PreparedBatch(batch_id, "", text, not_json, content_sha256=sha256_hex(text))
    try:
        batch = batch_from_dict(document)
    except BatchParseError as exc:
        reason = "; ".join(str(p) for p in exc.problems[:REASON_LIMIT])
        if len(exc.problems) > REASON_LIMIT:
            reason += f"; and {len(exc.problems) - REASON_LIMIT} more problems"
        return PreparedBatch(
            batch_id, _integration_of(document), text, reason, content_sha256=document_content_sha256(document)
        )
    identity = content_sha256(batch)
    problems: list[str] = []
    if integrations is not None and batch.integration not in integrations:
        known = ", ".join(sorted(integrations)) or "none"
        problems.append(f"integration {batch.integration!r} is not configured (configured: {known})")
    if now is not None:
        late = (calendars or {}).get(batch.integration, Calendar()).problem(batch.execute_on, now)
        if late is not None:
            problems.append(late)
    try:
        payload = build_file_payload(validated(batch, limits))
    except _Invalid as exc:
        problems.append(exc.report.summary(limit=REASON_LIMIT))
        return PreparedBatch(batch_id, batch.integration, text, "; ".join(problems), content_sha256=identity)
    try:
        money(payload.control_sum)
    except ValueError as exc:
        problems.append(f"control sum cannot be stored: {exc}")
    return PreparedBatch(
        batch_id,
        batch.integration,
        text,
        "; ".join(problems) or None,
        batch.file_reference,
        payload.file_hash,
        int(payload.number_of_transactions),
        payload.control_sum,
        identity,
        batch.execute_on,
    )


def store_batch(
    tx: StoreTx,
    prepared: PreparedBatch,
    *,
    now: datetime,
    traceparent: str | None = None,
    controls: Controls | None = None,
) -> IntakeResult:
    """Insert a prepared batch (RECEIVED, or INVALID with its event) unless its id exists; `traceparent` (W3C
    text) is kept with the flow, so its steps continue the batch's trace. With `controls`, a new batch's
    destination accounts are compared with where its employees were last paid (`processor.engine.accounts`)."""
    if prepared.batch_id is None:
        return IntakeResult(None, False, FlowState.INVALID, prepared.reason)
    if prepared.reason is not None:
        created = tx.flows.create(
            prepared.batch_id,
            prepared.integration,
            prepared.text,
            now=now,
            state=FlowState.INVALID,
            payload_checked=True,  # the batch id was read from it: it parsed
            content_sha256=prepared.content_sha256,
            traceparent=traceparent,
        )
        flow = created.row
        if not created.created:
            return IntakeResult(flow, False, flow.state, None, created.same_document)
        payload = status_payload(flow, BatchStatus.INVALID, now, reason=prepared.reason)
        tx.outbox.append_status(STATUS_TOPIC, prepared.batch_id, BatchStatus.INVALID.value, payload, now=now)
        return IntakeResult(flow, True, FlowState.INVALID, prepared.reason)
    created = tx.flows.create(
        prepared.batch_id,
        prepared.integration,
        prepared.text,
        now=now,
        file_reference=prepared.file_reference,
        file_hash=prepared.file_hash,
        number_of_transactions=prepared.number_of_transactions,
        control_sum=prepared.control_sum,
        next_action_at=now,
        payload_checked=True,
        content_sha256=prepared.content_sha256,
        traceparent=traceparent,
        execute_on=prepared.execute_on,
    )
    flow = created.row
    review = None
    if created.created and controls is not None:
        review = review_at_intake(tx, flow, prepared.text, controls, now=now)
    return IntakeResult(flow, created.created, flow.state, None, created.same_document, review)


def calendars_of(integrations: Mapping[str, Integration]) -> dict[str, Calendar]:
    """Each configured integration's calendar (time zone, how far ahead a batch may be scheduled)."""
    return {name: integration.calendar for name, integration in integrations.items()}


def _integration_of(document: Any) -> str:
    if isinstance(document, Mapping):
        value = document.get("integration")
        if isinstance(value, str) and value:
            return value[:200]
    return ""


async def accept_batch(
    store: Store,
    raw: str | bytes | Mapping[str, Any],
    *,
    now: datetime,
    integrations: Collection[str] | None = None,
    limits: ValidationLimits = DEFAULT_LIMITS,
    traceparent: str | None = None,
    calendars: Mapping[str, Calendar] | None = None,
    controls: Controls | None = None,
) -> IntakeResult:
    """Parse, validate and store one batch (see the module docstring). `integrations`: the configured names;
    a batch naming another is INVALID. `calendars`: each integration's calendar, for a scheduled batch (UTC
    when absent). `controls`: the changed-account review (none without). Checking runs before the transaction
    (in a thread), so a big batch holds no lock while it is validated; a batch id already stored is answered
    without validating again.

    The intake is a span (`intake batch`) continuing `traceparent` (the W3C text the batch came with), or the
    current span (the consumer's) without it; its context is stored with the flow."""
    parent = traceparent if traceparent is not None else current_traceparent()
    with continued("intake batch", parent) as span:
        result = await _accept(
            store, raw, now=now, integrations=integrations, limits=limits, calendars=calendars, controls=controls
        )
        if result.flow is not None:
            span.set_attribute("dispersion.batch_id", result.flow.batch_id)
        span.set_attribute("dispersion.intake", "created" if result.created else "known")
        return result


async def _accept(
    store: Store,
    raw: str | bytes | Mapping[str, Any],
    *,
    now: datetime,
    integrations: Collection[str] | None,
    limits: ValidationLimits,
    calendars: Mapping[str, Calendar] | None,
    controls: Controls | None,
) -> IntakeResult:
    document, _ = _document(raw)
    batch_id = readable_batch_id(document)
    if batch_id is not None:
        existing = await store.arun(lambda tx: tx.flows.get(batch_id), write=False)
        if existing is not None:
            same = existing.payload_sha256 in (document_content_sha256(document), sha256_hex(_as_text(raw)))
            return IntakeResult(existing, False, existing.state, None, same)
    prepared = await asyncio.to_thread(
        prepare_batch, raw, integrations=integrations, limits=limits, now=now, calendars=calendars
    )
    traceparent = current_traceparent()
    return await store.arun(lambda tx: store_batch(tx, prepared, now=now, traceparent=traceparent, controls=controls))
