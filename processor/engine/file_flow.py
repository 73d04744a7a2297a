"""Flow A, the file payment: the step handlers `FILE_TABLE` names, and the authorization hooks of its kind.

    RECEIVED         create_consent  A1 create consent     -> CONSENT_CREATED
    CONSENT_CREATED  upload_file     A2 upload the file    -> AWAITING_AUTHORIZATION   publishes AUTHORIZATION_REQUIRED
    AWAITING_...     watch_authorization  (the approver; `FileAuthorizationHooks` move it on) reads the consent:
                                          Rejected at the bank -> REJECTED, the deadline -> EXPIRED
    AUTHORIZED       create_payment  A3 create the payment -> INITIATED                publishes INITIATED
                                     (a scheduled batch: not before its execute_on day, `file_schedule`)
    INITIATED        poll_payment    A4 read (backing off), report-file -> COMPLETED | FAILED with the results

Leases, the step loop and retries are the leased-flow base's (`processor.engine.leased`); every creating call
(A1, A2, A3) is a guarded side effect (`processor.engine.side_effect`). On resume: A1 is repeated with the same
key (the bank answers with the consent it already created), A2 first reads the consent (the file landed if it
left `AwaitingUpload`), A3 first reads the consent (`Consumed` means the payment exists; repeating A3 with the
same key returns it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import structlog

from processor.bank import BankClient, BankError
from processor.bank import errors as bank_errors
from processor.bank.file_payments import Initiation
from processor.bank.models import FilePayment
from processor.domain.file_states import BatchStatus, FlowState, move, outcome_of_bank_status
from processor.domain.kinds import Kind
from processor.domain.time import iso_ms
from processor.engine.accounts import remember_paid, review_fields
from processor.engine.authorization import AuthorizationHooks, PendingAuthorization, approval_link
from processor.engine.consent_watch import look_at_consent
from processor.engine.context import EngineContext
from processor.engine.file_events import (
    currency_in_tx,
    report_summary,
    status_event,
    transaction_results,
)
from processor.engine.file_payloads import FilePayloads
from processor.engine.file_schedule import hold, payment_due_at
from processor.engine.leased import LeasedFlow, Step, WorkRows
from processor.engine.side_effect import Guarded, Refusal
from processor.engine.tokens import TokenUnavailableError, access_token
from processor.engine.transfer_events import end_flow
from processor.engine.withdrawal import earlier_links, refusal_of
from processor.store import EffectStatus, Flow, Operation, StoreTx
from schemas.topics import STATUS_TOPIC

log = structlog.get_logger("processor.engine.file")

PAYMENT_PENDING = "InitiationPending"
_UNKNOWN = (EffectStatus.PENDING, EffectStatus.AMBIGUOUS)


class FlowNotAwaitingError(RuntimeError):
    """A hook was called for a flow that no longer waits for its approver (or for another consent)."""


class FileFlow(LeasedFlow[Flow]):
    """The steps of flow A over the store. One instance serves any number of flows concurrently."""

    kind = Kind.FILE

    def __init__(self, ctx: EngineContext, *, cache_transactions: int = 20_000) -> None:
        super().__init__(ctx)
        self.payloads = FilePayloads(ctx.store, cache_transactions=cache_transactions)

    def repo(self, tx: StoreTx) -> WorkRows[Flow]:
        """The `flows` table."""
        return tx.flows

    def steps(self) -> dict[str, Step[Flow]]:
        """The handlers FILE_TABLE names."""
        return {
            "create_consent": self.create_consent,
            "upload_file": self.upload_file,
            "watch_authorization": self.watch_authorization,
            "create_payment": self.create_payment,
            "poll_payment": self.poll_payment,
        }

    # -- A1 ---------------------------------------------------------------------------------------------------

    async def create_consent(self, flow: Flow, owner: str) -> Flow:
        """A1: the file-payment consent, created once (the same key on every try)."""
        prepared = await self.payloads.prepared(flow)
        if prepared is None:
            return await self._fail(flow, owner, "the stored batch can no longer be turned into a file payload")
        initiation, file_hash = prepared.initiation, prepared.payload.file_hash
        guard = Guarded(self, flow.batch_id, Operation.CREATE_CONSENT)
        effect = await guard.begin(initiation, keep=False)
        del prepared  # a payload too large for the cache is freed before the bank's (large) answer is read
        if effect.done and effect.resource_id:
            return await self._consent_created(flow, owner, guard, effect.resource_id, file_hash)
        request = guard.request(initiation)
        if request is None:
            return await guard.unresolved(flow, owner, "the consent request changed since its first attempt")
        bank = await self.ctx.banks.get(flow.integration)
        try:
            # A resumed record repeats the call with the same key: the bank answers with the consent it holds.
            consent = await guard.call(
                lambda _: bank.create_file_consent(request, idempotency_key=effect.idempotency_key, echo_file=False)
            )
        except BankError as exc:
            return await guard.failed(flow, owner, exc, _refused(self, flow, owner, guard))
        if consent.file_hash != file_hash:
            log.warning("consent echoes another file hash", batch_id=flow.batch_id, consent_id=consent.consent_id)
        return await self._consent_created(flow, owner, guard, consent.consent_id, file_hash)

    async def _consent_created(
        self, flow: Flow, owner: str, guard: Guarded[Flow], consent_id: str, file_hash: str
    ) -> Flow:
        now = self.now()

        def work(tx: StoreTx) -> Flow:
            guard.complete(tx, consent_id)
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

    async def upload_file(self, flow: Flow, owner: str) -> Flow:
        """A2: the file, uploaded once to the consent (a resumed upload first reads whether it landed)."""
        consent_id = flow.consent_id
        if consent_id is None:
            return await self._fail(flow, owner, "consent id missing for the upload")
        upload = await self.payloads.upload(flow, consent_id)
        if upload is None:
            return await self._fail(flow, owner, "the stored batch can no longer be turned into a file payload")
        body, currency = upload
        del upload
        guard = Guarded(self, flow.batch_id, Operation.UPLOAD)
        effect = await guard.begin(body, keep=False)
        if effect.done:
            return await self._uploaded(flow, owner, guard, currency)
        bank = await self.ctx.banks.get(flow.integration)
        refuse = _refused(self, flow, owner, guard)
        request = guard.request(body)
        try:
            if effect.resumed and await bank.upload_landed(consent_id):
                return await self._uploaded(flow, owner, guard, currency)
            if request is None:
                return await guard.unresolved(flow, owner, "the file changed since its first upload attempt")
            result = await guard.call(
                lambda _: bank.upload_file(consent_id, request, idempotency_key=effect.idempotency_key)
            )
        except bank_errors.InvalidConsentStatus as exc:
            # The consent is past AwaitingUpload: our file landed (an answer lost earlier) unless it was rejected.
            try:
                landed = await bank.upload_landed(consent_id)
            except BankError as again:
                return await guard.failed(flow, owner, again, refuse)
            if landed:
                return await self._uploaded(flow, owner, guard, currency)
            return await guard.failed(flow, owner, exc, refuse)
        except BankError as exc:
            return await guard.failed(flow, owner, exc, refuse)
        if result.number_of_transactions != flow.number_of_transactions or result.control_sum != flow.control_sum:
            log.warning(
                "upload answer differs from the batch",
                batch_id=flow.batch_id,
                bank_count=result.number_of_transactions,
                count=flow.number_of_transactions,
            )
        return await self._uploaded(flow, owner, guard, currency)

    async def _uploaded(self, flow: Flow, owner: str, guard: Guarded[Flow], currency: str) -> Flow:
        assert flow.consent_id is not None
        consent_id = flow.consent_id
        now = self.now()
        replacing = await link_published(self.ctx, flow)
        deadline = flow.authorization_deadline or now + timedelta(seconds=self.ctx.settings.authorization_deadline)
        link = approval_link(self.ctx.public_url, self.kind, flow.batch_id, flow.approval_token)

        def work(tx: StoreTx) -> Flow:
            event = status_event(
                flow,
                FlowState.AWAITING_AUTHORIZATION,
                now,
                currency=currency,
                replacing=replacing,
                authorization_url=link,
                # the changed accounts an approver reviewed before the consent was created, read in this transaction
                **review_fields(tx, flow.batch_id),
            )
            guard.complete(tx, consent_id)
            return tx.flows.transition(
                flow,
                FlowState.AWAITING_AUTHORIZATION,
                now=now,
                owner=owner,
                event=event,
                authorization_deadline=deadline,
                next_action_at=self.next_look(FlowState.AWAITING_AUTHORIZATION, now, deadline=deadline),
                attempts=0,
                last_error=None,
                release_lease=True,
            )

        updated = await self.ctx.store.arun(work)
        log.info("file uploaded; waiting for the approver", batch_id=flow.batch_id, deadline=iso_ms(deadline))
        return updated

    # -- waiting for the approver -----------------------------------------------------------------------------

    async def watch_authorization(self, flow: Flow, owner: str) -> Flow:
        """While the approver decides: read the consent every `consent_watch_interval` (`consent_watch`); it
        ends REJECTED when the bank says Rejected (a rejection whose redirect was lost), EXPIRED at the deadline."""
        look = await look_at_consent(
            self,
            key=flow.batch_id,
            state=flow.state,
            integration=flow.integration,
            consent_id=flow.consent_id,
            deadline=flow.authorization_deadline,
        )
        if look.ending is None:
            return await self.update(flow, owner, next_action_at=look.next_at, release_lease=True)
        now = self.now()
        end = FlowState(look.ending.value)
        event = status_event(flow, end, now, currency=await self.payloads.currency(flow), reason=look.reason)
        updated = await self.ctx.store.arun(
            lambda tx: end_flow(tx, flow, end, now=now, owner=owner, event=event, last_error=None, release_lease=True)
        )
        log.info("flow ended while awaiting authorization", batch_id=flow.batch_id, state=end.value)
        return updated

    # -- A3 ---------------------------------------------------------------------------------------------------

    async def create_payment(self, flow: Flow, owner: str) -> Flow:
        """A3: the file payment under the authorised consent, with the consent's token (refreshed when due); for a
        scheduled batch not before its day (checked here, not only in the schedule: `file_schedule.hold`)."""
        if (held := await hold(self, flow, owner)) is not None:
            return held
        consent_id = flow.consent_id
        if consent_id is None:
            return await self._fail(flow, owner, "consent id missing for the payment")
        bank = await self.ctx.banks.get(flow.integration)

        async def nothing_created() -> bool:
            # A consent is Consumed once its payment exists (read with the client-credentials token).
            try:
                return (await bank.get_file_consent(consent_id, echo_file=False)).status != "Consumed"
            except BankError:
                return False

        prepared = await self.payloads.prepared(flow)
        if prepared is None:
            reason = "the stored batch can no longer be turned into a file payload"
            earlier = await self.ctx.store.arun(
                lambda tx: tx.side_effects.get(flow.batch_id, Operation.CREATE_PAYMENT), write=False
            )
            if earlier is not None and earlier.status in _UNKNOWN and not await nothing_created():
                return await self.retry_later(flow, owner, reason)  # an earlier A3 may have paid: never FAILED
            return await self._fail(flow, owner, reason)
        initiation, currency = prepared.initiation, prepared.currency
        guard = Guarded(self, flow.batch_id, Operation.CREATE_PAYMENT)
        effect = await guard.begin(initiation, keep=False)
        del prepared
        if effect.done and effect.resource_id:
            return await self._initiated(flow, owner, guard, effect.resource_id, PAYMENT_PENDING, currency)
        key = effect.idempotency_key
        resumed = effect.resumed
        refuse = _refused(self, flow, owner, guard)
        request = guard.request(initiation)
        if request is None:
            reason = "the payment request changed since its first attempt"
            return await guard.unresolved(
                flow, owner, reason, end=lambda: self._fail(flow, owner, reason, guard), check=nothing_created
            )

        async def attempt(refresh: bool) -> FilePayment:
            token = await access_token(self.ctx, bank, consent_id, force=refresh)
            payment = None
            if resumed:
                # An earlier try may have created it: the consent tells (Consumed), repeating the key finds it.
                payment = await bank.find_file_payment(
                    consent_id, request, access_token=token, idempotency_key=key, echo_file=False
                )
            if payment is None:
                payment = await self._create_or_find(bank, consent_id, request, token, key)
            return payment

        try:
            payment = await guard.call(attempt)
        except (BankError, TokenUnavailableError) as exc:
            return await guard.failed(flow, owner, exc, refuse, nothing_created=nothing_created)
        return await self._initiated(flow, owner, guard, payment.file_payment_id, payment.status, currency)

    @staticmethod
    async def _create_or_find(
        bank: BankClient, consent_id: str, initiation: Initiation, token: str, key: str
    ) -> FilePayment:
        try:
            return await bank.create_file_payment(
                consent_id, initiation, access_token=token, idempotency_key=key, echo_file=False
            )
        except bank_errors.InvalidConsentStatus:
            # The consent is no longer Authorised: Consumed by our own payment (an answer lost earlier)?
            found = await bank.find_file_payment(
                consent_id, initiation, access_token=token, idempotency_key=key, echo_file=False
            )
            if found is None:
                raise
            return found

    async def _initiated(
        self, flow: Flow, owner: str, guard: Guarded[Flow], file_payment_id: str, bank_status: str, currency: str
    ) -> Flow:
        now = self.now()
        event = status_event(
            flow,
            FlowState.INITIATED,
            now,
            currency=currency,
            file_payment_id=file_payment_id,
            bank_status=bank_status,
        )

        def work(tx: StoreTx) -> Flow:
            guard.complete(tx, file_payment_id)
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
                next_action_at=self.next_look(FlowState.INITIATED, now, attempt=0),
                release_lease=True,
            )

        updated = await self.ctx.store.arun(work)
        log.info("file payment created", batch_id=flow.batch_id, file_payment_id=file_payment_id)
        return updated

    # -- A4 and the report ------------------------------------------------------------------------------------

    async def poll_payment(self, flow: Flow, owner: str) -> Flow:
        """A4: read the payment (backing off while the bank works); at its end, the report-file's results."""
        file_payment_id = flow.file_payment_id
        if file_payment_id is None:
            return await self._fail(flow, owner, "file payment id missing")
        bank = await self.ctx.banks.get(flow.integration)
        try:
            payment = await bank.get_file_payment(file_payment_id, echo_file=False)
        except BankError as exc:
            # Reading never creates anything: whatever the error, read again later.
            return await self.retry_later(flow, owner, exc)
        bank_status = payment.status
        del payment  # its answer echoes the whole file
        end = outcome_of_bank_status(bank_status)
        if end is None:
            now = self.now()
            return await self.update(
                flow,
                owner,
                bank_status=bank_status,
                attempts=flow.attempts + 1,
                next_action_at=self.next_look(flow.state, now, attempt=flow.attempts + 1),
                release_lease=True,
                last_error=None,
            )
        # The batch, read before the report: the results, the transfer events (end_flow) and, for a COMPLETED
        # batch, where its employees were paid (accounts.py) all read it; nothing parses the stored text again.
        batch = await self.payloads.batch(flow)
        currency = batch.origin.currency if batch is not None else await self.payloads.currency(flow)
        paid_batch = batch if end == FlowState.COMPLETED else None
        try:
            report = await bank.get_file_payment_report(file_payment_id)
        except BankError as exc:
            return await self.retry_later(flow, owner, exc)
        results = transaction_results(report, batch.transactions) if batch is not None else None
        stored_report = {
            "file_payment_id": file_payment_id,
            "bank_status": bank_status,
            "report_status": report.status,
            "transaction_results": results,
            # The bank's own report is kept as it came only when we could not read its lines.
            "bank_report": None if report.lines else report.body.decode("utf-8", errors="replace"),
        }
        del report
        now = self.now()
        summary = report_summary(results)
        reason = summary if end == FlowState.COMPLETED else (summary or f"the bank reports {bank_status}")
        event = status_event(
            flow, end, now, currency=currency, bank_status=bank_status, reason=reason, transaction_results=results
        )
        consent_id = flow.consent_id

        def work(tx: StoreTx) -> Flow:
            updated = end_flow(
                tx,
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
                batch=batch,
            )
            if consent_id is not None:
                tx.tokens.delete(consent_id)  # the payment exists: the consent's tokens are no longer needed
            if paid_batch is not None:
                remember_paid(tx, paid_batch, results, batch_id=flow.batch_id, now=now)
            return updated

        updated = await self.ctx.store.arun(work)
        log.info("file payment ended", batch_id=flow.batch_id, bank_status=bank_status)
        return updated

    # -- ending -----------------------------------------------------------------------------------------------

    async def _fail(self, flow: Flow, owner: str, reason: str, guard: Guarded[Flow] | None = None) -> Flow:
        """End the flow FAILED (publishing it), recording a refused side effect when there is one."""
        now = self.now()
        currency = await self.payloads.currency(flow)
        event = status_event(flow, FlowState.FAILED, now, currency=currency, reason=reason)

        def work(tx: StoreTx) -> Flow:
            if guard is not None:
                guard.fail(tx, reason)
            return end_flow(
                tx,
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


def _refused(flows: FileFlow, flow: Flow, owner: str, guard: Guarded[Flow]) -> Callable[[Refusal], Awaitable[Flow]]:
    """What ends a flow whose bank call was refused: FAILED, saying which call."""

    async def refuse(error: Refusal) -> Flow:
        if isinstance(error, BankError):
            reason = f"the bank refused {guard.operation.value}: {error}"
        else:
            reason = f"cannot create the payment: {error}"
        return await flows._fail(flow, owner, reason, guard)

    return refuse


async def link_published(ctx: EngineContext, flow: Flow) -> bool:
    """Whether the flow's approval link went out already: a replacement consent (the first one's tokens were lost)
    keeps the deadline and the published link; a batch held as a possible duplicate payroll published its link
    (AUTHORIZATION_REQUIRED) when it was held (one confirmed up front did not)."""
    if flow.authorization_deadline is not None:
        return True
    if flow.duplicate_of is None:
        return False
    published = await ctx.store.arun(lambda tx: tx.outbox.statuses(STATUS_TOPIC, flow.batch_id), write=False)
    return BatchStatus.AUTHORIZATION_REQUIRED.value in published


# -- the authorization hooks of the file kind -------------------------------------------------------------------


class FileAuthorizationHooks(AuthorizationHooks):
    """How processor.engine.authorization sees and moves file flows (registered as `Kind.FILE`)."""

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
            traceparent=flow.traceparent,
            refusal=refusal_of(flow),
            earlier=earlier_links(tx.lifecycle.earlier(flow_id)) if flow.attempt > 1 else (),
            paid_on=flow.execute_on,
        )

    def _awaiting(self, tx: StoreTx, flow_id: str, consent_id: str | None) -> Flow:
        flow = tx.flows.get(flow_id, for_update=True)
        if flow is None or flow.state != FlowState.AWAITING_AUTHORIZATION:
            raise FlowNotAwaitingError(f"file flow {flow_id!r} does not await authorization")
        if consent_id is not None and flow.consent_id != consent_id:
            raise FlowNotAwaitingError(f"file flow {flow_id!r} awaits another consent")
        return flow

    def on_authorized(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """AUTHORIZED, published (with `execute_on` for a scheduled batch), and due for the payment step: now, or
        at the start of its execute_on day in the integration's time zone."""
        flow = self._awaiting(tx, flow_id, consent_id)
        event = status_event(flow, FlowState.AUTHORIZED, now, currency=currency_in_tx(tx, flow))
        due = payment_due_at(self.ctx, flow, now)
        tx.flows.transition(flow, FlowState.AUTHORIZED, now=now, event=event, next_action_at=due, attempts=0)

    def on_rejected(self, tx: StoreTx, flow_id: str, reason: str, *, now: datetime) -> None:
        """REJECTED, published; the flow ends."""
        flow = self._awaiting(tx, flow_id, None)
        event = status_event(flow, FlowState.REJECTED, now, currency=currency_in_tx(tx, flow), reason=reason)
        end_flow(tx, flow, FlowState.REJECTED, now=now, event=event, next_action_at=None, last_error=None)

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
