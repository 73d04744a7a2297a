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
- A batch id whose flow ended withdrawn, REJECTED, EXPIRED, INVALID or FAILED before anything was paid takes a
  new submission (its `requested_at` after the flow ended, or any replay of a dead letter) as a new attempt
  (`processor.store.lifecycle`): the same row, attempt + 1, its statuses starting over. A replay of a batch
  refused INVALID is validated again against today's configuration (replay re-decides); still invalid, it stays
  the refused attempt.
- A valid new batch (or attempt) whose transfers match those of another batch of its integration received within
  the duplicate window is held before any bank call (`processor.domain.duplicates`): stored with `duplicate_of`,
  not due, and published as AUTHORIZATION_REQUIRED with its approval link, `duplicate_of` and the figures in
  `reason`; the link and the worker wait until a person confirms it (processor.engine.withdrawal).
- Input that has no readable `batch_id` cannot be stored; it comes back with `flow=None` and the reason, for the
  caller to dead-letter.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from processor.bank.integration import Integration
from processor.domain.batch import BatchParseError, PayrollBatch, batch_from_dict, batch_from_json, loads_exact
from processor.domain.duplicates import (
    ALLOWED_BY,
    DEFAULT_THRESHOLD,
    DEFAULT_WINDOW_DAYS,
    Candidate,
    batch_keys,
    best_match,
    sketch,
)
from processor.domain.file_states import RESUBMITTABLE_STATES, BatchStatus, FlowState
from processor.domain.identity import content_sha256, document_content_sha256
from processor.domain.kinds import Kind
from processor.domain.outcomes import batch_id_problem
from processor.domain.payload import file_facts
from processor.domain.roles import Controls
from processor.domain.schedule import Calendar
from processor.domain.validation import DEFAULT_LIMITS, ValidationLimits, validated
from processor.domain.validation import InvalidBatchError as _Invalid
from processor.engine.accounts import review_at_intake
from processor.engine.authorization import approval_link
from processor.engine.file_events import status_payload
from processor.engine.tracing import continued, current_traceparent
from processor.store import Flow, Store, StoreTx
from processor.store.lifecycle import NewContent
from processor.store.values import money, sha256_hex
from schemas.topics import STATUS_TOPIC

REASON_LIMIT = 50  # bad rows named in an INVALID event's reason; the rest are counted


class DocumentReleasedError(RuntimeError):
    """The document of a `Handed` was asked for after the intake let go of it."""


class Handed:
    """A batch document handed over to the intake, which lets go of a new batch's document once it is written as
    the text to store, and parses the batch from that text: a 100,000-transfer Avro record (about 90 MiB of dicts)
    is then neither held through its INSERT nor kept in memory by the batch. The caller keeps no reference of its
    own; `document` is there until `drop`."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self._document: Mapping[str, Any] | None = document

    @property
    def document(self) -> Mapping[str, Any]:
        """The document; `DocumentReleasedError` once dropped (the intake stored it as a new batch)."""
        if self._document is None:
            raise DocumentReleasedError("the intake let go of this document once it was stored as a new batch")
        return self._document

    def drop(self) -> None:
        """Let go of the document."""
        self._document = None


Raw = str | bytes | Mapping[str, Any]
"""A batch as it came: JSON text or bytes, or a decoded record."""


@dataclass(frozen=True)
class IntakeResult:
    """What became of one submitted batch."""

    flow: Flow | None
    created: bool
    status: str  # the flow's state after intake (RECEIVED, INVALID, or the existing flow's state)
    reason: str | None = None
    same_document: bool = True
    review: str | None = None  # PENDING: held for a changed-account review; FLAGGED: changed accounts marked
    restarted: bool = False  # a new attempt of an ended batch id
    held: str | None = None  # held as a possible duplicate payroll: the figures

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
    """The batch as JSON text to store (kept verbatim when it came as text; a decoded record written in ASCII)."""
    if isinstance(raw, bytes):
        return raw.decode("utf-8")
    if isinstance(raw, str):
        return raw
    # ASCII (a name's "ó" as \u00f3): the database driver then sends a copy of the text's own bytes, where a text
    # holding one character past ASCII is first encoded to UTF-8 at twice its size (for 100,000 transfers a
    # 69 MiB transient against 25: docs/benchmarks.md, "Fourth pass").
    return _RECORD_TEXT.encode(raw)


_RECORD_TEXT = json.JSONEncoder(default=_json_default, ensure_ascii=True, separators=(",", ":"))


def _handed_text(document: Mapping[str, Any]) -> str:
    """`_as_text` of a record handed over, letting go of each transfer once it is written: whole, the text (and
    the encoder's pieces of it, 49 MiB for 100,000 transfers) was built beside the whole record (92 MiB); this way
    the record shrinks as the text grows. The same text, a transfer at a time; the record's list of transfers is
    emptied (the document is the intake's to drop)."""
    rows = document.get("transactions")
    if not isinstance(document, dict) or not isinstance(rows, list) or not all(type(key) is str for key in document):
        return _as_text(document)  # not a decoded record's shape: written whole, and nothing of it let go of
    pieces: list[str] = []  # joined once: each join or concatenation of the whole would be another copy of it
    for key, value in document.items():
        pieces += ("," if pieces else "{", _RECORD_TEXT.encode(key), ":")
        if value is not rows:
            pieces.append(_RECORD_TEXT.encode(value))
            continue
        pieces.append("[")
        for index, row in enumerate(rows):
            pieces += ("," if index else "", _RECORD_TEXT.encode(row))
            rows[index] = None  # the list keeps its length until it is cleared: each transfer goes now
        rows.clear()
        pieces.append("]")
    pieces.append("}")
    return "".join(pieces)


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
    batch: PayrollBatch | None = None  # the parsed batch, when it parsed
    keys: tuple[str, ...] = ()  # each transfer's duplicate-guard key (valid batches)


def prepare_batch(
    raw: str | bytes | Mapping[str, Any] | Handed,
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
    it comes back without an id, for the caller to refuse or dead-letter, so it can never block a real retry.

    A decoded record `Handed` over is let go of once written as text, and the batch is parsed from that text (the
    form every later step reads): built from the record, the batch would share the record's strings and amounts,
    and the memory of the record's 100,000 dicts would stay with it (121 against 73 MiB for 100,000 transfers,
    docs/benchmarks.md "Fourth pass")."""
    handed = raw if isinstance(raw, Handed) else None
    given = raw.document if isinstance(raw, Handed) else raw
    del raw
    document, not_json = _document(given)
    batch_id = readable_batch_id(document)
    if batch_id is None:
        return PreparedBatch(None, "", "", not_json or "batch_id is missing or not a non-empty string")
    unfit = batch_id_problem(batch_id, retry=retry)
    if unfit is not None:
        return PreparedBatch(None, "", "", unfit)
    text = _handed_text(given) if handed is not None and isinstance(given, Mapping) else _as_text(given)
    if not_json is not None:
        return PreparedBatch(batch_id, "", text, not_json, content_sha256=sha256_hex(text))
    if handed is not None:
        del given, document
        handed.drop()
        document = None
    try:
        batch = batch_from_dict(document) if document is not None else batch_from_json(text)
    except BatchParseError as exc:
        return _unreadable(batch_id, text, loads_exact(text) if document is None else document, exc)
    identity = content_sha256(batch)
    problems: list[str] = []
    keys = tuple(batch_keys(batch))
    if integrations is not None and batch.integration not in integrations:
        known = ", ".join(sorted(integrations)) or "none"
        problems.append(f"integration {batch.integration!r} is not configured (configured: {known})")
    if now is not None:
        late = (calendars or {}).get(batch.integration, Calendar()).problem(batch.execute_on, now)
        if late is not None:
            problems.append(late)
    try:
        # The file's hash, count and sum, hashed slice by slice: the file itself is built by A1 and A2.
        payload = file_facts(validated(batch, limits))
    except _Invalid as exc:
        problems.append(exc.report.summary(limit=REASON_LIMIT))
        return PreparedBatch(
            batch_id, batch.integration, text, "; ".join(problems), content_sha256=identity, batch=batch
        )
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
        payload.number_of_transactions,
        payload.control_sum,
        identity,
        batch.execute_on,
        batch,
        keys,
    )


def _unreadable(batch_id: str, text: str, document: Any, exc: BatchParseError) -> PreparedBatch:
    """An INVALID batch that is no readable batch: its problems, and the hash of the document it was read from."""
    reason = "; ".join(str(p) for p in exc.problems[:REASON_LIMIT])
    if len(exc.problems) > REASON_LIMIT:
        reason += f"; and {len(exc.problems) - REASON_LIMIT} more problems"
    return PreparedBatch(
        batch_id, _integration_of(document), text, reason, content_sha256=document_content_sha256(document)
    )


@dataclass(frozen=True)
class Guard:
    """The duplicate-payroll guard's settings (`[engine] duplicate_window_days`, `duplicate_overlap`) and where
    approval links point (`public_url`), for the hold's event."""

    window: timedelta = timedelta(days=DEFAULT_WINDOW_DAYS)
    threshold: Decimal = DEFAULT_THRESHOLD
    public_url: str | None = None
    allowed: tuple[str, str] | None = None  # (batch id, recorded as): `submit --allow-duplicate-of`, one message

    def allowing(self, batch_id: str | None, by: str = ALLOWED_BY) -> Guard:
        """The guard for one submission that says it pays what `batch_id` pays on purpose."""
        return replace(self, allowed=None if batch_id is None else (batch_id, by))

    @property
    def on(self) -> bool:
        """A zero window switches the guard off."""
        return self.window > timedelta(0)


def _allow(tx: StoreTx, flow: Flow, hold: tuple[str, str] | None, guard: Guard | None, now: datetime) -> Flow:
    """A match the submission allowed up front (`--allow-duplicate-of` that batch) is confirmed at once."""
    if hold is None or guard is None or guard.allowed is None or guard.allowed[0] != hold[0]:
        return flow
    return tx.lifecycle.confirm_duplicate(flow, by=guard.allowed[1], now=now)


def _held(hold: tuple[str, str] | None, guard: Guard | None) -> bool:
    return hold is not None and (guard is None or guard.allowed is None or guard.allowed[0] != hold[0])


def _hold(tx: StoreTx, prepared: PreparedBatch, guard: Guard | None, now: datetime) -> tuple[str, str] | None:
    """(batch it duplicates, the figures) when a valid batch pays what a recent batch pays (`duplicates`)."""
    if guard is None or not guard.on or prepared.batch is None or prepared.batch_id is None:
        return None
    found = tx.lifecycle.candidates(
        prepared.integration, sketch(prepared.keys), since=now - guard.window, exclude=prepared.batch_id
    )
    # Of equal matches, the batch the submission allowed (`--allow-duplicate-of`) counts, then the earliest received:
    # a payroll copied twice before is allowed as a copy of the batch named, whichever copy the store lists first.
    allowed = guard.allowed[0] if guard.allowed is not None else None
    candidates = sorted((Candidate(*row) for row in found), key=lambda c: (c.batch_id != allowed, c.received_at))
    match = best_match(prepared.batch, prepared.keys, candidates, threshold=guard.threshold)
    if match is None:
        return None
    return match.batch_id, match.note(prepared.batch.origin.currency)


def _hold_event(tx: StoreTx, flow: Flow, prepared: PreparedBatch, guard: Guard | None, now: datetime) -> None:
    """A held batch's AUTHORIZATION_REQUIRED: its approval link (which waits for the confirmation), whom it
    duplicates and the figures; reaching the bank's approval later publishes nothing more (file_flow)."""
    assert prepared.batch is not None
    link = None
    if guard is not None and guard.public_url is not None:
        link = approval_link(guard.public_url, Kind.FILE, flow.batch_id, flow.approval_token)
    reason = f"held: {flow.duplicate_note}; confirm it with `dispersion confirm-duplicate --batch {flow.batch_id}`"
    payload = status_payload(
        flow,
        BatchStatus.AUTHORIZATION_REQUIRED,
        now,
        currency=prepared.batch.origin.currency,
        authorization_url=link,
        reason=reason,
    )
    tx.outbox.append_status(STATUS_TOPIC, flow.batch_id, BatchStatus.AUTHORIZATION_REQUIRED.value, payload, now=now)


def _invalid_event(tx: StoreTx, flow: Flow, reason: str, now: datetime) -> None:
    payload = status_payload(flow, BatchStatus.INVALID, now, reason=reason)
    tx.outbox.append_status(STATUS_TOPIC, flow.batch_id, BatchStatus.INVALID.value, payload, now=now)


def store_batch(
    tx: StoreTx,
    prepared: PreparedBatch,
    *,
    now: datetime,
    traceparent: str | None = None,
    guard: Guard | None = None,
    controls: Controls | None = None,
) -> IntakeResult:
    """Insert a prepared batch (RECEIVED, held, or INVALID with its event) unless its id exists; `traceparent`
    (W3C text) is kept with the flow, so its steps continue the batch's trace. `guard`: the duplicate-payroll
    guard. With `controls`, a new batch's destination accounts are compared with where its employees were last
    paid (`processor.engine.accounts`)."""
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
        _invalid_event(tx, flow, prepared.reason, now)
        return IntakeResult(flow, True, FlowState.INVALID, prepared.reason)
    hold = _hold(tx, prepared, guard, now)
    created = tx.flows.create(
        prepared.batch_id,
        prepared.integration,
        prepared.text,
        now=now,
        file_reference=prepared.file_reference,
        file_hash=prepared.file_hash,
        number_of_transactions=prepared.number_of_transactions,
        control_sum=prepared.control_sum,
        next_action_at=None if hold else now,  # a held batch waits for the confirmation
        payload_checked=True,
        content_sha256=prepared.content_sha256,
        traceparent=traceparent,
        execute_on=prepared.execute_on,
        transfer_keys=" ".join(sorted(prepared.keys)),
        duplicate_of=hold[0] if hold else None,
        duplicate_note=hold[1] if hold else None,
    )
    flow = created.row
    if not created.created:
        return IntakeResult(flow, False, flow.state, None, created.same_document)
    tx.lifecycle.keep_sketch(flow.batch_id, flow.integration, sketch(prepared.keys), now=now)
    flow = _allow(tx, flow, hold, guard, now)
    review = None
    if controls is not None and prepared.batch is not None:  # the changed-account review may hold it too
        review = review_at_intake(tx, flow, prepared.batch, controls, now=now)
        flow = tx.flows.require(flow.batch_id)
    if _held(hold, guard):
        _hold_event(tx, flow, prepared, guard, now)
        return IntakeResult(flow, True, flow.state, None, True, review, held=flow.duplicate_note)
    return IntakeResult(flow, True, flow.state, None, True, review)


def restart_batch(
    tx: StoreTx,
    prepared: PreparedBatch,
    seen: Flow,
    *,
    now: datetime,
    traceparent: str | None = None,
    guard: Guard | None = None,
) -> IntakeResult:
    """A new attempt of the ended batch `seen` (read before validating), unless it changed or may not take one:
    then the submission is judged against the stored flow as any repeated batch id is."""
    flow = tx.flows.get(seen.batch_id, for_update=True)
    assert flow is not None and prepared.batch_id == flow.batch_id
    same = flow.payload_sha256 == prepared.content_sha256
    if flow.version != seen.version or not tx.lifecycle.resubmittable(flow):
        return IntakeResult(flow, False, flow.state, None, same)
    hold = None if prepared.reason is not None else _hold(tx, prepared, guard, now)
    content = NewContent(
        integration=prepared.integration,
        text=prepared.text,
        content_sha256=prepared.content_sha256 or sha256_hex(prepared.text),
        state=FlowState.INVALID if prepared.reason is not None else FlowState.RECEIVED,
        file_reference=prepared.file_reference,
        file_hash=prepared.file_hash,
        number_of_transactions=prepared.number_of_transactions,
        control_sum=prepared.control_sum,
        execute_on=prepared.execute_on,
        traceparent=traceparent,
        transfer_keys=" ".join(sorted(prepared.keys)) if prepared.reason is None else None,
        duplicate_of=hold[0] if hold else None,
        duplicate_note=hold[1] if hold else None,
    )
    renewed = tx.lifecycle.restart(flow, content, status_topic=STATUS_TOPIC, now=now)
    if prepared.reason is not None:
        _invalid_event(tx, renewed, prepared.reason, now)
        return IntakeResult(renewed, True, renewed.state, prepared.reason, True, restarted=True)
    tx.lifecycle.keep_sketch(renewed.batch_id, renewed.integration, sketch(prepared.keys), now=now)
    renewed = _allow(tx, renewed, hold, guard, now)
    if _held(hold, guard):
        _hold_event(tx, renewed, prepared, guard, now)
        return IntakeResult(renewed, True, renewed.state, None, True, restarted=True, held=renewed.duplicate_note)
    return IntakeResult(renewed, True, renewed.state, None, True, restarted=True)


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
    raw: Raw | Handed,
    *,
    now: datetime,
    integrations: Collection[str] | None = None,
    limits: ValidationLimits = DEFAULT_LIMITS,
    traceparent: str | None = None,
    calendars: Mapping[str, Calendar] | None = None,
    guard: Guard | None = None,
    replayed: bool = False,
    controls: Controls | None = None,
) -> IntakeResult:
    """Parse, validate and store one batch (see the module docstring); `raw` may be `Handed` over, to be let go of
    once a new batch is written as text. `integrations`: the configured names;
    a batch naming another is INVALID. `calendars`: each integration's calendar, for a scheduled batch (UTC
    when absent). `guard`: the duplicate-payroll guard (None: off). `replayed`: the message is a replay of a dead
    letter (a refused batch id is decided again). `controls`: the changed-account review (none without).
    Checking runs before the transaction (in a thread), so a big batch holds no lock while it is validated; a
    batch id already stored is answered without validating again, unless it may take a new attempt.

    The intake is a span (`intake batch`) continuing `traceparent` (the W3C text the batch came with), or the
    current span (the consumer's) without it; its context is stored with the flow."""
    parent = traceparent if traceparent is not None else current_traceparent()
    with continued("intake batch", parent) as span:
        checks = _Checks(integrations, limits, calendars, guard, controls)
        result = await _accept(store, raw, now=now, checks=checks, replayed=replayed)
        if result.flow is not None:
            span.set_attribute("dispersion.batch_id", result.flow.batch_id)
        span.set_attribute("dispersion.intake", "created" if result.created else "known")
        return result


@dataclass(frozen=True)
class _Checks:
    integrations: Collection[str] | None
    limits: ValidationLimits
    calendars: Mapping[str, Calendar] | None
    guard: Guard | None
    controls: Controls | None = None

    def prepare(self, raw: Raw | Handed, now: datetime) -> PreparedBatch:
        # A Handed, not its document: the executor's work item keeps its arguments until its thread comes back to
        # it, which may be after the store's transaction began; the Handed lets go of the document inside.
        return prepare_batch(raw, integrations=self.integrations, limits=self.limits, now=now, calendars=self.calendars)


def requested_at(document: Any) -> datetime | None:
    """The document's `requested_at` (an Avro instant, or ISO 8601 text), None when unreadable."""
    value = document.get("requested_at") if isinstance(document, Mapping) else None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    return None


def _same_document(existing: Flow, raw: Raw, document: Any) -> bool:
    """Whether a submission for a stored batch id is the batch stored: its business content, or its text, hashes
    as the stored one; for a decoded record that is no readable batch, the content of its text (what
    `prepare_batch` reads a record from; before, of the record itself, which the first comparison covers)."""
    if existing.payload_sha256 == document_content_sha256(document):
        return True
    text = _as_text(raw)
    if existing.payload_sha256 == sha256_hex(text):
        return True
    return isinstance(raw, Mapping) and existing.payload_sha256 == document_content_sha256(loads_exact(text))


def _may_restart(existing: Flow, document: Any, replayed: bool) -> bool:
    """A submission for an ended batch id that may be a new attempt: a replay, or one requested after the flow
    ended (a redelivery of the message that made the flow is older than its end, and stays a duplicate)."""
    if existing.state not in RESUBMITTABLE_STATES:
        return False
    if replayed:
        return True
    asked = requested_at(document)
    return asked is not None and asked > existing.updated_at


async def _accept(store: Store, given: Raw | Handed, *, now: datetime, checks: _Checks, replayed: bool) -> IntakeResult:
    raw = given.document if isinstance(given, Handed) else given
    document, _ = _document(raw)
    batch_id = readable_batch_id(document)
    traceparent = current_traceparent()
    if batch_id is not None:
        existing = await store.arun(lambda tx: tx.flows.get(batch_id), write=False)
        if existing is not None:
            known = IntakeResult(existing, False, existing.state, None, _same_document(existing, raw, document))
            if not _may_restart(existing, document, replayed):
                return known
            prepared = await asyncio.to_thread(checks.prepare, raw, now)
            if existing.state == FlowState.INVALID and prepared.reason is not None:
                return known  # refused again: the refused attempt stays (a dead letter says why, once more)
            return await store.arun(
                lambda tx: restart_batch(tx, prepared, existing, now=now, traceparent=traceparent, guard=checks.guard)
            )
    # A new batch: a document handed over goes to the check, which lets go of it once it is written as text
    # (`prepare_batch`); from then on the text and the batch parsed from it are what count (see `Handed`).
    source = given if isinstance(given, Handed) else raw
    del raw, document
    prepared = await asyncio.to_thread(checks.prepare, source, now)
    if isinstance(given, Handed):
        given.drop()  # a document refused before it was written as text (no readable batch id)
    return await store.arun(
        lambda tx: store_batch(
            tx, prepared, now=now, traceparent=traceparent, guard=checks.guard, controls=checks.controls
        )
    )
