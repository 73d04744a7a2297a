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
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from processor.api.admin_lifecycle import lifecycle_routes
from processor.api.letter_record import read_record
from processor.api.people import audit_view, replay_audit, request_view
from processor.domain.file_states import FlowState
from processor.domain.ledger import day_window, month_window
from processor.domain.roles import Action, Actor, AdminToken, Controls
from processor.domain.text import text_problem
from processor.domain.time import Clock, SystemClock, iso_ms, within_range
from processor.domain.vrp_states import Mandate
from processor.engine.finding import Wanted, find_transfers
from processor.engine.ledger import totals_between
from processor.engine.reporting import batch_detail, batch_summary, report
from processor.engine.requests import Where, ask_retry, decide_request
from processor.engine.retries import Correction, RetryError
from processor.engine.vrp_views import mandate_timeline, mandate_view, mandate_views, payment_json, vrp_report
from processor.engine.withdrawal import WithdrawError, lifecycle_detail
from processor.store import Store, StoreError, StoreTx
from processor.store.operator import DeadLetterRow
from processor.store.vrp import MandateFilter
from producers.replay import DeadLetterReplayer, ReplayError, replay_dead_letter

log = structlog.get_logger("processor.api.admin")

MAX_BODY = 256 * 1024
MAX_LIMIT = 500
MAX_ID = 200
STATES = frozenset(str(state) for state in FlowState)
MANDATE_STATES = frozenset(str(state) for state in Mandate)
REQUEST_STATES = frozenset({"PENDING", "APPROVED", "DECLINED"})
Handler = Callable[[Request, Actor], Awaitable[Response]]


class BadRequestError(ValueError):
    """Input we refuse; the message says why (400)."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers={"Cache-Control": "no-store"})


def _ok(body: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def token_digest(token: str) -> str:
    """The SHA-256 (hex) of an admin token, as `token_sha256` holds it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# -- reading input --------------------------------------------------------------------------------------------


def _single(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise BadRequestError(f"{name} is given more than once")
    return values[0] if values else None


def _instant(request: Request, name: str) -> datetime | None:
    text = _single(request, name)
    if text is None:
        return None
    if len(text) == 10:  # a bare day (2026-11-01) is that day's midnight UTC
        try:
            return day_window(text)[0]
        except ValueError:
            pass
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequestError(
            f"{name} must be a day such as 2026-11-30 or an ISO 8601 time such as 2026-11-30T00:00:00Z"
        ) from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise BadRequestError(f"{name} must carry an offset (Z or +00:00)")
    try:
        return within_range(value)
    except ValueError as exc:
        raise BadRequestError(f"{name} {exc}") from None


def _wanted(request: Request) -> Wanted:
    """`employee`, `account` (its last digits, at least 4) and/or `amount`: what `/admin/find` looks for."""
    employee = _single(request, "employee")
    account = _single(request, "account")
    amount_text = _single(request, "amount")
    if employee is not None:
        _text(employee, "employee", limit=100)
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


def _offset(request: Request) -> int:
    text = _single(request, "offset") or "0"
    if not text.isdigit() or len(text) > 9:
        raise BadRequestError("offset must be a whole number")
    return int(text)


def _limit(request: Request) -> int:
    text = _single(request, "limit")
    if text is None:
        return 100
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise BadRequestError(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return int(text)


def _text(value: object, name: str, *, limit: int = MAX_ID, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadRequestError(f"{name} must be a non-empty string")
    if len(value) > limit:
        raise BadRequestError(f"{name} is longer than {limit} characters")
    bad = text_problem(value)
    if bad is not None:
        raise BadRequestError(f"{name} holds {bad}")
    return value


def window(request: Request, now: datetime | None = None) -> tuple[datetime, datetime]:
    """A report's window: `day=2026-11-30`, `month=2026-11`, or `since` and `until` (`since` earlier; with `now`,
    `until` may be left out and is now)."""
    day, month = _single(request, "day"), _single(request, "month")
    try:
        if day is not None:
            return day_window(day)
        if month is not None:
            return month_window(month)
    except ValueError:
        raise BadRequestError("day must be like 2026-11-30, month like 2026-11") from None
    since, until = _instant(request, "since"), _instant(request, "until") or now
    if since is None or until is None:
        raise BadRequestError("since and until are required" if now is None else "give day, month or since")
    if until <= since:
        raise BadRequestError("until must be later than since")
    return since, until


def _path_id(request: Request, name: str) -> str:
    value = _text(request.path_params.get(name), name)
    assert value is not None
    return value


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadRequestError(f"the body is larger than {MAX_BODY} bytes")
    if not raw.strip():
        return {}
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequestError(f"the body is not JSON: {str(exc)[:100]}") from None
    if not isinstance(document, dict):
        raise BadRequestError("the body must be a JSON object")
    return document


def _corrections(value: object) -> dict[int, Correction]:
    if value is None:
        return {}
    if not isinstance(value, list) or len(value) > 10_000:
        raise BadRequestError("corrections must be a list of {index, account_number[, account_type]}")
    found: dict[int, Correction] = {}
    for position, item in enumerate(value):
        where = f"corrections[{position}]"
        if not isinstance(item, dict):
            raise BadRequestError(f"{where} must be an object")
        index = item.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 1_000_000:
            raise BadRequestError(f"{where}.index must be a transfer index (a whole number from 0)")
        if index in found:
            raise BadRequestError(f"{where}: transfer {index} is corrected twice")
        unknown = set(item) - {"index", "account_number", "account_type"}
        if unknown:
            raise BadRequestError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        number = _text(item.get("account_number"), f"{where}.account_number", limit=64)
        kind = _text(item.get("account_type"), f"{where}.account_type", limit=40, required=False)
        assert number is not None
        found[index] = Correction(number, kind)
    return found


# -- the app --------------------------------------------------------------------------------------------------


def _holder(request: Request, tokens: Collection[AdminToken]) -> Actor | None:
    """The holder of the request's bearer token: every configured digest is compared (constant time each)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    given = token_digest(token.strip()) if scheme.lower() == "bearer" and token.strip() else ""
    found: Actor | None = None
    for holder in tokens:
        if hmac.compare_digest(given.encode(), holder.sha256.encode()) and given:
            found = Actor(holder.name, holder.role)
    return found


def _same_person(actor: Actor, body: Mapping[str, Any], field: str) -> None:
    """A body's `requested_by` / `replayed_by` may only repeat the token's name."""
    claimed = body.get(field)
    if claimed is not None and claimed != actor.name:
        raise ForbiddenError(
            f"{field} must be the token's own name ({actor.name}) or left out: the token says who acts"
        )


class ForbiddenError(ValueError):
    """The token's holder may not do this (403)."""


def admin_app(
    store: Store,
    *,
    tokens: Mapping[str, AdminToken],
    integrations: Collection[str] | None = None,
    replayer: DeadLetterReplayer | None = None,
    clock: Clock | None = None,
    controls: Controls | None = None,
) -> Starlette:
    """The admin API over `store` (see the module docstring). No `tokens`: every request is refused.
    `replayer` None (an instance without Kafka): replays are refused with 409."""
    time: Clock = clock or SystemClock()
    rules = controls or Controls()
    holders = tuple(tokens.values())

    def guarded(handler: Handler, action: Action = Action.READ) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            if not holders:
                return _error(401, "the admin API is not configured: set [admin.tokens.NAME] (or [admin] token_sha256)")
            actor = _holder(request, holders)
            if actor is None:
                return _error(401, "a valid admin token is required (Authorization: Bearer ...)")
            if not actor.may(action):
                log.info("admin_refused_role", actor=actor.name, role=str(actor.role), path=request.url.path)
                return _error(403, f"{actor.name} has the {actor.role} role, which may not {action.value} here")
            try:
                return await handler(request, actor)
            except BadRequestError as exc:
                return _error(400, str(exc))
            except ForbiddenError as exc:
                return _error(403, str(exc))
            except (RetryError, ReplayError, WithdrawError) as exc:
                return _error(exc.status, str(exc))
            except StoreError as exc:
                log.warning("admin_store_unavailable", error=str(exc)[:200])
                return _error(503, "the store is not reachable; try again")

        return run

    def where(request: Request) -> Where:
        return Where("admin-api", request.client.host if request.client else None)

    async def batches(request: Request, actor: Actor) -> Response:
        states = tuple(s for s in (_single(request, "status") or "").split(",") if s)
        unknown = [s for s in states if s not in STATES]
        if unknown:
            raise BadRequestError(f"unknown status {unknown[0]!r} (known: {', '.join(sorted(STATES))})")
        since, until, limit = _instant(request, "since"), _instant(request, "until"), _limit(request)
        after = _cursor(_single(request, "cursor"))
        rows = await store.arun(
            lambda tx: tx.operator.batches(states=states, since=since, until=until, after=after, limit=limit),
            write=False,
        )
        following = _encode_cursor(rows[-1].created_at, rows[-1].batch_id) if len(rows) == limit else None
        return _ok({"batches": [batch_summary(row) for row in rows], "next_cursor": following})

    async def batch(request: Request, actor: Actor) -> Response:
        batch_id = _path_id(request, "batch_id")
        found = await store.arun(lambda tx: batch_detail(tx, batch_id), write=False)
        if found is None:
            return _error(404, f"batch {batch_id} is unknown")
        return _ok({**found, **await store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)})

    async def retry(request: Request, actor: Actor) -> Response:
        batch_id = _path_id(request, "batch_id")
        body = await _body(request)
        unknown = set(body) - {"corrections", "requested_by"}
        if unknown:
            raise BadRequestError(f"unknown field(s) {', '.join(sorted(unknown))}")
        _text(body.get("requested_by"), "requested_by", limit=100, required=False)
        _same_person(actor, body, "requested_by")
        fixes = _corrections(body.get("corrections"))
        answer = await ask_retry(
            store,
            batch_id,
            fixes,
            actor=actor,
            controls=rules,
            where=where(request),
            now=time.now(),
            integrations=integrations,
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
        return _ok(document, 202 if pending else 201 if outcome.retry_batch_id else 200)

    async def dead_letters(request: Request, actor: Actor) -> Response:
        since, limit = _instant(request, "since"), _limit(request)
        batch_id = _text(_single(request, "batch_id"), "batch_id", required=False)
        after_text = _single(request, "after") or "0"
        if not after_text.isdigit() or len(after_text) > 18:
            raise BadRequestError("after must be a dead letter id (a whole number)")
        rows = await store.arun(
            lambda tx: tx.operator.dead_letters(since=since, batch_id=batch_id, after_id=int(after_text), limit=limit),
            write=False,
        )
        following = rows[-1].id if len(rows) == limit else None
        return _ok({"dead_letters": [_letter(row) for row in rows], "next_after": following})

    async def dead_letter(request: Request, actor: Actor) -> Response:
        letter_id = _letter_id(request)

        def read(tx: StoreTx) -> dict[str, Any] | None:
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

        found = await store.arun(read, write=False)
        if found is None:
            return _error(404, f"dead letter {letter_id} is unknown")
        topic, partition, offset = str(found["dead_letter"]).rsplit("/", 2)
        view = await asyncio.to_thread(read_record, replayer, (topic, int(partition), int(offset)), found["topic"])
        return _ok({**found, "record": view.as_dict()})

    async def replay(request: Request, actor: Actor) -> Response:
        letter_id = _letter_id(request)
        body = await _body(request)
        unknown = set(body) - {"reason", "replayed_by", "force"}
        if unknown:
            raise BadRequestError(f"unknown field(s) {', '.join(sorted(unknown))}")
        reason = _text(body.get("reason"), "reason", limit=500)
        _text(body.get("replayed_by"), "replayed_by", limit=100, required=False)
        _same_person(actor, body, "replayed_by")
        force = body.get("force", False)
        if not isinstance(force, bool):
            raise BadRequestError("force must be true or false")
        assert reason is not None
        if replayer is None:
            return _error(409, "this instance has no Kafka connection (role api): replay on a processor instance")
        now = time.now()
        done = await asyncio.to_thread(
            replay_dead_letter,
            store,
            replayer,
            letter_id,
            by=actor.name,
            reason=reason,
            now=now,
            force=force,
            audit=replay_audit(actor, where(request), reason, now),
        )
        log.info("dead_letter_replayed", dead_letter=letter_id, by=actor.name, topic=done.letter.source_topic)
        return _ok(
            {
                "dead_letter": letter_id,
                "topic": done.letter.source_topic,
                "partition": done.partition,
                "offset": done.offset,
                "replayed_by": actor.name,
                "replayed_at": iso_ms(done.replay.replayed_at),
                "reason": reason,
            }
        )

    async def requests(request: Request, actor: Actor) -> Response:
        states = tuple(s for s in (_single(request, "state") or "").split(",") if s)
        if set(states) - REQUEST_STATES:
            raise BadRequestError(f"state must be among {', '.join(sorted(REQUEST_STATES))}")
        after, limit = _whole(request, "after"), _limit(request)
        rows = await store.arun(lambda tx: tx.requests.listed(states=states, after_id=after, limit=limit), write=False)
        following = rows[-1].id if len(rows) == limit else None
        return _ok({"requests": [request_view(row) for row in rows], "next_after": following})

    def decision(approve: bool) -> Handler:
        async def decide(request: Request, actor: Actor) -> Response:
            text = str(request.path_params.get("request_id", ""))
            if not text.isdigit() or len(text) > 18:
                raise BadRequestError("a request id is a whole number")
            body = await _body(request)
            if set(body) - {"decided_by"}:
                raise BadRequestError(f"unknown field(s) {', '.join(sorted(set(body) - {'decided_by'}))}")
            _text(body.get("decided_by"), "decided_by", limit=100, required=False)
            _same_person(actor, body, "decided_by")
            decided = await decide_request(
                store,
                int(text),
                approve=approve,
                actor=actor,
                where=where(request),
                now=time.now(),
                integrations=integrations,
            )
            log.info("request_decided", request=decided.id, state=decided.state, by=actor.name)
            return _ok(request_view(decided))

        return decide

    async def audit(request: Request, actor: Actor) -> Response:
        since = _instant(request, "since")
        if since is None:
            raise BadRequestError("since is required (an ISO 8601 time such as 2026-11-30T00:00:00Z)")
        after, limit = _whole(request, "after"), _limit(request)
        rows = await store.arun(lambda tx: tx.audit.since(since, after_id=after, limit=limit), write=False)
        following = rows[-1].id if len(rows) == limit else None
        return _ok({"entries": [audit_view(row) for row in rows], "next_after": following})

    async def reconciliation(request: Request, actor: Actor) -> Response:
        since, until = window(request, time.now())

        def read(tx: StoreTx) -> dict[str, Any]:
            return {**report(tx, since, until), "vrp": vrp_report(tx, since, until)}

        return _ok(await store.arun(read, write=False))

    async def mandates(request: Request, actor: Actor) -> Response:
        states = tuple(s for s in (_single(request, "status") or "").split(",") if s)
        unknown = [s for s in states if s not in MANDATE_STATES]
        if unknown:
            raise BadRequestError(f"unknown state {unknown[0]!r} (known: {', '.join(sorted(MANDATE_STATES))})")
        wanted = MandateFilter(
            states=states,
            integration=_text(_single(request, "integration"), "integration", required=False),
            since=_instant(request, "since"),
            until=_instant(request, "until"),
            text=_text(_single(request, "q"), "q", required=False),
        )
        limit, offset, now = _limit(request), _offset(request), time.now()

        def read(tx: StoreTx) -> dict[str, Any]:
            rows = tx.mandates.listing(wanted, offset=offset, limit=limit)
            return {
                "mandates": [view.as_json() for view in mandate_views(tx, rows, now)],
                "counts": tx.mandates.state_counts(wanted),
                "next_offset": offset + limit if len(rows) == limit else None,
            }

        return _ok(await store.arun(read, write=False))

    async def mandate(request: Request, actor: Actor) -> Response:
        mandate_id, now = _path_id(request, "mandate_id"), time.now()

        def read(tx: StoreTx) -> dict[str, Any] | None:
            found = tx.mandates.get(mandate_id)
            if found is None:
                return None
            return {
                **mandate_view(tx, found, now).as_json(),
                "payments": [payment_json(p) for p in tx.vrp_payments.for_mandate(mandate_id)],
                "timeline": [vars(entry) for entry in mandate_timeline(tx, mandate_id)],
            }

        found = await store.arun(read, write=False)
        return _error(404, f"mandate {mandate_id} is unknown") if found is None else _ok(found)

    async def vrp_payments(request: Request, actor: Actor) -> Response:
        mandate_id = _text(_single(request, "mandate"), "mandate", required=False)
        since, until = _instant(request, "since"), _instant(request, "until")
        limit, offset = _limit(request), _offset(request)

        def read(tx: StoreTx) -> dict[str, Any] | None:
            if mandate_id is not None and tx.mandates.get(mandate_id) is None:
                return None
            rows = tx.vrp_payments.listing(mandate_id=mandate_id, since=since, until=until, offset=offset, limit=limit)
            following = offset + limit if len(rows) == limit else None
            return {"payments": [payment_json(p) for p in rows], "next_offset": following}

        found = await store.arun(read, write=False)
        return _error(404, f"mandate {mandate_id} is unknown") if found is None else _ok(found)

    async def money(request: Request, actor: Actor) -> Response:
        since, until = window(request, time.now())
        totals = await store.arun(lambda tx: totals_between(tx, since, until), write=False)
        return _ok({"since": iso_ms(since), "until": iso_ms(until), "totals": [t.as_dict() for t in totals]})

    async def find(request: Request, actor: Actor) -> Response:
        wanted = _wanted(request)
        found = await store.arun(lambda tx: find_transfers(tx, wanted, limit=_limit(request)), write=False)
        return _ok({"transfers": found})

    def readers(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """`guarded` for a handler that only reads (any role), whoever the holder is."""

        async def as_actor(request: Request, actor: Actor) -> Response:
            return await handler(request)

        return guarded(as_actor)

    from processor.api.admin_iso import iso_routes

    routes = [
        *lifecycle_routes(
            store,
            guarded=guarded,
            where=where,
            time=time,
            body_of=_body,
            text=_text,
            ok=_ok,
            bad=BadRequestError,
        ),
        *iso_routes(store, time, readers),
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
        Route("/requests/{request_id}/approve", guarded(decision(True)), methods=["POST"]),
        Route("/requests/{request_id}/decline", guarded(decision(False)), methods=["POST"]),
        Route("/audit", guarded(audit), methods=["GET"]),
        Route("/mandates", guarded(mandates), methods=["GET"]),
        Route("/mandates/{mandate_id:path}", guarded(mandate), methods=["GET"]),
        Route("/vrp-payments", guarded(vrp_payments), methods=["GET"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(404, "no such admin endpoint")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return _error(405, "method not allowed")

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})


def _whole(request: Request, name: str) -> int:
    text = _single(request, name) or "0"
    if not text.isdigit() or len(text) > 18:
        raise BadRequestError(f"{name} must be a whole number")
    return int(text)


def _letter_id(request: Request) -> int:
    text = str(request.path_params.get("letter_id", ""))
    if not text.isdigit() or len(text) > 18:
        raise BadRequestError("a dead letter id is a whole number")
    return int(text)


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
