"""Authorization machinery shared by every flow kind: the stable approval link, PAR, and the redirect callback.

A flow kind (`Kind.FILE` for file payments, `Kind.MANDATE` for VRP mandates) plugs in by registering an object
that satisfies `AuthorizationHooks`:

    kinds = FlowKinds()
    kinds.register(Kind.FILE, FileAuthorizationHooks(ctx))             # processor/engine/file_flow.py
    kinds.register(Kind.MANDATE, MandateAuthorizationHooks())           # processor/engine/mandate_flow.py

The hooks are synchronous and run inside a store transaction (`tx`) opened by this module, so the flow's
state change, its outbox event and (for `on_authorized`) the stored tokens commit together or not at all.
They must touch nothing but the store (the transaction may be repeated on a busy database).

Sequence (see docs/engine.md):

    approver opens  GET {public_url}/approve/{kind.link}/{flow_id}?t=<approval token>
      -> hooks.consent_for(tx, flow_id): token, deadline, still awaiting?          (else a refusal page)
      -> new auth attempt: state (256 bits) + PKCE verifier (encrypted), committed
      -> E4 PAR (fresh request_uri every time), E5 authorization URL
      -> 302 to the bank, only when that URL is discovery's authorization_endpoint with our request_uri (else 502)
    bank redirects  GET {redirect_uri path}?code&state&iss   (or ?error=access_denied&state)
                    POST {redirect_uri path} {"redirect_url": "..."}
      -> check iss == the integration's issuer when present, and present when discovery says the bank sends it
         (RFC 9207; else 400 and the state stays usable); consume state (single use, unexpired)
      -> the flow must still await authorization of the attempt's consent (else no exchange)
      -> E6 code exchange -> tokens stored encrypted + hooks.on_authorized(...) in one transaction
      -> error=access_denied -> hooks.on_rejected(...)

A lost answer to E6 (the bank committed the exchange, then the answer never reached us: an instance killed
between E6 and storing the tokens, a reset or a 5xx after the commit) leaves the consent `Authorised` at the bank
with no tokens here. The code is spent and the bank refuses a new PAR for an authorised consent, so that consent
can never be paid. When the exchange fails, or when the approval link is opened again and the PAR is refused,
the consent's status is read (client-credentials token). `Authorised` with no tokens stored and no other attempt
started or consumed lately (whose redirect or exchange may still be under way) means *stranded*:
`hooks.on_stranded(...)` sends the flow back for a new consent behind the same approval link, and the approver
approves once more. Nothing can be paid twice: only the new consent's tokens ever reach the store.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from enum import Enum
from typing import Protocol, runtime_checkable
from urllib.parse import quote

import structlog

from processor.bank import BankClient, BankError, TokenResponse, new_pkce, new_state
from processor.domain.kinds import Kind
from processor.domain.steps import Approval
from processor.domain.time import Clock, SystemClock
from processor.engine.banks import BankPool, UnknownIntegrationError
from processor.engine.consent_watch import consent_status
from processor.engine.redirect_checks import approval_url_problem, issuer_problem
from processor.engine.settings import EngineSettings
from processor.engine.tracing import continued, tracing_on
from processor.store import AuthAttempt, Consumed, ConsumeOutcome, Store, StoreTx

log = structlog.get_logger("processor.engine.authorization")

# The bank's consent status once the approver authorised it (file and VRP consents alike).
CONSENT_AUTHORISED = "Authorised"


class Stranded(Enum):
    """What a look at a consent whose authorization may have been lost found."""

    NO = "no"  # not authorised at the bank (or not readable): the approver can try again as usual
    REPLACED = "replaced"  # authorised with no tokens here: the flow went back for a new consent
    BUSY = "busy"  # authorised, and another attempt started or consumed lately: its tokens may still arrive


@dataclass(frozen=True)
class PendingAuthorization:
    """What the authorization machinery needs to know about one flow, as its kind's hook reads it.

    - `integration`: the bank integration (configuration section) the flow uses.
    - `consent_id`: the bank's consent awaiting authorization (None while it does not exist yet).
    - `approval_token`: the unguessable token of the flow's approval link (compared in constant time here).
    - `deadline`: when the approval link stops working (None: no deadline).
    - `awaiting`: True only while the flow waits for its approver; any other state (not yet ready, already
      authorised, rejected, expired, ended) makes the link refuse and the callback skip the token exchange.
    - `state`: the flow's state name, shown in logs; what the link answers for it comes from the kind's table.
    - `traceparent`: the trace context kept with the flow (W3C text), continued by the link and the redirect.
    - `refusal`: what the link answers (code, message) when the flow says more than its state: withdrawn by whom
      and why, held until a person confirms it is no duplicate payroll.
    - `earlier`: the approval tokens of the batch id's ended attempts, with what their links answer now.
    - `paid_on`: the day a scheduled payment is to be made (a file batch's `execute_on`), told to the approver.
    """

    integration: str
    consent_id: str | None
    approval_token: str = field(repr=False)
    deadline: datetime | None
    awaiting: bool
    state: str
    traceparent: str | None = None
    refusal: tuple[str, str] | None = None  # (code, message) the link answers instead (withdrawn, held)
    earlier: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # (token, message) of ended attempts
    paid_on: date | None = None


@runtime_checkable
class AuthorizationHooks(Protocol):
    """What a flow kind provides to the authorization machinery. Every method runs inside the transaction
    `tx` opened by the caller and must only use the store through it (no I/O, no bank calls)."""

    def consent_for(self, tx: StoreTx, flow_id: str) -> PendingAuthorization | None:
        """Read the flow: its integration, consent, approval token, deadline and whether it still awaits
        authorization. None when no such flow exists."""
        ...

    def on_authorized(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """The approver authorised `consent_id` and its tokens are stored (same transaction). Move the flow
        on (e.g. to AUTHORIZED, publishing its status event) and make it due for the worker. Called at most
        once per flow while it awaits authorization; it may raise to roll everything back (e.g. the flow
        changed concurrently), in which case the tokens are not stored either."""
        ...

    def on_rejected(self, tx: StoreTx, flow_id: str, reason: str, *, now: datetime) -> None:
        """The approver refused (`error=access_denied` or another OAuth error on the redirect; `reason` says
        which). End the flow (e.g. REJECTED, publishing its status event). Called only while it awaits
        authorization."""
        ...

    def on_stranded(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """`consent_id` is authorised at the bank but its tokens never reached us (the answer to the code
        exchange was lost), so it can never be used. Send the flow back to create a new consent, without
        publishing a second AUTHORIZATION_REQUIRED (the approval link stays the same), and make it due. It must
        raise when the flow no longer awaits `consent_id` (everything then rolls back)."""
        ...


class UnknownFlowKindError(KeyError):
    """No hooks are registered for a kind."""


class FlowKinds:
    """The registry of the kinds whose flows wait for an approver: kind -> hooks."""

    def __init__(self) -> None:
        self._hooks: dict[Kind, AuthorizationHooks] = {}

    def register(self, kind: Kind, hooks: AuthorizationHooks) -> None:
        """Register (or replace) the hooks of `kind` (`Kind.FILE` or `Kind.MANDATE`)."""
        if not kind.approved:
            raise ValueError(f"flows of kind {kind.value!r} have no approver")
        self._hooks[kind] = hooks

    def hooks(self, kind: Kind) -> AuthorizationHooks:
        """The hooks of `kind`; `UnknownFlowKindError` when none are registered."""
        try:
            return self._hooks[kind]
        except KeyError:
            raise UnknownFlowKindError(kind) from None

    def __contains__(self, kind: object) -> bool:
        return kind in self._hooks

    def __iter__(self) -> Iterator[Kind]:
        return iter(self._hooks)


def approval_link(public_url: str, kind: Kind, flow_id: str, approval_token: str) -> str:
    """The stable approval link of a flow, published as `authorization_url` in its status event:
    `{public_url}/approve/{kind.link}/{flow_id}?t={approval_token}` (flow id and token URL-quoted)."""
    base = public_url.rstrip("/")
    link = quote(kind.link, safe="")
    return f"{base}/approve/{link}/{quote(flow_id, safe='')}?t={quote(approval_token, safe='')}"


# -- the approval link and the redirect ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the callback API answers: an HTTP status, a short message for people, and, for the approval link,
    where to send the browser. `code` is a stable machine-readable word (`authorized`, `unknown_state`, ...)."""

    status: int
    code: str
    message: str
    location: str | None = None
    kind: str | None = None
    flow_id: str | None = None
    paid_on: str | None = None  # a scheduled batch's payday as people write it (`28 Nov 2026`), for the approver

    @property
    def ok(self) -> bool:
        """A 2xx/3xx answer."""
        return self.status < 400


MAX_PARAM = 2048


class Authorizer:
    """Opens approval links (fresh PAR + E5 each time) and completes redirects (state check, E6, hooks)."""

    def __init__(
        self,
        store: Store,
        banks: BankPool,
        kinds: FlowKinds,
        *,
        clock: Clock | None = None,
        settings: EngineSettings | None = None,
        notify: Callable[[], None] = lambda: None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.banks = banks
        self.kinds = kinds
        self.clock: Clock = clock or SystemClock()
        self.settings = settings or EngineSettings()
        self.notify = notify
        self._sleep = sleep

    # -- GET /approve/{kind}/{flow_id}?t=... --------------------------------------------------------------------

    async def open_link(self, link: str, flow_id: str, token: str) -> Outcome:
        """The approver opened the approval link (`link`: its kind segment): check it, push a fresh PAR, and say
        where to redirect."""
        refused = Outcome(404, "unknown_link", "This approval link is not valid. Check that it was copied whole.")
        kind = Kind.of_link(link)
        if kind is None or kind not in self.kinds or not token or len(token) > MAX_PARAM or len(flow_id) > MAX_PARAM:
            return refused
        with (
            structlog.contextvars.bound_contextvars(**{kind.log_field: flow_id}),
            continued(f"{kind.value} approval link", await self._trace_of(kind, flow_id)),
        ):
            return await self._open_link(kind, flow_id, token, refused)

    async def _open_link(self, kind: Kind, flow_id: str, token: str, refused: Outcome) -> Outcome:
        hooks = self.kinds.hooks(kind)
        pending = await self.store.arun(lambda tx: hooks.consent_for(tx, flow_id), write=False)
        if pending is None:
            return refused
        where = {"kind": kind.link, "flow_id": flow_id}
        if not hmac.compare_digest(pending.approval_token.encode(), token.encode()):
            for earlier, message in pending.earlier:  # a link of an ended attempt says what became of it
                if hmac.compare_digest(earlier.encode(), token.encode()):
                    return Outcome(410, "earlier_attempt", message, **where)
            return refused
        if pending.refusal is not None:
            code, message = pending.refusal
            return Outcome(410 if code == "withdrawn" else 409, code, message, **where)
        now = self.clock.now()
        if pending.deadline is not None and now >= pending.deadline:
            return Outcome(
                410,
                "deadline_passed",
                f"The deadline to authorise this payment passed on {pending.deadline:%d %b %Y at %H:%M} UTC, so"
                " nothing will be paid under this link. Ask the payroll team to submit the batch again.",
                **where,
            )
        if not pending.awaiting or pending.consent_id is None:
            refusal = _not_awaiting(kind.approval(pending.state), where)
            if refusal.code == "already_authorized":
                return replace(refusal, paid_on=_day_text(pending.paid_on))
            return refusal
        try:
            bank = await self.banks.get(pending.integration)
        except (UnknownIntegrationError, BankError) as exc:
            log.warning("approval link: bank unavailable", kind=kind, flow_id=flow_id, error=type(exc).__name__)
            return Outcome(503, "bank_unavailable", "The bank cannot be reached right now. Try again shortly.", **where)
        pkce = new_pkce()
        state = new_state()
        consent_id = pending.consent_id
        expires = now + timedelta(seconds=self.settings.attempt_ttl)
        if pending.deadline is not None:
            expires = min(expires, pending.deadline)
        # The attempt (state + encrypted verifier) is committed before the bank hears of the state.
        await self.store.arun(
            lambda tx: tx.auth.create(
                flow_kind=kind.value,
                flow_id=flow_id,
                consent_id=consent_id,
                integration=pending.integration,
                code_verifier=pkce.verifier,
                now=now,
                expires_at=expires,
                state=state,
            )
        )
        try:
            par = await bank.push_authorization_request(consent_id, pkce, state)
            url = await bank.authorization_url(consent_id, par.request_uri)
            unsafe = approval_url_problem(url, (await bank.discovery()).authorization_endpoint, par.request_uri)
        except BankError as exc:
            log.warning("approval link: PAR failed", kind=kind, flow_id=flow_id, error=type(exc).__name__)
            found = Stranded.NO
            if not exc.retry_safe:  # refused: perhaps because the consent is already authorised
                found = await self._replace_if_stranded(kind, bank, flow_id, consent_id, own_state=state)
            if found is Stranded.REPLACED:
                return _preparing_again(where)
            if found is Stranded.BUSY:
                return Outcome(
                    409,
                    "confirming",
                    "The bank is confirming an approval of this payment. Open the link again in a minute.",
                    **where,
                )
            return Outcome(
                502, "bank_refused", "The bank could not start the authorization. Try the link again shortly.", **where
            )
        if unsafe is not None:  # never an open redirect, whatever the resource server answers
            log.warning("approval link: authorization URL refused", kind=kind, flow_id=flow_id, reason=unsafe)
            return Outcome(502, "bank_refused", "The bank answered with an address we do not trust.", **where)
        log.info("approval link opened; PAR pushed", kind=kind, flow_id=flow_id, consent_id=consent_id)
        return Outcome(302, "redirect", "Continue at your bank.", location=url, **where)

    # -- the redirect -------------------------------------------------------------------------------------------

    async def complete(self, params: Mapping[str, str]) -> Outcome:
        """Handle the redirect's query parameters (from the browser's GET or from the POSTed redirect_url)."""
        state = params.get("state", "")
        code = params.get("code", "")
        error = params.get("error", "")
        if not state or len(state) > MAX_PARAM or len(code) > MAX_PARAM or len(error) > MAX_PARAM:
            return Outcome(400, "missing_state", "The redirect carries no valid state parameter.")
        if not code and not error:
            return Outcome(400, "missing_code", "The redirect carries neither a code nor an error.")
        attempt = await self.store.arun(lambda tx: tx.auth.get(state), write=False)
        if attempt is None:
            log.warning("redirect with an unknown state; ignored")
            return Outcome(400, "unknown_state", "This authorization response is not one we started.")
        kind = Kind(attempt.flow_kind)
        if kind not in self.kinds:
            return Outcome(400, "unknown_state", "This authorization response is not one we started.")
        # Every line logged from here on (the bank client's E6 and A3 included) names the flow.
        with (
            structlog.contextvars.bound_contextvars(**{kind.log_field: attempt.flow_id}),
            continued(f"{kind.value} authorization redirect", await self._trace_of(kind, attempt.flow_id)),
        ):
            return await self._complete(attempt, kind, params)

    async def _trace_of(self, kind: Kind, flow_id: str) -> str | None:
        """The trace context kept with the flow, read only while traces are recorded."""
        if not tracing_on():
            return None
        hooks = self.kinds.hooks(kind)
        pending = await self.store.arun(lambda tx: hooks.consent_for(tx, flow_id), write=False)
        return None if pending is None else pending.traceparent

    async def _complete(self, attempt: AuthAttempt, kind: Kind, params: Mapping[str, str]) -> Outcome:
        code = params.get("code", "")
        error = params.get("error", "")
        iss = params.get("iss")
        state = params.get("state", "")
        where = {"kind": kind.link, "flow_id": attempt.flow_id}
        try:
            integration = self.banks.integration(attempt.integration)
        except UnknownIntegrationError:
            return Outcome(400, "unknown_state", "This authorization response is not one we started.", **where)
        iss_required = False
        if iss is None:  # refused when the bank says it always sends iss (RFC 9207); the state is not used up
            try:
                bank = await self.banks.get(attempt.integration)
                iss_required = (await bank.discovery()).authorization_response_iss_parameter_supported
            except BankError as exc:
                log.warning("redirect: bank discovery unavailable", flow_id=attempt.flow_id, error=type(exc).__name__)
                return Outcome(503, "bank_unavailable", "The bank cannot be reached right now. Try again.", **where)
        refused = issuer_problem(params, integration.issuer, iss_required=iss_required)
        if refused is not None:
            log.warning("redirect refused", flow_id=attempt.flow_id, reason=refused[0], iss=(iss or "")[:200])
            return Outcome(400, *refused, **where)
        hooks = self.kinds.hooks(kind)
        now = self.clock.now()

        def consume(tx: StoreTx) -> tuple[Consumed, PendingAuthorization | None]:
            # The flow the exchange will be for, read in the same transaction (one hand-off, one commit fewer).
            consumed = tx.auth.consume(state, now=now)
            return consumed, hooks.consent_for(tx, attempt.flow_id) if consumed.ok and not error else None

        consumed, pending = await self.store.arun(consume)
        if consumed.outcome is ConsumeOutcome.EXPIRED:
            return Outcome(
                400, "expired_state", "This authorization took too long. Open the approval link again.", **where
            )
        if consumed.outcome is ConsumeOutcome.USED:
            return await self._repeated(kind, attempt, code, error, where)
        if not consumed.ok:
            return Outcome(400, "unknown_state", "This authorization response is not one we started.", **where)
        if error:
            return await self._error(hooks, attempt, error, params.get("error_description", ""), where)
        return await self._exchange(kind, attempt, code, where, pending)

    async def _error(
        self, hooks: AuthorizationHooks, attempt: AuthAttempt, error: str, description: str, where: dict[str, str]
    ) -> Outcome:
        if error != "access_denied":
            log.warning("authorization ended with an error", flow_id=attempt.flow_id, error=error[:100])
            return Outcome(
                502, "bank_error", f"The bank reported {error[:100]!r}. Open the approval link to try again.", **where
            )
        now = self.clock.now()
        reason = "the approver rejected the authorization"

        def reject(tx: StoreTx) -> bool:
            pending = hooks.consent_for(tx, attempt.flow_id)
            if pending is None or not pending.awaiting or pending.consent_id != attempt.consent_id:
                return False
            hooks.on_rejected(tx, attempt.flow_id, reason, now=now)
            return True

        changed = await self.store.arun(reject)
        log.info("authorization rejected", flow_id=attempt.flow_id, recorded=changed)
        return Outcome(200, "rejected", "The rejection was received. Nothing will be paid.", **where)

    async def _exchange(
        self,
        kind: Kind,
        attempt: AuthAttempt,
        code: str,
        where: dict[str, str],
        pending: PendingAuthorization | None,
    ) -> Outcome:
        """The code exchange for the flow as `pending` read it (None: no such flow)."""
        hooks = self.kinds.hooks(kind)
        now = self.clock.now()
        if (
            pending is None
            or not pending.awaiting
            or pending.consent_id != attempt.consent_id
            or (pending.deadline is not None and now >= pending.deadline)
        ):
            log.warning("redirect for a flow that no longer awaits it; no exchange", flow_id=attempt.flow_id)
            return Outcome(409, "not_awaiting", "This payment no longer awaits authorization.", **where)
        bank: BankClient | None = None
        try:
            bank = await self.banks.get(attempt.integration)
            token = await bank.exchange_code(code, attempt.code_verifier, expected_consent_id=attempt.consent_id)
        except (BankError, UnknownIntegrationError) as exc:
            log.warning("code exchange failed", flow_id=attempt.flow_id, error=type(exc).__name__)
            if bank is not None and isinstance(exc, BankError):
                found = await self._replace_if_stranded(
                    kind, bank, attempt.flow_id, attempt.consent_id, own_state=attempt.state
                )
                if found is Stranded.REPLACED:
                    return _preparing_again(where)
            return Outcome(
                502,
                "exchange_failed",
                "The bank did not confirm the authorization. Open the approval link again.",
                **where,
            )
        if token.state is not None and not hmac.compare_digest(token.state.encode(), attempt.state.encode()):
            log.warning("token answers another state; discarded", flow_id=attempt.flow_id)
            return Outcome(400, "state_mismatch", "The bank's answer belongs to another authorization.", **where)
        return await self._authorized(hooks, attempt, token, where, pending.paid_on)

    async def _authorized(
        self,
        hooks: AuthorizationHooks,
        attempt: AuthAttempt,
        token: TokenResponse,
        where: dict[str, str],
        paid_on: date | None,
    ) -> Outcome:
        now = self.clock.now()

        def save(tx: StoreTx) -> None:
            tx.tokens.save(
                attempt.consent_id,
                integration=attempt.integration,
                access_token=token.access_token,
                refresh_token=token.refresh_token,
                scope=token.scope or None,
                expires_at=token.expires_at,
                now=now,
            )
            hooks.on_authorized(tx, attempt.flow_id, attempt.consent_id, now=now)

        try:
            await self.store.arun(save)
        except Exception as exc:  # the flow moved meanwhile (e.g. expired): tokens are not kept either
            log.warning("could not record the authorization", flow_id=attempt.flow_id, error=type(exc).__name__)
            return Outcome(409, "not_awaiting", "This payment no longer awaits authorization.", **where)
        log.info("authorization received", flow_id=attempt.flow_id, consent_id=attempt.consent_id)
        self.notify()
        if paid_on is not None:
            day = _day_text(paid_on)
            message = f"Authorization received. It will be paid on {day}."
            return Outcome(200, "authorized", message, paid_on=day, **where)
        return Outcome(200, "authorized", "Authorization received. The payment will now be made.", **where)

    async def _repeated(
        self, kind: Kind, attempt: AuthAttempt, code: str, error: str, where: dict[str, str]
    ) -> Outcome:
        """A second delivery of a redirect whose state is used up: a no-op answered with success once the first
        delivery's result is recorded. Never a second exchange, except to recover a first exchange that left no
        tokens long ago (its process died mid-way): the code is then either unused (and works) or refused."""
        hooks = self.kinds.hooks(kind)
        waited = 0.0
        step = 0.1
        while True:
            pending = await self.store.arun(lambda tx: hooks.consent_for(tx, attempt.flow_id), write=False)
            if pending is None:
                return Outcome(400, "unknown_state", "This authorization response is not one we started.", **where)
            if pending.awaiting and pending.consent_id != attempt.consent_id:
                # The consent was replaced (its exchange's answer was lost): the approver must decide again.
                return Outcome(
                    409,
                    "superseded",
                    "This authorization response belongs to an earlier request. Open the approval link again.",
                    **where,
                )
            if not pending.awaiting:
                return Outcome(200, "duplicate", "This authorization response was already received.", **where)
            if waited >= self.settings.duplicate_wait:
                break
            await self._sleep(step)
            waited += step
        now = self.clock.now()
        used_at = attempt.used_at
        if code and not error and used_at is not None:
            recovered = await self._recover(kind, attempt, code, now, used_at, where)
            if recovered is not None:
                return recovered
        return Outcome(
            409,
            "already_used",
            "This authorization response was already used and is not complete. Open the approval link again.",
            **where,
        )

    async def _replace_if_stranded(
        self, kind: Kind, bank: BankClient, flow_id: str, consent_id: str, *, own_state: str
    ) -> Stranded:
        """After a failed exchange or a refused PAR: if the bank holds `consent_id` authorised while no tokens
        are stored for it, and no other attempt started or consumed within `exchange_recovery_after` may still
        deliver them (its redirect in flight, its exchange running), send the flow back for a new consent
        (`hooks.on_stranded`). Reading the status is the only bank call; a failure to read changes nothing."""
        try:
            status = await consent_status(bank, kind, consent_id)
        except BankError as exc:
            log.warning("could not read the consent's status", flow_id=flow_id, error=type(exc).__name__)
            return Stranded.NO
        if status != CONSENT_AUTHORISED:
            return Stranded.NO
        hooks = self.kinds.hooks(kind)
        now = self.clock.now()
        grace = timedelta(seconds=self.settings.exchange_recovery_after)

        def replace(tx: StoreTx) -> Stranded:
            if tx.tokens.get(consent_id) is not None:
                return Stranded.NO
            pending = hooks.consent_for(tx, flow_id)
            if pending is None or not pending.awaiting or pending.consent_id != consent_id:
                return Stranded.NO
            for other in tx.auth.for_flow(kind.value, flow_id):
                # The bank marks a consent Authorised when the approver decides, before any exchange: another
                # attempt started or consumed lately may still bring its redirect or finish its exchange.
                latest = other.used_at or other.created_at
                if other.state != own_state and other.consent_id == consent_id and now - latest < grace:
                    return Stranded.BUSY
            hooks.on_stranded(tx, flow_id, consent_id, now=now)
            return Stranded.REPLACED

        try:
            found = await self.store.arun(replace)
        except Exception as exc:  # the flow moved meanwhile (e.g. authorised by the other exchange)
            log.info("consent not replaced; the flow moved", flow_id=flow_id, error=type(exc).__name__)
            return Stranded.NO
        if found is Stranded.REPLACED:
            log.warning(
                "consent authorised at the bank but its tokens were lost; a new consent will be created",
                kind=kind,
                flow_id=flow_id,
                consent_id=consent_id,
            )
            self.notify()
        return found

    async def _recover(
        self,
        kind: Kind,
        attempt: AuthAttempt,
        code: str,
        now: datetime,
        used_at: datetime,
        where: dict[str, str],
    ) -> Outcome | None:
        if (now - used_at).total_seconds() < self.settings.exchange_recovery_after:
            return None
        has_tokens = await self.store.arun(lambda tx: tx.tokens.get(attempt.consent_id) is not None, write=False)
        if has_tokens:
            return None
        log.warning("repeating a code exchange that left no tokens", flow_id=attempt.flow_id)
        pending = await self.store.arun(lambda tx: self.kinds.hooks(kind).consent_for(tx, attempt.flow_id), write=False)
        return await self._exchange(kind, attempt, code, where, pending)


def _day_text(day: date | None) -> str | None:
    return None if day is None else f"{day.day} {day:%b %Y}"


def _preparing_again(where: dict[str, str]) -> Outcome:
    return Outcome(
        409,
        "authorize_again",
        "The bank's confirmation of your approval did not reach us, so nothing will be paid under it. A new"
        " authorization is being prepared: open the approval link again in a moment and approve once more.",
        **where,
    )


def _not_awaiting(approval: Approval, where: dict[str, str]) -> Outcome:
    if approval is Approval.AUTHORIZED:
        return Outcome(409, "already_authorized", "This payment is already authorised. Nothing more to do.", **where)
    if approval is Approval.REJECTED:
        return Outcome(410, "rejected", "This payment was rejected. The link no longer works.", **where)
    if approval is Approval.EXPIRED:
        return Outcome(410, "deadline_passed", "The deadline to authorise this payment has passed.", **where)
    if approval is Approval.ENDED:
        return Outcome(410, "ended", "This payment has ended. The link no longer works.", **where)
    return Outcome(409, "not_ready", "This payment is not ready for authorization yet. Try again in a moment.", **where)
