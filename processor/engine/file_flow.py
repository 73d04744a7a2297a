"""Flow A, the file payment, as durable steps: each call of `FileFlow.run` advances one flow as far as it can.

    RECEIVED         A1 create consent           -> CONSENT_CREATED
    CONSENT_CREATED  A2 upload the file          -> AWAITING_AUTHORIZATION   publishes AUTHORIZATION_REQUIRED
    AWAITING_...     (the approver; processor.engine.authorization moves it on)  -> AUTHORIZED | REJECTED
                     due at the deadline         -> EXPIRED
    AUTHORIZED       A3 create the file payment  -> INITIATED                publishes INITIATED
    INITIATED        A4 read (backing off), report-file -> COMPLETED | FAILED with the per-transaction report

Crash safety. Every resource-creating call (A1, A2, A3) is bracketed by the store's side-effect records:

1. `side_effects.begin` commits a PENDING record holding the idempotency key *before* the call;
2. the call is made with that key (the bank client repeats it on its own retries);
3. `side_effects.complete` and the flow's move (with its outbox event) commit *together* after it.

A process that dies between 1 and 3 leaves the record PENDING with the flow still in the earlier state; the next
run finds `effect.resumed` and resolves the outcome instead of creating anything new: A1 is repeated with the
same key (the bank answers with the consent it already created), A2 first reads the consent (the file landed if
it left `AwaitingUpload`), A3 first reads the consent (`Consumed` means the payment exists; repeating A3 with the
same key returns it). A bank error that may have taken effect (timeout, reset, 5xx: `ambiguous`) is recorded
AMBIGUOUS and resolved the same way on the next try. A semantic refusal (4xx) ends the flow FAILED. Nothing ever
calls a creating operation with a new key for the same flow.

Every state change is a compare-and-set on the flow's version made by the holder of its lease, so two
instances never both act on one flow; a flow whose lease ran out (its worker died) is taken over by another.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cached_property
from typing import Any

import orjson
import structlog

from processor.bank import BankError, ProtocolError
from processor.bank import errors as bank_errors
from processor.bank.models import FilePaymentReport
from processor.domain.batch import PayrollBatch, batch_from_json
from processor.domain.file_states import BatchStatus, FlowState, move, outcome_of_bank_status
from processor.domain.outcomes import outcome_totals, retry_of
from processor.domain.payload import FilePayload, prepare_file_payload
from processor.domain.time import iso_ms
from processor.engine.authorization import (
    AuthorizationHooks,
    MissingTokensError,
    PendingAuthorization,
    approval_link,
    consent_access_token,
)
from processor.engine.context import EngineContext
from processor.store import Flow, Operation, SideEffect, StatusEvent, StoreTx, VersionConflictError
from schemas.topics import STATUS_TOPIC

log = structlog.get_logger("processor.engine.file")

KIND = "file"
PAYMENT_PENDING = "InitiationPending"


class FlowNotAwaitingError(RuntimeError):
    """A hook was called for a flow that no longer waits for its approver (or for another consent)."""


# -- status events ----------------------------------------------------------------------------------------------


def status_payload(
    flow: Flow,
    status: BatchStatus | str,
    now: datetime,
    *,
    currency: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The `dispersion.status` event for `flow` (fields of schemas/dispersion_status.v2.avsc, minus `event_id`,
    which the outbox assigns). Values come from the flow row; `overrides` replace them (e.g. the new ids). The
    outcome fields (transfers and amounts completed / failed) follow from `transaction_results`."""
    payload: dict[str, Any] = {
        "batch_id": flow.batch_id,
        "status": str(status),
        "occurred_at": iso_ms(now),
        "consent_id": flow.consent_id,
        "file_payment_id": flow.file_payment_id,
        "authorization_url": None,
        "number_of_transactions": flow.number_of_transactions,
        "control_sum": flow.control_sum,
        "currency": currency if flow.control_sum is not None or currency else None,
        "bank_status": flow.bank_status,
        "reason": None,
        "transaction_results": None,
        "retry_of": retry_of(flow.batch_id),
        "execute_on": None,
    }
    payload.update(overrides)
    payload.update(outcome_totals(payload["transaction_results"]))
    return payload


def status_event(
    flow: Flow,
    target: FlowState,
    now: datetime,
    *,
    currency: str | None = None,
    replacing: bool = False,
    **overrides: Any,
) -> StatusEvent | None:
    """The event a move of `flow` to `target` publishes (None when it publishes nothing); checks the move.
    `replacing`: the flow is on a replacement consent (see `flow_states.move`)."""
    status = move(flow.state, target, replacing=replacing)
    if status is None:
        return None
    return StatusEvent(status.value, status_payload(flow, status, now, currency=currency, **overrides), STATUS_TOPIC)


# The batch's `origin_account` is a flat object; in JSON text an unescaped `"origin_account"` followed by `:` can
# only be a member name (inside a string value its quotes would be escaped).
_ORIGIN_ACCOUNT = re.compile(r'"origin_account"\s*:\s*(\{[^{}]*\})')


def _origin_currency(payload_text: str) -> str | None:
    """The origin account's currency from the stored batch text, without parsing the whole batch (a
    100,000-transfer batch is 24 MB of JSON)."""
    found = _ORIGIN_ACCOUNT.search(payload_text)
    try:
        origin = orjson.loads(found.group(1)) if found else orjson.loads(payload_text)["origin_account"]
        value = origin["currency"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None


# -- the per-transaction report ---------------------------------------------------------------------------------

_LINE_STATUS = {"settled": "COMPLETED", "rejected": "FAILED", "pending": "PENDING"}


def transaction_results(
    report: FilePaymentReport, transfers: Sequence[tuple[str | None, Decimal]]
) -> list[dict[str, Any]] | None:
    """The report's lines as the status event's `transaction_results` (batch order; `transfers` gives each
    transfer's employee reference and amount), or None when the bank's report is not in a format we can read."""
    if not report.lines:
        return None
    results: list[dict[str, Any]] = []
    for line in sorted(report.lines, key=lambda item: item.index):
        transfer = transfers[line.index] if 0 <= line.index < len(transfers) else None
        reason = " ".join(part for part in (line.reason_code, line.reason) if part) or None
        results.append(
            {
                "index": line.index,
                "employee_reference": transfer[0] if transfer else None,
                "amount": transfer[1] if transfer else line.amount,
                "status": _LINE_STATUS.get(line.status.lower(), "PENDING"),
                "reason": reason,
            }
        )
    return results


def report_summary(results: list[dict[str, Any]] | None) -> str | None:
    """`2 of 3 transfers settled; 1 rejected (AC04 ...)`: a reason line for COMPLETED and FAILED events."""
    if not results:
        return None
    done = sum(1 for r in results if r["status"] == "COMPLETED")
    failed = [r for r in results if r["status"] == "FAILED"]
    text = f"{done} of {len(results)} transfers settled"
    if failed:
        codes = sorted({(r["reason"] or "no reason").split(" ")[0] for r in failed})
        text += f"; {len(failed)} rejected ({', '.join(codes)})"
    return text


# -- the flow ---------------------------------------------------------------------------------------------------


class _Prepared:
    """A flow's file payload, and the `Data.Initiation` of A1 and A3 as JSON bytes (the canonical file reused,
    never re-serialised), built on first use: A2 never needs it."""

    def __init__(self, payload: FilePayload) -> None:
        self.payload = payload
        self.currency = payload.origin.currency
        self.transactions = len(payload.source.batch.transactions)

    @cached_property
    def initiation(self) -> bytes:
        return self.payload.initiation_json()

    @cached_property
    def initiation_sha256(self) -> str:
        return hashlib.sha256(self.initiation).hexdigest()


class FileFlow:
    """The steps of flow A over the store. One instance serves any number of flows concurrently."""

    kind = KIND
    log_field = "batch_id"

    def __init__(self, ctx: EngineContext, *, cache_transactions: int = 20_000) -> None:
        self.ctx = ctx
        # Built payloads, most recent last, holding at most `cache_transactions` transfers in all: enough for
        # every flow in flight at month end (32 x a few hundred) to build its payload once for A1 and A2, while
        # a very large batch is never kept between steps (a 100,000-transfer payload is about 160 MiB).
        self._cache: OrderedDict[tuple[str, str], _Prepared] = OrderedDict()
        self._cache_transactions = cache_transactions
        self._cached_transactions = 0

    # -- claiming ---------------------------------------------------------------------------------------------

    async def claim(self, *, owner: str, limit: int) -> list[Flow]:
        """Lease up to `limit` due flows."""
        now = self.ctx.clock.now()
        lease = self.ctx.settings.lease_seconds
        return await self.ctx.store.arun(
            lambda tx: tx.flows.claim_due(now=now, owner=owner, limit=limit, lease_seconds=lease)
        )

    async def acquire(self, key: str, *, owner: str) -> Flow | None:
        """Lease one flow if it is due and free (single-flow mode, e.g. `dispersion pay-file`)."""
        now = self.ctx.clock.now()
        lease = self.ctx.settings.lease_seconds

        def work(tx: StoreTx) -> Flow | None:
            flow = tx.flows.get(key)
            if flow is None or flow.next_action_at is None or flow.next_action_at > now:
                return None
            return tx.flows.acquire(key, owner=owner, now=now, lease_seconds=lease)

        return await self.ctx.store.arun(work)

    async def renew(self, key: str, *, owner: str) -> bool:
        """Extend the lease while a step runs; False when it was lost."""
        now = self.ctx.clock.now()
        lease = self.ctx.settings.lease_seconds
        return await self.ctx.store.arun(lambda tx: tx.flows.renew(key, owner=owner, now=now, lease_seconds=lease))

    async def release(self, key: str, *, owner: str) -> None:
        """Give a lease back."""
        await self.ctx.store.arun(lambda tx: tx.flows.release(key, owner=owner))

    # -- running ----------------------------------------------------------------------------------------------

    async def run(self, flow: Flow, *, owner: str) -> Flow:
        """Advance a leased flow step by step until it waits (for the approver, the bank, a retry) or ends.

        Returns the flow as last written. Errors that are not the bank's (a bug, the database) are recorded as
        `last_error` and the flow is retried later; a lost compare-and-set means someone else moved the flow,
        so this run just stops.
        """
        current = flow
        try:
            while True:
                following = await self.step(current, owner=owner)
                if following is None:
                    return current
                current = following
                if current.terminal or current.lease_owner != owner:
                    return current
                now = self.ctx.clock.now()
                if current.next_action_at is None or current.next_action_at > now:
                    return current
        except VersionConflictError:
            log.info("flow changed under this step; leaving it", batch_id=current.batch_id, state=current.state)
            await self.release(current.batch_id, owner=owner)
            return current
        except Exception as exc:  # a bug or the database: keep the flow, try again later
            log.exception("flow step crashed", batch_id=current.batch_id, state=current.state)
            await self._reschedule_after_error(current, owner, f"internal error: {type(exc).__name__}: {exc}")
            return current

    async def step(self, flow: Flow, *, owner: str) -> Flow | None:
        """Run the one step the flow's state calls for; the flow as written, or None when nothing was done."""
        state = flow.state
        if state == FlowState.RECEIVED:
            return await self._create_consent(flow, owner)
        if state == FlowState.CONSENT_CREATED:
            return await self._upload(flow, owner)
        if state == FlowState.AWAITING_AUTHORIZATION:
            return await self._check_deadline(flow, owner)
        if state == FlowState.AUTHORIZED:
            return await self._create_payment(flow, owner)
        if state == FlowState.INITIATED:
            return await self._poll_payment(flow, owner)
        # Terminal (or unknown) state: nothing to do; make sure it is not claimed again.
        return await self._write(flow, owner, flow.state, next_action_at=None, release_lease=True)

    # -- A1 ---------------------------------------------------------------------------------------------------

    async def _create_consent(self, flow: Flow, owner: str) -> Flow | None:
        prepared = await self._prepared(flow)
        if prepared is None:
            return await self._fail(flow, owner, "the stored batch can no longer be turned into a file payload")
        initiation, file_hash = prepared.initiation, prepared.payload.file_hash
        effect = await self._begin(flow, Operation.CREATE_CONSENT, prepared.initiation_sha256)
        del prepared  # a payload too large for the cache is freed before the bank's (large) answer is read
        if effect.done and effect.resource_id:
            return await self._consent_created(flow, owner, effect.resource_id, file_hash)
        self.ctx.checkpoint("create_consent:before", flow.batch_id)
        bank = await self.ctx.banks.get(flow.integration)
        try:
            # A resumed record repeats the call with the same key: the bank answers with the consent it holds.
            consent = await bank.create_file_consent(
                initiation, idempotency_key=effect.idempotency_key, echo_file=False
            )
        except BankError as exc:
            return await self._bank_error(flow, owner, Operation.CREATE_CONSENT, exc)
        self.ctx.checkpoint("create_consent:after", flow.batch_id)
        if consent.file_hash != file_hash:
            log.warning("consent echoes another file hash", batch_id=flow.batch_id, consent_id=consent.consent_id)
        return await self._consent_created(flow, owner, consent.consent_id, file_hash)

    async def _consent_created(self, flow: Flow, owner: str, consent_id: str, file_hash: str) -> Flow:
        now = self.ctx.clock.now()

        def work(tx: StoreTx) -> Flow:
            tx.side_effects.complete(flow.batch_id, Operation.CREATE_CONSENT, consent_id, now=now)
            return tx.flows.transition(
                flow,
                FlowState.CONSENT_CREATED,
                now=now,
                owner=owner,
                consent_id=consent_id,
                file_hash=file_hash,
                attempts=0,
                last_error=None,
                next_action_at=now,
            )

        updated = await self.ctx.store.arun(work)
        log.info("consent created", batch_id=flow.batch_id, consent_id=consent_id)
        return updated

    # -- A2 ---------------------------------------------------------------------------------------------------

    async def _upload(self, flow: Flow, owner: str) -> Flow | None:
        consent_id = flow.consent_id
        if consent_id is None:
            return await self._fail(flow, owner, "consent id missing for the upload")
        prepared = await self._prepared(flow)
        if prepared is None:
            return await self._fail(flow, owner, "the stored batch can no longer be turned into a file payload")
        body, currency = prepared.payload.upload_json(consent_id), prepared.currency
        del prepared
        effect = await self._begin(flow, Operation.UPLOAD, hashlib.sha256(body).hexdigest())
        if effect.done:
            return await self._uploaded(flow, owner, currency)
        bank = await self.ctx.banks.get(flow.integration)
        try:
            if effect.resumed and await bank.upload_landed(consent_id):
                return await self._uploaded(flow, owner, currency)
            self.ctx.checkpoint("upload:before", flow.batch_id)
            result = await bank.upload_file(consent_id, body, idempotency_key=effect.idempotency_key)
        except bank_errors.InvalidConsentStatus as exc:
            # The consent is past AwaitingUpload: our file landed (an answer lost earlier) unless it was rejected.
            try:
                landed = await bank.upload_landed(consent_id)
            except BankError as again:
                return await self._bank_error(flow, owner, Operation.UPLOAD, again)
            if landed:
                return await self._uploaded(flow, owner, currency)
            return await self._bank_error(flow, owner, Operation.UPLOAD, exc)
        except BankError as exc:
            return await self._bank_error(flow, owner, Operation.UPLOAD, exc)
        self.ctx.checkpoint("upload:after", flow.batch_id)
        if result.number_of_transactions != flow.number_of_transactions or result.control_sum != flow.control_sum:
            log.warning(
                "upload answer differs from the batch",
                batch_id=flow.batch_id,
                bank_count=result.number_of_transactions,
                count=flow.number_of_transactions,
            )
        return await self._uploaded(flow, owner, currency)

    async def _uploaded(self, flow: Flow, owner: str, currency: str) -> Flow:
        assert flow.consent_id is not None
        now = self.ctx.clock.now()
        # A replacement consent (the first one's tokens were lost) keeps the deadline and the published link.
        replacing = flow.authorization_deadline is not None
        deadline = flow.authorization_deadline or now + timedelta(seconds=self.ctx.settings.authorization_deadline)
        link = approval_link(self.ctx.public_url, KIND, flow.batch_id, flow.approval_token)
        event = status_event(
            flow,
            FlowState.AWAITING_AUTHORIZATION,
            now,
            currency=currency,
            replacing=replacing,
            authorization_url=link,
        )

        def work(tx: StoreTx) -> Flow:
            tx.side_effects.complete(flow.batch_id, Operation.UPLOAD, flow.consent_id or "", now=now)
            return tx.flows.transition(
                flow,
                FlowState.AWAITING_AUTHORIZATION,
                now=now,
                owner=owner,
                event=event,
                authorization_deadline=deadline,
                next_action_at=deadline,  # the worker looks again only to expire it
                attempts=0,
                last_error=None,
                release_lease=True,
            )

        updated = await self.ctx.store.arun(work)
        log.info("file uploaded; waiting for the approver", batch_id=flow.batch_id, deadline=iso_ms(deadline))
        return updated

    # -- waiting for the approver -----------------------------------------------------------------------------

    async def _check_deadline(self, flow: Flow, owner: str) -> Flow:
        now = self.ctx.clock.now()
        deadline = flow.authorization_deadline
        if deadline is not None and now < deadline:
            return await self._write(flow, owner, flow.state, next_action_at=deadline, release_lease=True)
        currency = await self._currency(flow)
        reason = "the approver did not authorise before the deadline" + (
            f" ({iso_ms(deadline)})" if deadline is not None else ""
        )
        event = status_event(flow, FlowState.EXPIRED, now, currency=currency, reason=reason)
        updated = await self._write(
            flow, owner, FlowState.EXPIRED, event=event, next_action_at=None, release_lease=True, last_error=None
        )
        log.info("authorization deadline passed", batch_id=flow.batch_id)
        return updated

    # -- A3 ---------------------------------------------------------------------------------------------------

    async def _create_payment(self, flow: Flow, owner: str) -> Flow | None:
        consent_id = flow.consent_id
        if consent_id is None:
            return await self._fail(flow, owner, "consent id missing for the payment")
        prepared = await self._prepared(flow)
        if prepared is None:
            return await self._fail(flow, owner, "the stored batch can no longer be turned into a file payload")
        initiation, currency = prepared.initiation, prepared.currency
        effect = await self._begin(flow, Operation.CREATE_PAYMENT, prepared.initiation_sha256)
        del prepared
        if effect.done and effect.resource_id:
            return await self._initiated(flow, owner, effect.resource_id, PAYMENT_PENDING, currency)
        bank = await self.ctx.banks.get(flow.integration)
        key = effect.idempotency_key
        refreshed = False
        while True:
            try:
                token = await consent_access_token(
                    self.ctx.store, bank, consent_id, clock=self.ctx.clock, force_refresh=refreshed
                )
            except MissingTokensError as exc:
                return await self._fail(flow, owner, f"cannot create the payment: {exc}")
            except BankError as exc:
                if exc.retry_safe or isinstance(exc, ProtocolError):
                    return await self._bank_error(flow, owner, Operation.CREATE_PAYMENT, exc)
                return await self._fail(flow, owner, f"the consent's token could not be refreshed: {exc}")
            try:
                payment = None
                if effect.resumed:
                    # An earlier try may have created it: the consent tells (Consumed), repeating the key finds it.
                    payment = await bank.find_file_payment(
                        consent_id, initiation, access_token=token, idempotency_key=key, echo_file=False
                    )
                if payment is None:
                    self.ctx.checkpoint("create_payment:before", flow.batch_id)
                    payment = await bank.create_file_payment(
                        consent_id, initiation, access_token=token, idempotency_key=key, echo_file=False
                    )
            except bank_errors.HeaderInvalid as exc:
                if refreshed or exc.status != 401:
                    return await self._bank_error(flow, owner, Operation.CREATE_PAYMENT, exc)
                refreshed = True  # the bank refused the access token: refresh it once and repeat (same key)
                continue
            except bank_errors.InvalidConsentStatus as exc:
                try:
                    payment = await bank.find_file_payment(
                        consent_id, initiation, access_token=token, idempotency_key=key, echo_file=False
                    )
                except BankError as again:
                    return await self._bank_error(flow, owner, Operation.CREATE_PAYMENT, again)
                if payment is None:
                    return await self._bank_error(flow, owner, Operation.CREATE_PAYMENT, exc)
            except BankError as exc:
                return await self._bank_error(flow, owner, Operation.CREATE_PAYMENT, exc)
            break
        self.ctx.checkpoint("create_payment:after", flow.batch_id)
        return await self._initiated(flow, owner, payment.file_payment_id, payment.status, currency)

    async def _initiated(self, flow: Flow, owner: str, file_payment_id: str, bank_status: str, currency: str) -> Flow:
        now = self.ctx.clock.now()
        event = status_event(
            flow,
            FlowState.INITIATED,
            now,
            currency=currency,
            file_payment_id=file_payment_id,
            bank_status=bank_status,
        )
        first_poll = now + timedelta(seconds=self.ctx.settings.poll_delay(0))

        def work(tx: StoreTx) -> Flow:
            tx.side_effects.complete(flow.batch_id, Operation.CREATE_PAYMENT, file_payment_id, now=now)
            return tx.flows.transition(
                flow,
                FlowState.INITIATED,
                now=now,
                owner=owner,
                event=event,
                file_payment_id=file_payment_id,
                bank_status=bank_status,
                attempts=0,
                last_error=None,
                next_action_at=first_poll,
                release_lease=True,
            )

        updated = await self.ctx.store.arun(work)
        log.info("file payment created", batch_id=flow.batch_id, file_payment_id=file_payment_id)
        return updated

    # -- A4 and the report ------------------------------------------------------------------------------------

    async def _poll_payment(self, flow: Flow, owner: str) -> Flow | None:
        file_payment_id = flow.file_payment_id
        if file_payment_id is None:
            return await self._fail(flow, owner, "file payment id missing")
        bank = await self.ctx.banks.get(flow.integration)
        try:
            payment = await bank.get_file_payment(file_payment_id, echo_file=False)
        except BankError as exc:
            # Reading never creates anything: whatever the error, read again later.
            return await self._retry_later(flow, owner, None, exc)
        bank_status = payment.status
        del payment  # its answer echoes the whole file
        end = outcome_of_bank_status(bank_status)
        if end is None:
            delay = self.ctx.settings.poll_delay(flow.attempts + 1)
            now = self.ctx.clock.now()
            return await self._write(
                flow,
                owner,
                flow.state,
                bank_status=bank_status,
                attempts=flow.attempts + 1,
                next_action_at=now + timedelta(seconds=delay),
                release_lease=True,
                last_error=None,
            )
        # What the results need from the batch, read before the report so the two are never in memory at once.
        batch = await self._batch(flow)
        transfers = None if batch is None else [(t.employee_reference, t.amount) for t in batch.transactions]
        currency = batch.origin.currency if batch is not None else await self._currency(flow)
        del batch
        try:
            report = await bank.get_file_payment_report(file_payment_id)
        except BankError as exc:
            return await self._retry_later(flow, owner, None, exc)
        results = transaction_results(report, transfers) if transfers is not None else None
        stored_report = {
            "file_payment_id": file_payment_id,
            "bank_status": bank_status,
            "report_status": report.status,
            "transaction_results": results,
            # The bank's own report is kept as it came only when we could not read its lines.
            "bank_report": None if report.lines else report.body.decode("utf-8", errors="replace"),
        }
        del report, transfers
        now = self.ctx.clock.now()
        summary = report_summary(results)
        reason = summary if end == FlowState.COMPLETED else (summary or f"the bank reports {bank_status}")
        event = status_event(
            flow,
            end,
            now,
            currency=currency,
            bank_status=bank_status,
            reason=reason,
            transaction_results=results,
        )
        consent_id = flow.consent_id

        def work(tx: StoreTx) -> Flow:
            updated = tx.flows.transition(
                flow,
                end,
                now=now,
                owner=owner,
                event=event,
                bank_status=bank_status,
                report=stored_report,
                next_action_at=None,
                last_error=None,
                release_lease=True,
            )
            if consent_id is not None:
                tx.tokens.delete(consent_id)  # the payment exists: the consent's tokens are no longer needed
            return updated

        updated = await self.ctx.store.arun(work)
        log.info("file payment ended", batch_id=flow.batch_id, bank_status=bank_status)
        return updated

    # -- shared helpers ---------------------------------------------------------------------------------------

    async def _prepared(self, flow: Flow) -> _Prepared | None:
        """The file payload of the flow's batch (validated again, deterministic), cached for a few flows."""
        key = (flow.batch_id, flow.payload_sha256)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        text = await self.ctx.store.arun(lambda tx: tx.flows.payload(flow.batch_id), write=False)
        if text is None:
            return None
        try:
            payload = prepare_file_payload(batch_from_json(text))
        except ValueError:
            log.exception("stored batch no longer builds a payload", batch_id=flow.batch_id)
            return None
        prepared = _Prepared(payload)
        size = prepared.transactions
        if size <= self._cache_transactions:
            self._cache[key] = prepared
            self._cached_transactions += size
            while self._cached_transactions > self._cache_transactions:
                _, dropped = self._cache.popitem(last=False)
                self._cached_transactions -= dropped.transactions
        return prepared

    async def _batch(self, flow: Flow) -> PayrollBatch | None:
        """The flow's batch for the per-transaction results (from the cache, or parsed from the store without
        building the file payload again)."""
        cached = self._cache.get((flow.batch_id, flow.payload_sha256))
        if cached is not None:
            return cached.payload.source.batch
        text = await self.ctx.store.arun(lambda tx: tx.flows.payload(flow.batch_id), write=False)
        if text is None:
            return None
        try:
            return batch_from_json(text)
        except ValueError:
            log.exception("stored batch can no longer be read", batch_id=flow.batch_id)
            return None

    async def _currency(self, flow: Flow) -> str | None:
        cached = self._cache.get((flow.batch_id, flow.payload_sha256))
        if cached is not None:
            return cached.currency
        text = await self.ctx.store.arun(lambda tx: tx.flows.payload(flow.batch_id), write=False)
        return None if text is None else _origin_currency(text)

    async def _begin(self, flow: Flow, operation: Operation, request_sha256: str | None) -> SideEffect:
        now = self.ctx.clock.now()
        effect = await self.ctx.store.arun(
            lambda tx: tx.side_effects.begin(flow.batch_id, operation, now=now, request_sha256=request_sha256)
        )
        if effect.resumed:
            log.info(
                "resuming a call whose outcome is unknown",
                batch_id=flow.batch_id,
                operation=operation.value,
                previous=effect.previous_status,
                idempotency_key=effect.idempotency_key,
            )
        return effect

    async def _write(
        self,
        flow: Flow,
        owner: str,
        state: str,
        *,
        event: StatusEvent | None = None,
        release_lease: bool = False,
        **changes: Any,
    ) -> Flow:
        now = self.ctx.clock.now()
        return await self.ctx.store.arun(
            lambda tx: tx.flows.transition(
                flow, state, now=now, owner=owner, event=event, release_lease=release_lease, **changes
            )
        )

    async def _fail(self, flow: Flow, owner: str, reason: str, operation: Operation | None = None) -> Flow:
        """End the flow FAILED (publishing it), recording a refused side effect when there is one."""
        now = self.ctx.clock.now()
        currency = await self._currency(flow)
        event = status_event(flow, FlowState.FAILED, now, currency=currency, reason=reason)

        def work(tx: StoreTx) -> Flow:
            if operation is not None:
                tx.side_effects.fail(flow.batch_id, operation, reason, now=now)
            return tx.flows.transition(
                flow,
                FlowState.FAILED,
                now=now,
                owner=owner,
                event=event,
                next_action_at=None,
                last_error=reason,
                release_lease=True,
            )

        updated = await self.ctx.store.arun(work)
        log.warning("flow failed", batch_id=flow.batch_id, reason=reason)
        return updated

    async def _bank_error(self, flow: Flow, owner: str, operation: Operation, exc: BankError) -> Flow:
        """A creating call failed: a transient or ambiguous error is retried later with the same key; a
        semantic refusal ends the flow FAILED."""
        if exc.retry_safe or exc.ambiguous or isinstance(exc, ProtocolError):
            return await self._retry_later(flow, owner, operation, exc)
        return await self._fail(flow, owner, f"the bank refused {operation.value}: {exc}", operation)

    async def _retry_later(self, flow: Flow, owner: str, operation: Operation | None, exc: BankError) -> Flow:
        now = self.ctx.clock.now()
        delay = exc.retry_after if isinstance(exc, bank_errors.BankHTTPError) and exc.retry_after else None
        wait = max(delay or 0.0, self.ctx.settings.retry_delay(flow.attempts))
        reason = f"{type(exc).__name__}: {exc}"

        def work(tx: StoreTx) -> Flow:
            if operation is not None and (exc.ambiguous or isinstance(exc, ProtocolError)):
                tx.side_effects.mark_ambiguous(flow.batch_id, operation, reason, now=now)
            return tx.flows.transition(
                flow,
                flow.state,
                now=now,
                owner=owner,
                attempts=flow.attempts + 1,
                last_error=reason[:2000],
                next_action_at=now + timedelta(seconds=wait),
                release_lease=True,
            )

        updated = await self.ctx.store.arun(work)
        log.warning(
            "bank call failed; will try again",
            batch_id=flow.batch_id,
            operation=operation.value if operation else "read",
            error=type(exc).__name__,
            ambiguous=exc.ambiguous,
            retry_in=wait,
        )
        return updated

    async def _reschedule_after_error(self, flow: Flow, owner: str, reason: str) -> None:
        now = self.ctx.clock.now()
        wait = self.ctx.settings.retry_delay(flow.attempts)

        def work(tx: StoreTx) -> None:
            current = tx.flows.get(flow.batch_id)
            if current is None or current.lease_owner != owner or current.terminal:
                return
            tx.flows.update(
                flow.batch_id,
                expected_version=current.version,
                now=now,
                owner=owner,
                release_lease=True,
                attempts=current.attempts + 1,
                last_error=reason[:2000],
                next_action_at=now + timedelta(seconds=wait),
            )

        try:
            await self.ctx.store.arun(work)
        except Exception:  # the lease will run out and another run will pick the flow up
            logging.getLogger(__name__).debug("could not record the error", exc_info=True)


# -- the authorization hooks of the file kind -------------------------------------------------------------------


class FileAuthorizationHooks(AuthorizationHooks):
    """How processor.engine.authorization sees and moves file flows (registered as kind "file")."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx

    def consent_for(self, tx: StoreTx, flow_id: str) -> PendingAuthorization | None:
        """The flow's integration, consent, approval token, deadline and whether it awaits the approver."""
        flow = tx.flows.get(flow_id)
        if flow is None:
            return None
        return PendingAuthorization(
            integration=flow.integration,
            consent_id=flow.consent_id,
            approval_token=flow.approval_token,
            deadline=flow.authorization_deadline,
            awaiting=flow.state == FlowState.AWAITING_AUTHORIZATION,
            state=flow.state,
        )

    def _awaiting(self, tx: StoreTx, flow_id: str, consent_id: str | None) -> Flow:
        flow = tx.flows.get(flow_id, for_update=True)
        if flow is None or flow.state != FlowState.AWAITING_AUTHORIZATION:
            raise FlowNotAwaitingError(f"file flow {flow_id!r} does not await authorization")
        if consent_id is not None and flow.consent_id != consent_id:
            raise FlowNotAwaitingError(f"file flow {flow_id!r} awaits another consent")
        return flow

    def on_authorized(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """AUTHORIZED, published, and due now for the payment step."""
        flow = self._awaiting(tx, flow_id, consent_id)
        event = status_event(flow, FlowState.AUTHORIZED, now, currency=_currency_in_tx(tx, flow))
        tx.flows.transition(flow, FlowState.AUTHORIZED, now=now, event=event, next_action_at=now, attempts=0)

    def on_rejected(self, tx: StoreTx, flow_id: str, reason: str, *, now: datetime) -> None:
        """REJECTED, published; the flow ends."""
        flow = self._awaiting(tx, flow_id, None)
        event = status_event(flow, FlowState.REJECTED, now, currency=_currency_in_tx(tx, flow), reason=reason)
        tx.flows.transition(flow, FlowState.REJECTED, now=now, event=event, next_action_at=None, last_error=None)

    def on_stranded(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """Back to RECEIVED for a new consent and upload (new idempotency keys; the old records are kept under
        `{batch_id}/replaced/{consent_id}`), due now. Nothing is published: the approval link stays the same."""
        flow = self._awaiting(tx, flow_id, consent_id)
        tx.side_effects.retire(flow.batch_id, (Operation.CREATE_CONSENT, Operation.UPLOAD), resource_id=consent_id)
        move(flow.state, FlowState.RECEIVED)
        tx.flows.transition(
            flow,
            FlowState.RECEIVED,
            now=now,
            consent_id=None,
            next_action_at=now,
            attempts=0,
            last_error=f"consent {consent_id} is authorised at the bank but its tokens were lost; replacing it",
        )


def _currency_in_tx(tx: StoreTx, flow: Flow) -> str | None:
    text = tx.flows.payload(flow.batch_id)
    return None if text is None else _origin_currency(text)


def decimal_text(value: Decimal | None) -> str | None:
    """An amount as plain text (for printing)."""
    return None if value is None else format(value, "f")


def results_of(report: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The stored report's `transaction_results` (amounts as strings), or an empty list."""
    if not isinstance(report, Mapping):
        return []
    results = report.get("transaction_results")
    return list(results) if isinstance(results, list) else []
