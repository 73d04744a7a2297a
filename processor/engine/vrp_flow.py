"""The durable VRP engine (flow B): mandates authorised once, payments under them checked, paid and followed.

    engine = VrpEngine(ctx)                                   # ctx: processor.engine.context.EngineContext
    kinds.register("mandate", MandateAuthorizationHooks())    # the approval link and callback (authorization.py)
    outcome = await engine.submit_mandate(request)            # B1 once per mandate_id; AUTHORIZATION_REQUIRED
    ...                                                       # the approver authorises: AUTHORIZED
    outcome = await engine.submit_payment(instruction)        # limits checked, B2 once per payment_id
    payment = await engine.follow_payment(payment_id)         # until COMPLETED or REJECTED
    await engine.run_due()                                    # a worker's tick: every mandate/payment due now

State machines and the statuses they publish: `processor.domain.vrp_states`. Every state change and its
`vrp.status` event (key = mandate id) commit in one transaction. Every resource-creating bank call (B1, B2)
is recorded before it is made (`side_effects.begin`, which fixes its `x-idempotency-key`) and after
(`complete` with the resource id, in the transaction of the state change). A process killed in between
leaves the record PENDING; on resume the same call is repeated with the same key and the same body, and the
bank answers with the resource it already created: one consent per mandate, one VRP per payment.

Authorization-code tokens live encrypted per consent (`tx.tokens`, stored by the callback's code exchange).
Before B2 the access token is refreshed with the refresh grant when it is expired or about to be
(`token_refresh_margin`), and replaced atomically (`tokens.replace`, compare-and-set on its version: when
another instance refreshed first, its tokens are used); a B2 answered `token_expired` refreshes and repeats
once, with the same idempotency key.

The client-side check (`processor.domain.vrp_limits`) runs in the transaction that stores the payment, with the
mandate row locked, against the payments already accepted (SUBMITTED, PENDING, COMPLETED), so two payments
can never both pass a check only one of them fits. A refusal publishes LIMIT_EXCEEDED and no bank call is
made. The bank stays the authority: its `UK.OBIE.Rules.FailsControlParameters` also ends in LIMIT_EXCEEDED,
carrying the bank's message.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from processor.bank import BankClient
from processor.bank import errors as bank_errors
from processor.bank.models import VrpConsent, dumps
from processor.domain.identity import request_content_sha256
from processor.domain.time import iso_ms, utc_ms
from processor.domain.vrp_limits import PastPayment, check_payment
from processor.domain.vrp_requests import (
    CONSENT_CREATED_KEY,
    InvalidRequestError,
    MandateRequest,
    PaymentRequest,
    consent_parts,
    limits_of,
    parse_mandate,
    parse_payment,
    payment_parts,
    status_record,
)
from processor.domain.vrp_states import (
    COUNTED_PAYMENT_STATES,
    MANDATE_STATUS_RANKS,
    Mandate,
    Payment,
    VrpStatus,
    enter_payment,
    mandate_terminal,
    move_mandate,
    move_payment,
    payment_state_of_bank_status,
    payment_terminal,
)
from processor.engine.authorization import MissingTokensError, PendingAuthorization, approval_link, consent_access_token
from processor.engine.banks import UnknownIntegrationError
from processor.engine.context import EngineContext
from processor.store import NotFoundError, Operation, StatusEvent, StoreTx, VersionConflictError, VrpMandate, VrpPayment
from processor.store.values import json_text, load_json
from schemas.topics import VRP_STATUS_TOPIC

if TYPE_CHECKING:
    from processor.engine.assembly import Engine

T = TypeVar("T")
KIND = "mandate"  # the registry kind of the approval links (processor.engine.authorization)
BANK_REJECTED = "Rejected"
BANK_AUTHORISED = "Authorised"

log = structlog.get_logger("processor.engine.vrp")


class MandateStateError(RuntimeError):
    """The mandate is not in the state an authorization callback expects (rolls the callback back)."""


class TokenUnavailableError(RuntimeError):
    """No usable authorization-code token for the consent: none stored, or the refresh grant was refused."""


@dataclass(frozen=True)
class MandateOutcome:
    """What `submit_mandate` did. `created` is False for a duplicate mandate_id (nothing changed);
    `same_document` then says whether the duplicate carried the same request."""

    mandate: VrpMandate
    created: bool
    same_document: bool = True
    authorization_url: str | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class PaymentOutcome:
    """What `submit_payment` did. `payment` is None only for an instruction naming an unknown mandate (an
    INVALID event was published, nothing stored); `reason` explains a refusal."""

    payment: VrpPayment | None
    created: bool
    same_document: bool = True
    reason: str | None = None


# -- store-only steps (also run by the authorization hooks inside the callback's transaction) --------------------


def mandate_request(mandate: VrpMandate) -> MandateRequest:
    """The request a stored mandate was created from."""
    return parse_mandate(load_json(mandate.request))


def payment_request(payment: VrpPayment) -> PaymentRequest:
    """The instruction a stored payment was created from."""
    return parse_payment(load_json(payment.instruction))


def _consent_created(mandate: VrpMandate) -> datetime | None:
    raw = mandate.limits.get(CONSENT_CREATED_KEY) if isinstance(mandate.limits, Mapping) else None
    return None if raw is None else datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


def move_mandate_tx(
    tx: StoreTx,
    mandate: VrpMandate,
    target: Mandate,
    *,
    now: datetime,
    owner: str | None = None,
    authorization_url: str | None = None,
    reason: str | None = None,
    consent_id: str | None = None,
    bank_status: str | None = None,
    limits: Mapping[str, Any] | None = None,
    next_action_at: datetime | None = None,
    replacing: bool = False,
) -> VrpMandate:
    """Move a mandate and append the status the move publishes, in `tx` (`replacing`: see `move_mandate`)."""
    status = move_mandate(mandate.state, target, replacing=replacing)
    consent = consent_id or mandate.consent_id
    event: StatusEvent | None = None
    if status is not None:
        record = status_record(
            mandate_id=mandate.mandate_id,
            status=status.value,
            occurred_at=now,
            consent_id=consent,
            authorization_url=authorization_url,
            bank_status=bank_status,
            reason=reason,
        )
        event = StatusEvent(
            status.value, record, topic=VRP_STATUS_TOPIC, rank=MANDATE_STATUS_RANKS[status], event_id=record["event_id"]
        )
    changes: dict[str, Any] = {
        "consent_id": consent,
        "next_action_at": next_action_at,
        "attempts": 0,
        "last_error": reason,
    }
    if bank_status is not None:
        changes["bank_status"] = bank_status
    if limits is not None:
        changes["limits"] = dict(limits)
    return tx.mandates.transition(mandate, target.value, now=now, owner=owner, event=event, **changes)


def emit_payment_status(
    tx: StoreTx,
    payment: VrpPayment,
    status: VrpStatus,
    *,
    now: datetime,
    consent_id: str | None,
    reason: str | None = None,
) -> None:
    """Append a payment's `vrp.status` event (key = its mandate id; unranked, see vrp_states)."""
    record = status_record(
        mandate_id=payment.mandate_id,
        payment_id=payment.payment_id,
        status=status.value,
        occurred_at=now,
        consent_id=consent_id,
        domestic_vrp_id=payment.domestic_vrp_id,
        amount=payment.amount,
        currency=payment.currency,
        bank_status=payment.bank_status,
        reason=reason,
    )
    tx.outbox.append(VRP_STATUS_TOPIC, payment.mandate_id, record, now=now, event_id=record["event_id"])


def move_payment_tx(
    tx: StoreTx,
    payment: VrpPayment,
    target: Payment,
    status: VrpStatus | None,
    *,
    now: datetime,
    consent_id: str | None,
    owner: str | None = None,
    reason: str | None = None,
    domestic_vrp_id: str | None = None,
    bank_status: str | None = None,
    next_action_at: datetime | None = None,
) -> VrpPayment:
    """Move a payment and append the status the move publishes, in `tx`."""
    move_payment(payment.state, target, status)
    changes: dict[str, Any] = {"next_action_at": next_action_at, "attempts": 0, "last_error": reason}
    if domestic_vrp_id is not None:
        changes["domestic_vrp_id"] = domestic_vrp_id
    if bank_status is not None:
        changes["bank_status"] = bank_status
    updated = tx.vrp_payments.transition(payment, target.value, now=now, owner=owner, **changes)
    if status is not None:
        emit_payment_status(tx, updated, status, now=now, consent_id=consent_id, reason=reason)
    return updated


def place_payment(
    tx: StoreTx, mandate: VrpMandate, payment: PaymentRequest, now: datetime
) -> tuple[Payment, VrpStatus | None, str | None]:
    """Where a payment goes given its (locked) mandate: SUBMITTED when it fits the mandate, REFUSED with the
    breaches, REJECTED under an ended mandate, RECEIVED (parked) while the mandate awaits authorization."""
    if mandate.state == Mandate.AUTHORIZED:
        view = limits_of(mandate_request(mandate), _consent_created(mandate), mandate.created_at)
        accepted = tx.vrp_payments.for_mandate(mandate.mandate_id, states=[s.value for s in COUNTED_PAYMENT_STATES])
        history = [PastPayment(p.amount, p.created_at) for p in accepted if p.payment_id != payment.payment_id]
        breaches = check_payment(view, payment.amount, payment.currency, now, history)
        if breaches:
            return Payment.REFUSED, VrpStatus.LIMIT_EXCEEDED, "; ".join(f"{b.field}: {b.message}" for b in breaches)
        return Payment.SUBMITTED, None, None
    if mandate_terminal(mandate.state):
        return Payment.REJECTED, VrpStatus.PAYMENT_REJECTED, f"mandate {mandate.mandate_id} is {mandate.state}"
    return Payment.RECEIVED, None, None


def settle_parked_payments(tx: StoreTx, mandate: VrpMandate, *, now: datetime) -> int:
    """After a mandate moved: wake its parked payments (AUTHORIZED) or reject them (ended). Returns how many.

    A payment changed concurrently is left alone; its own next step reads the mandate again.
    """
    moved = 0
    for parked in tx.vrp_payments.for_mandate(mandate.mandate_id, states=[Payment.RECEIVED.value]):
        try:
            if mandate.state == Mandate.AUTHORIZED:
                tx.vrp_payments.update(parked.payment_id, expected_version=parked.version, now=now, next_action_at=now)
            elif mandate_terminal(mandate.state):
                move_payment_tx(
                    tx,
                    parked,
                    Payment.REJECTED,
                    VrpStatus.PAYMENT_REJECTED,
                    now=now,
                    consent_id=mandate.consent_id,
                    reason=f"mandate {mandate.mandate_id} is {mandate.state}",
                )
            moved += 1
        except VersionConflictError:
            continue
    return moved


class MandateAuthorizationHooks:
    """The "mandate" kind of the authorization registry (`processor.engine.authorization.FlowKinds`).

    The approval link of a mandate works while it is AWAITING_AUTHORIZATION with a consent and before its
    authorization deadline; the callback's outcome moves it to AUTHORIZED (tokens stored in the same
    transaction by the caller) or REJECTED, publishing the status.
    """

    def consent_for(self, tx: StoreTx, flow_id: str) -> PendingAuthorization | None:
        """The mandate's integration, consent, approval token, deadline, and whether it awaits its approver."""
        mandate = tx.mandates.get(flow_id)
        if mandate is None:
            return None
        return PendingAuthorization(
            integration=mandate.integration,
            consent_id=mandate.consent_id,
            approval_token=mandate.approval_token,
            deadline=mandate.authorization_deadline,
            awaiting=mandate.state == Mandate.AWAITING_AUTHORIZATION and mandate.consent_id is not None,
            state=mandate.state,
        )

    def on_authorized(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """AUTHORIZED (publishing it) and its parked payments made due."""
        mandate = self._awaiting(tx, flow_id, consent_id)
        moved = move_mandate_tx(tx, mandate, Mandate.AUTHORIZED, now=now, bank_status=BANK_AUTHORISED)
        settle_parked_payments(tx, moved, now=now)
        log.info("mandate authorised", mandate_id=flow_id, consent_id=consent_id)

    def on_rejected(self, tx: StoreTx, flow_id: str, reason: str, *, now: datetime) -> None:
        """REJECTED (publishing it with the reason); its parked payments are rejected too."""
        mandate = self._awaiting(tx, flow_id, None)
        moved = move_mandate_tx(tx, mandate, Mandate.REJECTED, now=now, reason=reason)
        settle_parked_payments(tx, moved, now=now)
        log.info("mandate rejected", mandate_id=flow_id, consent_id=mandate.consent_id, reason=reason)

    def on_stranded(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """Back to RECEIVED for a new consent (a new idempotency key; the old record is kept under
        `{mandate_id}/replaced/{consent_id}`), due now. Nothing is published: the approval link stays the same."""
        mandate = self._awaiting(tx, flow_id, consent_id)
        tx.side_effects.retire(mandate.mandate_id, (Operation.CREATE_VRP_CONSENT,), resource_id=consent_id)
        move_mandate(mandate.state, Mandate.RECEIVED)
        tx.mandates.transition(
            mandate,
            Mandate.RECEIVED.value,
            now=now,
            consent_id=None,
            next_action_at=now,
            attempts=0,
            last_error=f"consent {consent_id} is authorised at the bank but its tokens were lost; replacing it",
        )
        log.warning("mandate consent replaced: its tokens were lost", mandate_id=flow_id, consent_id=consent_id)

    @staticmethod
    def _awaiting(tx: StoreTx, flow_id: str, consent_id: str | None) -> VrpMandate:
        mandate = tx.mandates.require(flow_id, for_update=True)
        if mandate.state != Mandate.AWAITING_AUTHORIZATION:
            raise MandateStateError(f"mandate {flow_id} is {mandate.state}, not awaiting authorization")
        if consent_id is not None and mandate.consent_id != consent_id:
            raise MandateStateError(f"mandate {flow_id} awaits consent {mandate.consent_id}, not {consent_id}")
        return mandate


# -- the engine -------------------------------------------------------------------------------------------------


def _semantic(error: bank_errors.BankError) -> bool:
    """A refusal that repeating cannot change: a 4xx other than 429."""
    return (
        isinstance(error, bank_errors.BankHTTPError)
        and 400 <= error.status < 500
        and not isinstance(error, bank_errors.RateLimited)
    )


def _token_refused(error: bank_errors.BankError) -> bool:
    """The bank refused the access token itself (expired, or 401 on `Authorization`)."""
    if isinstance(error, bank_errors.TokenExpired):
        return True
    return (
        isinstance(error, bank_errors.HeaderInvalid)
        and error.status in (401, 403)
        and any(e.path == "Authorization" for e in error.errors)
    )


def _describe(error: bank_errors.BankError) -> str:
    if isinstance(error, bank_errors.BankHTTPError):
        code = f" {error.code}" if error.code else ""
        return f"HTTP {error.status}{code}: {error.message}"
    return f"{type(error).__name__}: {error.message}"


def _body_digest(*parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(b"\n".join(dumps(dict(p)) for p in parts)).hexdigest()


class VrpEngine:
    """Flow B over the durable store. Safe to run on many instances at once (leases and compare-and-set)."""

    def __init__(
        self,
        ctx: EngineContext,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        owner: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.owner = owner or f"vrp-{uuid.uuid4().hex[:12]}"
        self._sleep = sleep

    # -- helpers ------------------------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The engine's clock, in store precision."""
        return utc_ms(self.ctx.clock.now())

    async def _run(self, work: Callable[[StoreTx], T], *, write: bool = True) -> T:
        return await self.ctx.store.arun(work, write=write)

    def approval_url(self, mandate: VrpMandate) -> str:
        """The mandate's stable approval link (published as `authorization_url`)."""
        return approval_link(self.ctx.public_url, KIND, mandate.mandate_id, mandate.approval_token)

    async def mandate(self, mandate_id: str) -> VrpMandate:
        """A mandate as stored; `NotFoundError` when unknown."""
        return await self._run(lambda tx: tx.mandates.require(mandate_id), write=False)

    async def payment(self, payment_id: str) -> VrpPayment:
        """A payment as stored; `NotFoundError` when unknown."""
        return await self._run(lambda tx: tx.vrp_payments.require(payment_id), write=False)

    async def payments_of(self, mandate_id: str) -> list[VrpPayment]:
        """A mandate's payments, oldest first."""
        return await self._run(lambda tx: tx.vrp_payments.for_mandate(mandate_id), write=False)

    def retry_at(self, now: datetime, attempts: int) -> datetime:
        return now + timedelta(seconds=self.settings.retry_delay(attempts))

    # -- mandates -----------------------------------------------------------------------------------------------

    async def submit_mandate(self, request: Mapping[str, Any], *, advance: bool = True) -> MandateOutcome:
        """Take a mandate request: stored once per mandate_id (a duplicate changes nothing), then B1.

        An invalid request with a readable mandate_id is stored as INVALID and publishes INVALID; without one,
        `InvalidRequestError` is raised for the caller to dead-letter. With `advance=False` (a Kafka consumer,
        which must never wait on the bank) only the store is written; the stored mandate is due at once and a
        worker takes B1.
        """
        now = self.now()
        try:
            req = parse_mandate(request)
            integration = self.ctx.banks.integration(req.integration)
        except InvalidRequestError as exc:
            return await self._invalid_mandate(request, exc.mandate_id, list(exc.problems), now)
        except UnknownIntegrationError:
            problem = f"integration: {req.integration!r} is not configured"
            return await self._invalid_mandate(request, req.mandate_id, [problem], now)
        parts = consent_parts(req, integration.tpp_name)
        deadline = now + timedelta(seconds=self.settings.authorization_deadline)

        def store(tx: StoreTx) -> Any:
            return tx.mandates.create(
                req.mandate_id,
                req.integration,
                req.document(),
                limits=parts.control_parameters,
                now=now,
                currency=req.currency,
                valid_from=req.valid_from,
                valid_to=req.valid_to,
                authorization_deadline=deadline,
                next_action_at=now,
                content_sha256=request_content_sha256(req.document()),  # requested_at/source do not count
            )

        created = await self._run(store)
        if not created.created:
            log.info(
                "duplicate mandate request ignored",
                mandate_id=req.mandate_id,
                same_document=created.same_document,
                state=created.row.state,
            )
            mandate: VrpMandate = created.row
            return MandateOutcome(mandate, False, created.same_document, self._link_if_awaiting(mandate))
        log.info("mandate received", mandate_id=req.mandate_id, integration=req.integration)
        if not advance:
            return MandateOutcome(created.row, True, True, None)
        mandate = await self.advance_mandate(req.mandate_id)
        return MandateOutcome(mandate, True, True, self._link_if_awaiting(mandate))

    def _link_if_awaiting(self, mandate: VrpMandate) -> str | None:
        return self.approval_url(mandate) if mandate.state == Mandate.AWAITING_AUTHORIZATION else None

    async def _invalid_mandate(
        self, request: Mapping[str, Any], mandate_id: str | None, problems: list[str], now: datetime
    ) -> MandateOutcome:
        if not mandate_id:
            raise InvalidRequestError(problems)
        try:
            document: Any = json_text(request) if isinstance(request, Mapping) else {"request": repr(request)}
        except (TypeError, ValueError):
            document = {"unreadable_request": repr(request)[:2000]}
        integration = request.get("integration") if isinstance(request, Mapping) else None
        reason = "; ".join(problems)

        def store(tx: StoreTx) -> tuple[VrpMandate, bool, bool]:
            created = tx.mandates.create(
                mandate_id,
                str(integration or ""),
                document,
                limits={},
                now=now,
                state=Mandate.INVALID.value,
            )
            if created.created:
                record = status_record(
                    mandate_id=mandate_id, status=VrpStatus.INVALID.value, occurred_at=now, reason=reason
                )
                tx.outbox.append_status(
                    VRP_STATUS_TOPIC,
                    mandate_id,
                    VrpStatus.INVALID.value,
                    record,
                    now=now,
                    rank=MANDATE_STATUS_RANKS[VrpStatus.INVALID],
                    event_id=record["event_id"],
                )
                tx.mandates.update(mandate_id, expected_version=created.row.version, now=now, last_error=reason[:2000])
            return tx.mandates.require(mandate_id), created.created, created.same_document

        mandate, created, same = await self._run(store)
        log.warning("invalid mandate request", mandate_id=mandate_id, problems=problems, created=created)
        return MandateOutcome(mandate, created, same, None, tuple(problems))

    async def advance_mandate(self, mandate_id: str) -> VrpMandate:
        """Take the mandate's next step if it is due (B1, or checking on its authorization); the mandate after.

        When another instance holds the mandate's lease, or nothing is due, it is returned as stored.
        """
        work = MandateWork(self)
        leased = await work.acquire(mandate_id, owner=self.owner)
        if leased is None:
            return await self.mandate(mandate_id)
        result: VrpMandate = await work.run(leased, owner=self.owner)
        return result

    async def step_mandate(self, mandate: VrpMandate, owner: str) -> VrpMandate:
        try:
            if mandate.state == Mandate.RECEIVED:
                return await self._create_consent(mandate, owner)
            if mandate.state == Mandate.AWAITING_AUTHORIZATION:
                return await self._watch_authorization(mandate, owner)
            return mandate
        except VersionConflictError:
            # Moved meanwhile (e.g. the callback authorised it): its new state decides what comes next.
            return await self.mandate(mandate.mandate_id)

    async def _create_consent(self, mandate: VrpMandate, owner: str) -> VrpMandate:
        """B1, recorded before and after; a lost answer is resolved by repeating it with the same key."""
        mandate_id = mandate.mandate_id
        req = mandate_request(mandate)
        integration = self.ctx.banks.integration(mandate.integration)
        parts = consent_parts(req, integration.tpp_name)
        digest = _body_digest(parts.control_parameters, parts.initiation, parts.remittance_information)
        now = self.now()
        effect = await self._run(
            lambda tx: tx.side_effects.begin(mandate_id, Operation.CREATE_VRP_CONSENT, now=now, request_sha256=digest)
        )
        if effect.resumed:
            log.info(
                "resuming a consent creation whose outcome is unknown; repeating it with the same key",
                mandate_id=mandate_id,
                idempotency_key=effect.idempotency_key,
            )
        consent: VrpConsent
        try:
            bank = await self.ctx.banks.get(mandate.integration)
            if effect.done and effect.resource_id:
                consent = await bank.get_vrp_consent(effect.resource_id)
            else:
                self.ctx.checkpoint("create_vrp_consent:before", mandate_id)
                consent = await bank.create_vrp_consent(
                    control_parameters=parts.control_parameters,
                    initiation=parts.initiation,
                    remittance_information=parts.remittance_information,
                    idempotency_key=effect.idempotency_key,
                )
        except bank_errors.BankError as error:
            return await self._consent_failed(mandate, error, owner)
        self.ctx.checkpoint("create_vrp_consent:after", mandate_id)
        now = self.now()
        deadline = mandate.authorization_deadline
        first_check = now + timedelta(seconds=self.settings.poll_max)
        limits = {**parts.control_parameters, CONSENT_CREATED_KEY: iso_ms(consent.creation_date_time)}
        # A consent was created before (and its AUTHORIZATION_REQUIRED published): this one replaces it.
        replacing = _consent_created(mandate) is not None

        def record(tx: StoreTx) -> VrpMandate:
            tx.side_effects.complete(mandate_id, Operation.CREATE_VRP_CONSENT, consent.consent_id, now=now)
            return move_mandate_tx(
                tx,
                mandate,
                Mandate.AWAITING_AUTHORIZATION,
                now=now,
                owner=owner,
                authorization_url=self.approval_url(mandate),
                consent_id=consent.consent_id,
                bank_status=consent.status,
                limits=limits,
                next_action_at=first_check if deadline is None else min(first_check, deadline),
                replacing=replacing,
            )

        moved = await self._run(record)
        log.info("VRP consent created; authorization required", mandate_id=mandate_id, consent_id=consent.consent_id)
        return moved

    async def _consent_failed(self, mandate: VrpMandate, error: bank_errors.BankError, owner: str) -> VrpMandate:
        now = self.now()
        reason = _describe(error)
        if _semantic(error):

            def refuse(tx: StoreTx) -> VrpMandate:
                tx.side_effects.fail(mandate.mandate_id, Operation.CREATE_VRP_CONSENT, reason, now=now)
                return move_mandate_tx(
                    tx,
                    mandate,
                    Mandate.INVALID,
                    now=now,
                    owner=owner,
                    reason=f"the bank refused the consent: {reason}",
                )

            log.warning("VRP consent refused by the bank", mandate_id=mandate.mandate_id, reason=reason)
            return await self._run(refuse)

        def reschedule(tx: StoreTx) -> VrpMandate:
            if tx.side_effects.get(mandate.mandate_id, Operation.CREATE_VRP_CONSENT) is not None:
                tx.side_effects.mark_ambiguous(mandate.mandate_id, Operation.CREATE_VRP_CONSENT, reason, now=now)
            return tx.mandates.update(
                mandate.mandate_id,
                expected_version=mandate.version,
                now=now,
                owner=owner,
                attempts=mandate.attempts + 1,
                last_error=reason,
                next_action_at=self.retry_at(now, mandate.attempts),
            )

        log.warning(
            "VRP consent creation did not complete; will repeat it with the same key",
            mandate_id=mandate.mandate_id,
            error=reason,
            ambiguous=error.ambiguous,
        )
        return await self._run(reschedule)

    async def _watch_authorization(self, mandate: VrpMandate, owner: str) -> VrpMandate:
        """While awaiting the approver: read the consent (B3); Rejected at the bank ends the mandate, and so
        does the authorization deadline (EXPIRED)."""
        assert mandate.consent_id is not None
        now = self.now()
        consent: VrpConsent | None = None
        try:
            bank = await self.ctx.banks.get(mandate.integration)
            consent = await bank.get_vrp_consent(mandate.consent_id)
        except bank_errors.BankError as error:
            log.warning("could not read the VRP consent", mandate_id=mandate.mandate_id, error=_describe(error))
        deadline = mandate.authorization_deadline
        bank_status = None if consent is None else consent.status
        if bank_status == BANK_REJECTED or (deadline is not None and now >= deadline):
            if bank_status == BANK_REJECTED:
                target, reason = Mandate.REJECTED, "the consent is Rejected at the bank"
            else:
                assert deadline is not None
                target, reason = Mandate.EXPIRED, f"not authorised before the deadline {iso_ms(deadline)}"

            def end(tx: StoreTx) -> VrpMandate:
                moved = move_mandate_tx(
                    tx, mandate, target, now=now, owner=owner, reason=reason, bank_status=bank_status
                )
                settle_parked_payments(tx, moved, now=now)
                return moved

            log.info("mandate ended while awaiting authorization", mandate_id=mandate.mandate_id, state=target.value)
            return await self._run(end)
        later = now + timedelta(seconds=self.settings.poll_max)
        return await self._run(
            lambda tx: tx.mandates.update(
                mandate.mandate_id,
                expected_version=mandate.version,
                now=now,
                owner=owner,
                bank_status=bank_status or mandate.bank_status,
                next_action_at=later if deadline is None else min(later, deadline),
            )
        )

    async def wait_for_mandate(
        self, mandate_id: str, *, max_seconds: float | None = None, interval: float = 0.5
    ) -> VrpMandate:
        """Wait until the mandate is AUTHORIZED or ended (taking its due steps meanwhile); the mandate then, or
        as it stands when `max_seconds` (of the engine's clock) have passed."""
        started = self.now()
        while True:
            mandate = await self.advance_mandate(mandate_id)
            if mandate.state == Mandate.AUTHORIZED or mandate_terminal(mandate.state):
                return mandate
            if max_seconds is not None and (self.now() - started).total_seconds() >= max_seconds:
                return mandate
            await self._sleep(interval)

    # -- payments -----------------------------------------------------------------------------------------------

    async def submit_payment(self, request: Mapping[str, Any], *, advance: bool = True) -> PaymentOutcome:
        """Take a payment instruction: stored once per payment_id (a duplicate changes nothing), checked against
        its mandate in the same transaction, then paid (B2) when it fits. With `advance=False` only the store is
        written (B2 is then due work for a worker)."""
        now = self.now()
        try:
            req = parse_payment(request)
        except InvalidRequestError as exc:
            return await self._invalid_payment(request, exc, now)
        digest = request_content_sha256(req.document())  # a rerun differs only in requested_at

        def place(tx: StoreTx) -> PaymentOutcome:
            mandate = tx.mandates.get(req.mandate_id, for_update=True)  # serialises the checks of one mandate
            existing = tx.vrp_payments.get(req.payment_id)
            if existing is not None:
                return PaymentOutcome(existing, False, existing.request_sha256 == digest)
            if mandate is None:
                unknown = f"mandate {req.mandate_id} is unknown"
                record = status_record(
                    mandate_id=req.mandate_id,
                    payment_id=req.payment_id,
                    status=VrpStatus.INVALID.value,
                    occurred_at=now,
                    amount=req.amount,
                    currency=req.currency,
                    reason=unknown,
                )
                tx.outbox.append(VRP_STATUS_TOPIC, req.mandate_id, record, now=now, event_id=record["event_id"])
                return PaymentOutcome(None, False, True, unknown)
            target, status, reason = place_payment(tx, mandate, req, now)
            enter_payment(target, status)
            due: datetime | None = None
            if target is Payment.SUBMITTED:
                due = now
            elif target is Payment.RECEIVED:
                due = now + timedelta(seconds=self.settings.poll_max)
            created = tx.vrp_payments.create(
                req.payment_id,
                req.mandate_id,
                amount=req.amount,
                currency=req.currency,
                instruction=req.document(),
                now=now,
                state=target.value,
                next_action_at=due,
                content_sha256=digest,
            )
            if not created.created:
                return PaymentOutcome(created.row, False, created.same_document)
            payment = created.row
            if reason is not None:
                payment = tx.vrp_payments.update(
                    payment.payment_id, expected_version=payment.version, now=now, last_error=reason
                )
            if status is not None:
                emit_payment_status(tx, payment, status, now=now, consent_id=mandate.consent_id, reason=reason)
            return PaymentOutcome(payment, True, True, reason)

        outcome = await self._run(place)
        if outcome.payment is None:
            log.warning("payment for an unknown mandate", payment_id=req.payment_id, mandate_id=req.mandate_id)
            return outcome
        if not outcome.created:
            log.info(
                "duplicate payment instruction ignored",
                payment_id=req.payment_id,
                same_document=outcome.same_document,
                state=outcome.payment.state,
            )
            return outcome
        log.info(
            "payment received",
            payment_id=req.payment_id,
            mandate_id=req.mandate_id,
            state=outcome.payment.state,
            reason=outcome.reason,
        )
        if advance and outcome.payment.state == Payment.SUBMITTED:
            return PaymentOutcome(await self.advance_payment(req.payment_id), True, True, None)
        return outcome

    async def _invalid_payment(
        self, request: Mapping[str, Any], exc: InvalidRequestError, now: datetime
    ) -> PaymentOutcome:
        if not exc.payment_id or not exc.mandate_id:
            raise exc
        payment_id, mandate_id = exc.payment_id, exc.mandate_id
        reason = "; ".join(exc.problems)
        raw_currency = request.get("currency") if isinstance(request, Mapping) else None
        currency = raw_currency if isinstance(raw_currency, str) and len(raw_currency) <= 3 else None
        try:
            document: Any = json_text(request) if isinstance(request, Mapping) else {"request": repr(request)}
        except (TypeError, ValueError):
            document = {"unreadable_request": repr(request)[:2000]}

        def store(tx: StoreTx) -> PaymentOutcome:
            mandate = tx.mandates.get(mandate_id, for_update=True)
            existing = tx.vrp_payments.get(payment_id)
            if existing is not None:
                return PaymentOutcome(existing, False, False, reason)
            if mandate is None:
                record = status_record(
                    mandate_id=mandate_id,
                    payment_id=payment_id,
                    status=VrpStatus.INVALID.value,
                    occurred_at=now,
                    reason=f"{reason}; mandate {mandate_id} is unknown",
                )
                tx.outbox.append(VRP_STATUS_TOPIC, mandate_id, record, now=now, event_id=record["event_id"])
                return PaymentOutcome(None, False, True, reason)
            enter_payment(Payment.INVALID, VrpStatus.INVALID)
            created = tx.vrp_payments.create(
                payment_id,
                mandate_id,
                amount=Decimal("0.00"),
                currency=currency or mandate.currency or "XXX",
                instruction=document,
                now=now,
                state=Payment.INVALID.value,
            )
            if not created.created:
                return PaymentOutcome(created.row, False, created.same_document, reason)
            payment = tx.vrp_payments.update(
                payment_id, expected_version=created.row.version, now=now, last_error=reason[:2000]
            )
            emit_payment_status(tx, payment, VrpStatus.INVALID, now=now, consent_id=mandate.consent_id, reason=reason)
            return PaymentOutcome(payment, created.created, True, reason)

        log.warning("invalid payment instruction", payment_id=payment_id, mandate_id=mandate_id, problems=exc.problems)
        return await self._run(store)

    async def advance_payment(self, payment_id: str) -> VrpPayment:
        """Take the payment's next steps if it is due (check a parked payment, B2, read its status)."""
        work = VrpPaymentWork(self)
        leased = await work.acquire(payment_id, owner=self.owner)
        if leased is None:
            return await self.payment(payment_id)
        result: VrpPayment = await work.run(leased, owner=self.owner)
        return result

    async def step_payment(self, payment: VrpPayment, owner: str) -> VrpPayment:
        try:
            if payment.state == Payment.RECEIVED:
                payment = await self._recheck_parked(payment, owner)
            if payment.state == Payment.SUBMITTED:
                payment = await self._create_vrp(payment, owner)
            due = payment.next_action_at
            if payment.state == Payment.PENDING and due is not None and due <= self.now():
                payment = await self._read_vrp(payment, owner)
            return payment
        except VersionConflictError:
            return await self.payment(payment.payment_id)

    async def _recheck_parked(self, payment: VrpPayment, owner: str) -> VrpPayment:
        now = self.now()

        def recheck(tx: StoreTx) -> VrpPayment:
            mandate = tx.mandates.require(payment.mandate_id, for_update=True)
            current = tx.vrp_payments.require(payment.payment_id)
            if current.state != Payment.RECEIVED:
                return current
            target, status, reason = place_payment(tx, mandate, payment_request(current), now)
            if target is Payment.RECEIVED:
                return tx.vrp_payments.update(
                    current.payment_id,
                    expected_version=current.version,
                    now=now,
                    owner=owner,
                    next_action_at=now + timedelta(seconds=self.settings.poll_max),
                )
            return move_payment_tx(
                tx,
                current,
                target,
                status,
                now=now,
                owner=owner,
                consent_id=mandate.consent_id,
                reason=reason,
                next_action_at=now if target is Payment.SUBMITTED else None,
            )

        return await self._run(recheck)

    async def _create_vrp(self, payment: VrpPayment, owner: str) -> VrpPayment:
        """B2 with the consent's auth-code token (refreshed when due), recorded before and after."""
        payment_id = payment.payment_id
        mandate = await self.mandate(payment.mandate_id)
        consent_id = mandate.consent_id
        assert consent_id is not None, "a SUBMITTED payment's mandate was authorised, so it has a consent"
        integration = self.ctx.banks.integration(mandate.integration)
        parts = payment_parts(payment_request(payment), mandate_request(mandate), integration.tpp_name)
        digest = _body_digest(parts.initiation, parts.instruction)
        now = self.now()

        def begin(tx: StoreTx) -> tuple[Any, VrpPayment]:
            effect = tx.side_effects.begin(payment_id, Operation.CREATE_VRP, now=now, request_sha256=digest)
            current = tx.vrp_payments.require(payment_id)
            if current.idempotency_key != effect.idempotency_key:
                current = tx.vrp_payments.update(
                    payment_id,
                    expected_version=current.version,
                    now=now,
                    owner=owner,
                    idempotency_key=effect.idempotency_key,
                )
            return effect, current

        effect, payment = await self._run(begin)
        if effect.resumed:
            log.info(
                "resuming a VRP whose creation outcome is unknown; repeating it with the same key",
                payment_id=payment_id,
                idempotency_key=effect.idempotency_key,
            )
        try:
            bank = await self.ctx.banks.get(mandate.integration)
            if effect.done and effect.resource_id:
                vrp = await bank.get_domestic_vrp(effect.resource_id)
            else:

                async def create(token: str) -> Any:
                    return await bank.create_domestic_vrp(
                        consent_id=consent_id,
                        initiation=parts.initiation,
                        instruction=parts.instruction,
                        access_token=token,
                        idempotency_key=effect.idempotency_key,
                    )

                token = await self.access_token(bank, consent_id)
                self.ctx.checkpoint("create_vrp:before", payment_id)
                try:
                    vrp = await create(token)
                except bank_errors.BankError as error:
                    if not _token_refused(error):
                        raise
                    # Our clock said the token was fine, the bank's says not: refresh, then the same call again.
                    log.info(
                        "access token refused by the bank; refreshing", payment_id=payment_id, consent_id=consent_id
                    )
                    vrp = await create(await self.access_token(bank, consent_id, force=True))
        except TokenUnavailableError as error:
            return await self._payment_refused(
                payment, mandate, Payment.FAILED, VrpStatus.PAYMENT_REJECTED, str(error), owner
            )
        except bank_errors.BankError as error:
            if _semantic(error):
                limit = isinstance(error, bank_errors.FailsControlParameters)
                where = ""
                if isinstance(error, bank_errors.BankHTTPError) and error.errors and error.errors[0].path:
                    where = f" ({error.errors[0].path})"
                reason = f"the bank refused the payment: {_describe(error)}{where}"
                status = VrpStatus.LIMIT_EXCEEDED if limit else VrpStatus.PAYMENT_REJECTED
                return await self._payment_refused(payment, mandate, Payment.REJECTED, status, reason, owner)
            return await self._payment_retry_later(payment, error, owner)
        self.ctx.checkpoint("create_vrp:after", payment_id)
        now = self.now()
        target = payment_state_of_bank_status(vrp.status)
        status = {
            Payment.PENDING: VrpStatus.PAYMENT_PENDING,
            Payment.COMPLETED: VrpStatus.PAYMENT_COMPLETED,
            Payment.REJECTED: VrpStatus.PAYMENT_REJECTED,
        }[target]

        def record(tx: StoreTx) -> VrpPayment:
            tx.side_effects.complete(payment_id, Operation.CREATE_VRP, vrp.domestic_vrp_id, now=now)
            return move_payment_tx(
                tx,
                payment,
                target,
                status,
                now=now,
                owner=owner,
                consent_id=consent_id,
                domestic_vrp_id=vrp.domestic_vrp_id,
                bank_status=vrp.status,
                reason=f"the bank reports the payment {vrp.status}" if target is Payment.REJECTED else None,
                next_action_at=now if target is Payment.PENDING else None,
            )

        moved = await self._run(record)
        log.info(
            "domestic VRP created",
            payment_id=payment_id,
            domestic_vrp_id=vrp.domestic_vrp_id,
            bank_status=vrp.status,
        )
        return moved

    async def _payment_refused(
        self, payment: VrpPayment, mandate: VrpMandate, target: Payment, status: VrpStatus, reason: str, owner: str
    ) -> VrpPayment:
        now = self.now()

        def refuse(tx: StoreTx) -> VrpPayment:
            tx.side_effects.fail(payment.payment_id, Operation.CREATE_VRP, reason, now=now)
            return move_payment_tx(
                tx,
                payment,
                target,
                status,
                now=now,
                owner=owner,
                consent_id=mandate.consent_id,
                reason=reason,
            )

        log.warning("VRP payment refused", payment_id=payment.payment_id, status=status.value, reason=reason)
        return await self._run(refuse)

    async def _payment_retry_later(self, payment: VrpPayment, error: bank_errors.BankError, owner: str) -> VrpPayment:
        now = self.now()
        reason = _describe(error)

        def reschedule(tx: StoreTx) -> VrpPayment:
            tx.side_effects.mark_ambiguous(payment.payment_id, Operation.CREATE_VRP, reason, now=now)
            return tx.vrp_payments.update(
                payment.payment_id,
                expected_version=payment.version,
                now=now,
                owner=owner,
                attempts=payment.attempts + 1,
                last_error=reason,
                next_action_at=self.retry_at(now, payment.attempts),
            )

        log.warning(
            "VRP creation did not complete; will repeat it with the same key",
            payment_id=payment.payment_id,
            error=reason,
            ambiguous=error.ambiguous,
        )
        return await self._run(reschedule)

    async def _read_vrp(self, payment: VrpPayment, owner: str) -> VrpPayment:
        """Read the domestic VRP; COMPLETED or REJECTED when the bank says so, else read again later."""
        assert payment.domestic_vrp_id is not None
        mandate = await self.mandate(payment.mandate_id)
        now = self.now()
        try:
            bank = await self.ctx.banks.get(mandate.integration)
            vrp = await bank.get_domestic_vrp(payment.domestic_vrp_id)
        except bank_errors.BankError as error:
            reason = _describe(error)
            log.warning("could not read the domestic VRP", payment_id=payment.payment_id, error=reason)
            return await self._run(
                lambda tx: tx.vrp_payments.update(
                    payment.payment_id,
                    expected_version=payment.version,
                    now=now,
                    owner=owner,
                    attempts=payment.attempts + 1,
                    last_error=reason,
                    next_action_at=self.retry_at(now, payment.attempts),
                )
            )
        target = payment_state_of_bank_status(vrp.status)
        if target is Payment.PENDING:
            wait = timedelta(seconds=self.settings.poll_delay(payment.attempts))
            return await self._run(
                lambda tx: tx.vrp_payments.update(
                    payment.payment_id,
                    expected_version=payment.version,
                    now=now,
                    owner=owner,
                    attempts=payment.attempts + 1,
                    bank_status=vrp.status,
                    next_action_at=now + wait,
                )
            )
        status = VrpStatus.PAYMENT_COMPLETED if target is Payment.COMPLETED else VrpStatus.PAYMENT_REJECTED
        moved = await self._run(
            lambda tx: move_payment_tx(
                tx,
                payment,
                target,
                status,
                now=now,
                owner=owner,
                consent_id=mandate.consent_id,
                bank_status=vrp.status,
                reason=f"the bank reports the payment {vrp.status}" if target is Payment.REJECTED else None,
            )
        )
        log.info("VRP payment ended", payment_id=payment.payment_id, state=target.value, bank_status=vrp.status)
        return moved

    async def follow_payment(self, payment_id: str, *, max_seconds: float | None = None) -> VrpPayment:
        """Take the payment's steps as they come due until it ends; the payment then, or as it stands when
        `max_seconds` (of the engine's clock) have passed."""
        started = self.now()
        while True:
            payment = await self.advance_payment(payment_id)
            if payment_terminal(payment.state):
                return payment
            now = self.now()
            if max_seconds is not None and (now - started).total_seconds() >= max_seconds:
                return payment
            wait = self.settings.idle_interval
            if payment.next_action_at is not None:
                wait = max(0.0, (payment.next_action_at - now).total_seconds())
            if payment.lease_owner not in (None, self.owner) and payment.lease_expires_at is not None:
                wait = max(wait, min(1.0, (payment.lease_expires_at - now).total_seconds()))
            await self._sleep(min(max(wait, 0.0), self.settings.poll_max))

    # -- tokens -------------------------------------------------------------------------------------------------

    async def access_token(self, bank: BankClient, consent_id: str, *, force: bool = False) -> str:
        """The consent's access token, refreshed first when expired or within the integration's
        `token_refresh_margin` (or `force`: the bank refused it). Shared with flow A:
        `processor.engine.authorization.consent_access_token` replaces the stored tokens atomically, and uses the
        winner's when another instance refreshed first. No token, or a refused refresh grant, raises
        `TokenUnavailableError`; a transient failure of the refresh raises the bank's error (retried later)."""
        try:
            token = await consent_access_token(
                self.ctx.store,
                bank,
                consent_id,
                clock=self.ctx.clock,
                margin=float(bank.integration.token_refresh_margin),
                force_refresh=force,
            )
        except MissingTokensError as error:
            raise TokenUnavailableError(str(error)) from error
        except bank_errors.OAuthError as error:
            raise TokenUnavailableError(
                f"the refresh grant for consent {consent_id} was refused ({_describe(error)}); "
                "the mandate must be authorised again"
            ) from error
        return token

    # -- the worker's tick ----------------------------------------------------------------------------------

    async def run_due(self, *, limit: int = 50) -> int:
        """Claim the mandates and payments due now (up to `limit` of each) and take their steps, at most
        `concurrency` at once; returns how many were worked on. (A `processor.engine.worker.Worker` given
        `MandateWork(engine)` and `VrpPaymentWork(engine)` does the same continuously.)"""
        gate = asyncio.Semaphore(self.settings.concurrency)
        total = 0
        sources: tuple[_VrpWork, ...] = (MandateWork(self), VrpPaymentWork(self))
        for source in sources:
            items = await source.claim(owner=self.owner, limit=limit)
            total += len(items)

            async def one(item: Any, source: _VrpWork = source) -> None:
                async with gate:
                    await source.run(item, owner=self.owner)

            await asyncio.gather(*(one(item) for item in items))
        return total


class _VrpWork:
    """Shared lease plumbing of the two VRP work sources (`processor.engine.worker.WorkSource`)."""

    kind = ""
    log_field = ""
    states: tuple[str, ...] = ()

    def __init__(self, engine: VrpEngine) -> None:
        self.engine = engine

    def _repo(self, tx: StoreTx) -> Any:
        raise NotImplementedError

    async def _step(self, item: Any, owner: str) -> Any:
        raise NotImplementedError

    async def claim(self, *, owner: str, limit: int) -> list[Any]:
        """Lease up to `limit` due items."""
        now = self.engine.now()
        lease = self.engine.settings.lease_seconds
        states = list(self.states)
        items: list[Any] = await self.engine.ctx.store.arun(
            lambda tx: self._repo(tx).claim_due(now=now, owner=owner, limit=limit, lease_seconds=lease, states=states)
        )
        return items

    async def acquire(self, key: str, *, owner: str) -> Any | None:
        """Lease one item if it exists, is due and is free; else None."""
        now = self.engine.now()
        lease = self.engine.settings.lease_seconds

        def work(tx: StoreTx) -> Any | None:
            repo = self._repo(tx)
            current = repo.get(key)
            if current is None or current.next_action_at is None or current.next_action_at > now:
                return None
            return repo.acquire(key, owner=owner, now=now, lease_seconds=lease)

        return await self.engine.ctx.store.arun(work)

    async def renew(self, key: str, *, owner: str) -> bool:
        """Extend a held lease; False when it was lost."""
        now = self.engine.now()
        lease = self.engine.settings.lease_seconds
        renewed = await self.engine.ctx.store.arun(
            lambda tx: self._repo(tx).renew(key, owner=owner, now=now, lease_seconds=lease)
        )
        return bool(renewed)

    async def release(self, key: str, *, owner: str) -> None:
        """Give a lease back."""
        await self.engine.ctx.store.arun(lambda tx: self._repo(tx).release(key, owner=owner))

    async def run(self, item: Any, *, owner: str) -> Any:
        """Advance a leased item as far as it goes now, then give the lease back. An unexpected error (a bug,
        the database) is recorded as `last_error` and the item retried later. A crash (the process killed, or
        a BaseException from a test's checkpoint) leaves the lease to run out."""
        key = str(item.key)
        try:
            result = await self._step(item, owner)
        except Exception as exc:
            log.exception("VRP step crashed", kind=self.kind, key=key)
            await self._after_crash(key, owner, exc)
            return await self.engine.ctx.store.arun(lambda tx: self._repo(tx).require(key), write=False)
        await self.release(key, owner=owner)
        return result

    async def _after_crash(self, key: str, owner: str, exc: Exception) -> None:
        now = self.engine.now()
        reason = f"internal error: {type(exc).__name__}: {exc}"[:2000]

        def reschedule(tx: StoreTx) -> None:
            repo = self._repo(tx)
            current = repo.get(key)
            if current is None or current.lease_owner != owner:
                return
            repo.update(
                key,
                expected_version=current.version,
                now=now,
                owner=owner,
                release_lease=True,
                attempts=current.attempts + 1,
                last_error=reason,
                next_action_at=self.engine.retry_at(now, current.attempts),
            )

        try:
            await self.engine.ctx.store.arun(reschedule)
        except Exception:
            log.exception("could not reschedule after a crashed VRP step", kind=self.kind, key=key)


class MandateWork(_VrpWork):
    """VRP mandates as leased work: B1 for new ones, the authorization watch for waiting ones."""

    kind = "vrp_mandate"
    log_field = "mandate_id"
    states = (Mandate.RECEIVED.value, Mandate.AWAITING_AUTHORIZATION.value)

    def _repo(self, tx: StoreTx) -> Any:
        return tx.mandates

    async def _step(self, item: Any, owner: str) -> Any:
        return await self.engine.step_mandate(item, owner)


class VrpPaymentWork(_VrpWork):
    """VRP payments as leased work: parked ones re-checked, submitted ones paid (B2), pending ones read."""

    kind = "vrp_payment"
    log_field = "payment_id"
    states = (Payment.RECEIVED.value, Payment.SUBMITTED.value, Payment.PENDING.value)

    def _repo(self, tx: StoreTx) -> Any:
        return tx.vrp_payments

    async def _step(self, item: Any, owner: str) -> Any:
        return await self.engine.step_payment(item, owner)


def attach_vrp(engine: Engine, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> VrpEngine:
    """Plug flow B into an assembled engine (`processor.engine.assembly.build_engine`): the "mandate" kind of
    approval links and callbacks, and mandates and payments as work for its workers. Returns the VRP engine
    (for `submit_mandate`, `submit_payment` and friends; `sleep` is what its waiting loops sleep with)."""
    vrp = VrpEngine(engine.ctx, sleep=sleep, owner=f"vrp-{uuid.uuid4().hex[:12]}")
    engine.kinds.register(KIND, MandateAuthorizationHooks())
    engine.add_source(MandateWork(vrp))
    engine.add_source(VrpPaymentWork(vrp))
    return vrp


__all__ = [
    "KIND",
    "MandateAuthorizationHooks",
    "MandateOutcome",
    "MandateStateError",
    "MandateWork",
    "NotFoundError",
    "PaymentOutcome",
    "TokenUnavailableError",
    "VrpEngine",
    "VrpPaymentWork",
    "attach_vrp",
    "emit_payment_status",
    "mandate_request",
    "move_mandate_tx",
    "move_payment_tx",
    "payment_request",
    "place_payment",
    "settle_parked_payments",
]
