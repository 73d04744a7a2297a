"""The admin API (issue 11): JSON over the processor's HTTP port under `/admin`, for the operator's commands
(`dispersion retry-failed`, `dlq`, `report`, `requests`, `audit`).

Every request carries `Authorization: Bearer <token>`, a personal token (`[admin.tokens.NAME]`; the older single
`[admin] token_sha256` is the token named `admin` with the `admin` role): its SHA-256 is compared in constant time
with every configured one. The token's NAME is who acts: it is what the audit trail and the records keep, and a
`requested_by` / `replayed_by` in a body that differs from it is refused (403). Its role decides what it may do
(`processor.domain.roles`: viewers read, operators ask, approvers decide others' requests). Missing, wrong or no
token configured: 401. The token never reaches a log or an answer.

    GET  /admin/batches?status=COMPLETED,FAILED&since=T&until=T&limit=N&cursor=C   batches, oldest first
    GET  /admin/batches/{batch_id}                           one batch, every transfer's result, its retries
    POST /admin/batches/{batch_id}/withdraw                  {"reason": "..."}: withdraw it (admin_lifecycle)
    POST /admin/batches/{batch_id}/confirm-duplicate         a batch held as a possible duplicate payroll goes on
    GET  /admin/intake?topic=T&partition=P&offset=O          the processor's verdict on one message (submit)
    POST /admin/batches/{batch_id}/retry                     {"corrections": [{"index": 2, "account_number": "..."}]}
                                                             -> the retry batch (201), or with corrections the
                                                             request that waits for a second person (202)
    GET  /admin/dead-letters?since=T&batch_id=B&after=ID&limit=N                   recorded dead letters
    GET  /admin/dead-letters/{id}                            one, with its replays and the chain
    POST /admin/dead-letters/{id}/replay                     {"reason": "...", "force": false}
    GET  /admin/report?since=T&until=T                       per-transfer lines and totals (dispersion report),
                                                              and apart from them the VRP payments of the range
    GET  /admin/requests?state=PENDING&after=ID&limit=N      requests for a second person, oldest first
    POST /admin/requests/{id}/approve | /decline             decide one (not your own approval: 403)
    GET  /admin/audit?since=T&after=ID&limit=N               the audit trail, oldest first
    GET  /admin/mandates?status=S&integration=I&q=TEXT&since=T&until=T&limit=N&offset=K   VRP mandates, newest first
    GET  /admin/mandates/{mandate_id}                        one mandate: limits, the ledger, payments, timeline
    GET  /admin/vrp-payments?mandate=M&since=T&until=T&limit=N&offset=K                   VRP payments, oldest first
    GET  /admin/find?employee=E&account=1234&amount=A        an employee's transfers and their final outcome
    GET  /admin/totals?day=D | month=M | since=T&until=T     money counted once: paid, failed, outstanding, in
                                                             progress, scheduled, not paid, per currency
    GET  /admin/batches/{batch_id}/pain002, /admin/camt054   ISO 20022 documents (`processor.api.admin_iso`)

Times are ISO 8601 with an offset (`2026-11-30T00:00:00Z`). Bad input is a 400 naming the problem; a role that
may not do it 403; an unknown batch, dead letter or request 404; a refused action (not final yet, already
replayed, decided already, in flight) 409; the store unreachable 503. Never another 5xx.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Collection, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from processor.api.admin_bodies import DecisionBody, ReplayBody, RetryBody, read_body
from processor.api.admin_input import (
    EXCEPTION_HANDLERS,
    AdminState,
    BadRequestError,
    error,
    guarded,
    instant,
    limit,
    log,
    offset,
    ok,
    path_id,
    single,
    state,
    text,
    where,
    whole,
    window,
)
from processor.api.admin_iso import ISO_ROUTES
from processor.api.admin_lifecycle import LIFECYCLE_ROUTES
from processor.api.letter_record import read_record
from processor.api.people import audit_view, replay_audit, request_view
from processor.domain.file_states import FlowState
from processor.domain.roles import Action, Actor, AdminToken, Controls
from processor.domain.text import text_problem
from processor.domain.time import Clock, SystemClock, iso_ms, within_range
from processor.domain.vrp_states import Mandate
from processor.engine.finding import Wanted, find_transfers
from processor.engine.ledger import totals_between
from processor.engine.reporting import batch_detail, batch_summary, report
from processor.engine.requests import ask_retry, decide_request
from processor.engine.vrp_views import mandate_timeline, mandate_view, mandate_views, payment_json, vrp_report
from processor.engine.withdrawal import lifecycle_detail
from processor.store import Store, StoreTx
from processor.store.operator import DeadLetterRow
from processor.store.vrp import MandateFilter
from producers.replay import DeadLetterReplayer, replay_dead_letter

STATES = frozenset(str(state) for state in FlowState)
MANDATE_STATES = frozenset(str(state) for state in Mandate)
REQUEST_STATES = frozenset({"PENDING", "APPROVED", "DECLINED"})


def _wanted(request: Request) -> Wanted:
    """`employee`, `account` (its last digits, at least 4) and/or `amount`: what `/admin/find` looks for."""
    employee = single(request, "employee")
    account = single(request, "account")
    amount_text = single(request, "amount")
    if employee is not None:
        text(employee, "employee", limit=100)
    if account is not None and not (account.isdigit() and 4 <= len(account) <= 34):
        raise BadRequestError("account must be the last digits of an account number (at least 4)")
    amount = None
    if amount_text is not None:
        try:
            amount = Decimal(amount_text)
        except ArithmeticError:
            raise BadRequestError("amount must be a number such as 1500.50") from None
        if not amount.is_finite() or amount <= 0:
            raise BadRequestError("amount must be a positive number such as 1500.50")
    if employee is None and account is None and amount is None:
        raise BadRequestError("give employee, account (last digits) or amount")
    return Wanted(employee=employee, account_last=account, amount=amount)


def _states(request: Request, name: str, known: frozenset[str], what: str) -> tuple[str, ...]:
    """A comma-separated list of states in query parameter `name`, each one of `known`."""
    states = tuple(s for s in (single(request, name) or "").split(",") if s)
    unknown = [s for s in states if s not in known]
    if unknown:
        raise BadRequestError(f"unknown {what} {unknown[0]!r} (known: {', '.join(sorted(known))})")
    return states


# -- batches --------------------------------------------------------------------------------------------------


async def batches(request: Request, actor: Actor) -> Response:
    """GET /admin/batches: batches, oldest first, a page at a time (`next_cursor`)."""
    store = state(request).store
    states = _states(request, "status", STATES, "status")
    since, until, most = instant(request, "since"), instant(request, "until"), limit(request)
    after = _cursor(single(request, "cursor"))
    rows = await store.arun(
        lambda tx: tx.operator.batches(states=states, since=since, until=until, after=after, limit=most),
        write=False,
    )
    following = _encode_cursor(rows[-1].created_at, rows[-1].batch_id) if len(rows) == most else None
    return ok({"batches": [batch_summary(row) for row in rows], "next_cursor": following})


async def batch(request: Request, actor: Actor) -> Response:
    """GET /admin/batches/{batch_id}: one batch, every transfer's result, its retries."""
    store = state(request).store
    batch_id = path_id(request, "batch_id")
    found = await store.arun(lambda tx: batch_detail(tx, batch_id), write=False)
    if found is None:
        return error(404, f"batch {batch_id} is unknown")
    return ok({**found, **await store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)})


async def retry(request: Request, actor: Actor) -> Response:
    """POST /admin/batches/{batch_id}/retry: the retry batch (201), or the request waiting for a second person
    (202), or why nothing was made (200)."""
    admin = state(request)
    batch_id = path_id(request, "batch_id")
    body = await read_body(request, RetryBody, actor)
    answer = await ask_retry(
        admin.store,
        batch_id,
        body.fixes(),
        actor=actor,
        controls=admin.controls,
        where=where(request),
        now=admin.clock.now(),
        integrations=admin.integrations,
    )
    outcome = answer.outcome
    log.info("retry_requested", batch_id=batch_id, retry_batch_id=outcome.retry_batch_id, by=actor.name)
    document = {
        "batch_id": outcome.original_batch_id,
        "retry_batch_id": outcome.retry_batch_id,
        "transfer_indexes": list(outcome.transfer_indexes),
        "corrected": list(outcome.corrected),
        "in_flight": {str(k): v for k, v in outcome.in_flight.items()},
        "requested_by": actor.name,
        "request": None if answer.request is None else request_view(answer.request),
        "message": outcome.message,
    }
    pending = answer.request is not None and answer.request.state == "PENDING"
    return ok(document, 202 if pending else 201 if outcome.retry_batch_id else 200)


# -- dead letters ---------------------------------------------------------------------------------------------


async def dead_letters(request: Request, actor: Actor) -> Response:
    """GET /admin/dead-letters: recorded dead letters, a page at a time (`next_after`)."""
    store = state(request).store
    since, most = instant(request, "since"), limit(request)
    batch_id = text(single(request, "batch_id"), "batch_id", required=False)
    after_text = single(request, "after") or "0"
    if not after_text.isdigit() or len(after_text) > 18:
        raise BadRequestError("after must be a dead letter id (a whole number)")
    rows = await store.arun(
        lambda tx: tx.operator.dead_letters(since=since, batch_id=batch_id, after_id=int(after_text), limit=most),
        write=False,
    )
    following = rows[-1].id if len(rows) == most else None
    return ok({"dead_letters": [_letter(row) for row in rows], "next_after": following})


def _letter_detail(tx: StoreTx, letter_id: int) -> dict[str, Any] | None:
    """A dead letter with its replays and the dead letters its replays became."""
    row = tx.operator.dead_letter(letter_id)
    if row is None:
        return None
    replays = tx.operator.replays(letter_id)
    again = tx.operator.dead_letters_replaying(row.coordinates)
    return {
        **_letter(row),
        "replays": [
            {
                "replayed_by": r.replayed_by,
                "reason": r.reason,
                "replayed_at": iso_ms(r.replayed_at),
                "topic": r.target_topic,
                "partition": r.target_partition,
                "offset": r.target_offset,
            }
            for r in replays
        ],
        "dead_lettered_again_as": [a.id for a in again],
    }


async def dead_letter(request: Request, actor: Actor) -> Response:
    """GET /admin/dead-letters/{id}: one, with its replays, the chain and its record."""
    admin = state(request)
    letter_id = _letter_id(request)
    found = await admin.store.arun(lambda tx: _letter_detail(tx, letter_id), write=False)
    if found is None:
        return error(404, f"dead letter {letter_id} is unknown")
    topic, partition, at = str(found["dead_letter"]).rsplit("/", 2)
    view = await asyncio.to_thread(read_record, admin.replayer, (topic, int(partition), int(at)), found["topic"])
    return ok({**found, "record": view.as_dict()})


async def replay(request: Request, actor: Actor) -> Response:
    """POST /admin/dead-letters/{id}/replay: the record back onto its topic, where it landed (409 without Kafka)."""
    admin = state(request)
    letter_id = _letter_id(request)
    body = await read_body(request, ReplayBody, actor)
    if admin.replayer is None:
        return error(409, "this instance has no Kafka connection (role api): replay on a processor instance")
    now = admin.clock.now()
    done = await asyncio.to_thread(
        replay_dead_letter,
        admin.store,
        admin.replayer,
        letter_id,
        by=actor.name,
        reason=body.reason,
        now=now,
        force=body.force,
        audit=replay_audit(actor, where(request), body.reason, now),
    )
    log.info("dead_letter_replayed", dead_letter=letter_id, by=actor.name, topic=done.letter.source_topic)
    return ok(
        {
            "dead_letter": letter_id,
            "topic": done.letter.source_topic,
            "partition": done.partition,
            "offset": done.offset,
            "replayed_by": actor.name,
            "replayed_at": iso_ms(done.replay.replayed_at),
            "reason": body.reason,
        }
    )


# -- requests and the audit trail -----------------------------------------------------------------------------


async def requests(request: Request, actor: Actor) -> Response:
    """GET /admin/requests: requests for a second person, oldest first."""
    store = state(request).store
    states = tuple(s for s in (single(request, "state") or "").split(",") if s)
    if set(states) - REQUEST_STATES:
        raise BadRequestError(f"state must be among {', '.join(sorted(REQUEST_STATES))}")
    after, most = whole(request, "after"), limit(request)
    rows = await store.arun(lambda tx: tx.requests.listed(states=states, after_id=after, limit=most), write=False)
    following = rows[-1].id if len(rows) == most else None
    return ok({"requests": [request_view(row) for row in rows], "next_after": following})


async def _decide(request: Request, actor: Actor, *, approve: bool) -> Response:
    admin = state(request)
    request_text = str(request.path_params.get("request_id", ""))
    if not request_text.isdigit() or len(request_text) > 18:
        raise BadRequestError("a request id is a whole number")
    await read_body(request, DecisionBody, actor)
    decided = await decide_request(
        admin.store,
        int(request_text),
        approve=approve,
        actor=actor,
        where=where(request),
        now=admin.clock.now(),
        integrations=admin.integrations,
    )
    log.info("request_decided", request=decided.id, state=decided.state, by=actor.name)
    return ok(request_view(decided))


async def approve(request: Request, actor: Actor) -> Response:
    """POST /admin/requests/{id}/approve (not your own request: 403)."""
    return await _decide(request, actor, approve=True)


async def decline(request: Request, actor: Actor) -> Response:
    """POST /admin/requests/{id}/decline."""
    return await _decide(request, actor, approve=False)


async def audit(request: Request, actor: Actor) -> Response:
    """GET /admin/audit: the audit trail since a time, oldest first."""
    store = state(request).store
    since = instant(request, "since")
    if since is None:
        raise BadRequestError("since is required (an ISO 8601 time such as 2026-11-30T00:00:00Z)")
    after, most = whole(request, "after"), limit(request)
    rows = await store.arun(lambda tx: tx.audit.since(since, after_id=after, limit=most), write=False)
    following = rows[-1].id if len(rows) == most else None
    return ok({"entries": [audit_view(row) for row in rows], "next_after": following})


# -- money ----------------------------------------------------------------------------------------------------


async def reconciliation(request: Request, actor: Actor) -> Response:
    """GET /admin/report: per-transfer lines and totals, and apart from them the VRP payments of the range."""
    admin = state(request)
    since, until = window(request, admin.clock.now())

    def read(tx: StoreTx) -> dict[str, Any]:
        return {**report(tx, since, until), "vrp": vrp_report(tx, since, until)}

    return ok(await admin.store.arun(read, write=False))


async def money(request: Request, actor: Actor) -> Response:
    """GET /admin/totals: money counted once, per currency."""
    admin = state(request)
    since, until = window(request, admin.clock.now())
    totals = await admin.store.arun(lambda tx: totals_between(tx, since, until), write=False)
    return ok({"since": iso_ms(since), "until": iso_ms(until), "totals": [t.as_dict() for t in totals]})


async def find(request: Request, actor: Actor) -> Response:
    """GET /admin/find: an employee's transfers and their final outcome."""
    wanted, most = _wanted(request), limit(request)
    found = await state(request).store.arun(lambda tx: find_transfers(tx, wanted, limit=most), write=False)
    return ok({"transfers": found})


# -- VRP ------------------------------------------------------------------------------------------------------


async def mandates(request: Request, actor: Actor) -> Response:
    """GET /admin/mandates: VRP mandates, newest first."""
    admin = state(request)
    wanted = MandateFilter(
        states=_states(request, "status", MANDATE_STATES, "state"),
        integration=text(single(request, "integration"), "integration", required=False),
        since=instant(request, "since"),
        until=instant(request, "until"),
        text=text(single(request, "q"), "q", required=False),
    )
    most, skip, now = limit(request), offset(request), admin.clock.now()

    def read(tx: StoreTx) -> dict[str, Any]:
        rows = tx.mandates.listing(wanted, offset=skip, limit=most)
        return {
            "mandates": [view.as_json() for view in mandate_views(tx, rows, now)],
            "counts": tx.mandates.state_counts(wanted),
            "next_offset": skip + most if len(rows) == most else None,
        }

    return ok(await admin.store.arun(read, write=False))


async def mandate(request: Request, actor: Actor) -> Response:
    """GET /admin/mandates/{mandate_id}: one mandate, its limits, ledger, payments and timeline."""
    admin = state(request)
    mandate_id, now = path_id(request, "mandate_id"), admin.clock.now()

    def read(tx: StoreTx) -> dict[str, Any] | None:
        found = tx.mandates.get(mandate_id)
        if found is None:
            return None
        return {
            **mandate_view(tx, found, now).as_json(),
            "payments": [payment_json(p) for p in tx.vrp_payments.for_mandate(mandate_id)],
            "timeline": [vars(entry) for entry in mandate_timeline(tx, mandate_id)],
        }

    found = await admin.store.arun(read, write=False)
    return error(404, f"mandate {mandate_id} is unknown") if found is None else ok(found)


async def vrp_payments(request: Request, actor: Actor) -> Response:
    """GET /admin/vrp-payments: VRP payments, oldest first."""
    store = state(request).store
    mandate_id = text(single(request, "mandate"), "mandate", required=False)
    since, until = instant(request, "since"), instant(request, "until")
    most, skip = limit(request), offset(request)

    def read(tx: StoreTx) -> dict[str, Any] | None:
        if mandate_id is not None and tx.mandates.get(mandate_id) is None:
            return None
        rows = tx.vrp_payments.listing(mandate_id=mandate_id, since=since, until=until, offset=skip, limit=most)
        following = skip + most if len(rows) == most else None
        return {"payments": [payment_json(p) for p in rows], "next_offset": following}

    found = await store.arun(read, write=False)
    return error(404, f"mandate {mandate_id} is unknown") if found is None else ok(found)


ROUTES = [
    *LIFECYCLE_ROUTES,
    *ISO_ROUTES,
    Route("/find", guarded(find), methods=["GET"]),
    Route("/totals", guarded(money), methods=["GET"]),
    Route("/batches", guarded(batches), methods=["GET"]),
    Route("/batches/{batch_id:path}/retry", guarded(retry, Action.RETRY), methods=["POST"]),
    Route("/batches/{batch_id:path}", guarded(batch), methods=["GET"]),
    Route("/dead-letters", guarded(dead_letters), methods=["GET"]),
    Route("/dead-letters/{letter_id}", guarded(dead_letter), methods=["GET"]),
    Route("/dead-letters/{letter_id}/replay", guarded(replay, Action.REPLAY), methods=["POST"]),
    Route("/report", guarded(reconciliation), methods=["GET"]),
    Route("/requests", guarded(requests), methods=["GET"]),
    Route("/requests/{request_id}/approve", guarded(approve), methods=["POST"]),
    Route("/requests/{request_id}/decline", guarded(decline), methods=["POST"]),
    Route("/audit", guarded(audit), methods=["GET"]),
    Route("/mandates", guarded(mandates), methods=["GET"]),
    Route("/mandates/{mandate_id:path}", guarded(mandate), methods=["GET"]),
    Route("/vrp-payments", guarded(vrp_payments), methods=["GET"]),
]


def admin_app(
    store: Store,
    *,
    tokens: Mapping[str, AdminToken],
    integrations: Collection[str] | None = None,
    replayer: DeadLetterReplayer | None = None,
    clock: Clock | None = None,
    controls: Controls | None = None,
) -> Starlette:
    """The admin API over `store` (see the module docstring): the routes above, their dependencies on the app's
    state. No `tokens`: every request is refused. `replayer` None (an instance without Kafka): replays are refused
    with 409."""
    app = Starlette(routes=ROUTES, exception_handlers=EXCEPTION_HANDLERS)
    app.state.admin = AdminState(
        store=store,
        holders=tuple(tokens.values()),
        integrations=integrations,
        replayer=replayer,
        clock=clock or SystemClock(),
        controls=controls or Controls(),
    )
    return app


def _letter_id(request: Request) -> int:
    letter_text = str(request.path_params.get("letter_id", ""))
    if not letter_text.isdigit() or len(letter_text) > 18:
        raise BadRequestError("a dead letter id is a whole number")
    return int(letter_text)


def _letter(row: DeadLetterRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "dead_letter": row.coordinates,
        "topic": row.source_topic,
        "partition": row.source_partition,
        "offset": row.source_offset,
        "batch_id": row.batch_id,
        "reason": row.reason,
        "replay_of": row.replay_of,
        "created_at": iso_ms(row.created_at),
    }


def _encode_cursor(created_at: datetime, batch_id: str) -> str:
    text = json.dumps([iso_ms(created_at), batch_id])
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _cursor(text: str | None) -> tuple[datetime, str] | None:
    if not text:  # absent, or given empty: the first page
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        when, batch_id = json.loads(raw)
        moment = datetime.fromisoformat(when)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise BadRequestError("cursor is not one this API gave out") from None
    if not isinstance(batch_id, str) or moment.tzinfo is None or text_problem(batch_id) is not None:
        raise BadRequestError("cursor is not one this API gave out")
    try:
        return within_range(moment), batch_id
    except ValueError:
        raise BadRequestError("cursor is not one this API gave out") from None
