"""Taking VRP requests into the store: mandates and payment instructions, each stored once per id, in one
transaction with the status it publishes (INVALID, LIMIT_EXCEEDED, PAYMENT_REJECTED for an ended mandate).

The client-side check (`processor.domain.vrp_limits`) runs in the transaction that stores the payment, with the
mandate row locked, against the payments already accepted (SUBMITTED, PENDING, COMPLETED), so two payments can
never both pass a check only one of them fits. A refusal publishes LIMIT_EXCEEDED and no bank call is made.
Nothing here calls the bank: the stored mandate (B1) and payment (B2) are due work for the flows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

import structlog

from processor.domain.identity import request_content_sha256
from processor.domain.time import utc_ms
from processor.domain.vrp_requests import (
    InvalidRequestError,
    consent_parts,
    parse_mandate,
    parse_payment,
    status_record,
)
from processor.domain.vrp_states import MANDATE_STATUS_RANKS, Mandate, Payment, VrpStatus, enter_payment
from processor.engine.banks import UnknownIntegrationError
from processor.engine.context import EngineContext
from processor.engine.tracing import current_traceparent
from processor.engine.vrp_moves import emit_payment_status, place_payment
from processor.store import StoreTx, VrpMandate, VrpPayment
from processor.store.values import json_text
from schemas.topics import VRP_STATUS_TOPIC

T = TypeVar("T")

log = structlog.get_logger("processor.engine.vrp")


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


class VrpSubmissions:
    """Stores VRP mandate requests and payment instructions (see the module docstring)."""

    def __init__(self, ctx: EngineContext, parked_until: Callable[[datetime], datetime]) -> None:
        self.ctx = ctx
        self.parked_until = parked_until  # when a parked payment is checked again (the payment table's wait)

    def now(self) -> datetime:
        """The engine's clock, in store precision."""
        return utc_ms(self.ctx.clock.now())

    async def _run(self, work: Callable[[StoreTx], T]) -> T:
        return await self.ctx.store.arun(work)

    async def submit_mandate(self, request: Mapping[str, Any]) -> MandateOutcome:
        """Store a mandate request once per mandate_id (a duplicate changes nothing), due at once for B1.

        An invalid request with a readable mandate_id is stored as INVALID and publishes INVALID; without one,
        `InvalidRequestError` is raised for the caller to dead-letter.
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
        deadline = now + timedelta(seconds=self.ctx.settings.authorization_deadline)

        traceparent = current_traceparent()  # the request's trace (the consumer's span)

        def store(tx: StoreTx) -> Any:
            created = tx.mandates.create(
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
            if created.created:  # its steps continue the trace the request came with
                tx.lifecycle.keep_trace("mandate", req.mandate_id, traceparent)
                created = replace(created, row=replace(created.row, traceparent=traceparent))
            return created

        created = await self._run(store)
        if not created.created:
            log.info(
                "duplicate mandate request ignored",
                mandate_id=req.mandate_id,
                same_document=created.same_document,
                state=created.row.state,
            )
            return MandateOutcome(created.row, False, created.same_document)
        log.info("mandate received", mandate_id=req.mandate_id, integration=req.integration)
        return MandateOutcome(created.row, True)

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

    async def submit_payment(self, request: Mapping[str, Any]) -> PaymentOutcome:
        """Store a payment instruction once per payment_id (a duplicate changes nothing), checked against its
        mandate in the same transaction; one that fits is SUBMITTED, due at once for B2."""
        now = self.now()
        try:
            req = parse_payment(request)
        except InvalidRequestError as exc:
            return await self._invalid_payment(request, exc, now)
        digest = request_content_sha256(req.document())  # a rerun differs only in requested_at

        traceparent = current_traceparent()  # the request's trace (the consumer's span)

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
                due = self.parked_until(now)
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
            tx.lifecycle.keep_trace("payment", req.payment_id, traceparent)
            payment = replace(created.row, traceparent=traceparent)
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
