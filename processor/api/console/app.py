"""The operator console: server-rendered pages at `/console` on the processor's HTTP port (docs/console.md).

    GET  /console/                       Batches (filters, counts per status, newest first, pages)
    GET  /console/batches/{batch_id}     Batch (timeline, approval link while it waits, transfers, retries)
    POST /console/retry                  retry the failed transfers of a batch (optional corrections)
    POST /console/withdraw               withdraw a batch not yet initiated at the bank (a reason is required)
    POST /console/confirm-duplicate      let a batch held as a possible duplicate payroll go to the bank
    GET  /console/dead-letters           Dead letters;  GET /console/dead-letters/{id}: one, decoded or as hex
    POST /console/dead-letters/{id}/replay   replay it (a reason is required)
    GET  /console/overview?day=D | month=M | from=D&to=D   Month-end: money counted once (paid, failed, outstanding,
                                         in progress, scheduled) per currency, SVG chart, batches waiting
    GET  /console/mandates               Mandates (VRP: filters, counts, limits with used and left this period)
    GET  /console/mandates/{mandate_id}  Mandate (limits and ledger, payments, timeline, approval link while asking)
    GET|POST /console/sign-in, POST /console/sign-out

Every page but sign-in needs a session (else a redirect to sign-in); every POST needs its form's CSRF token
(else 403). The actions call the same application functions as the admin API (`engine.requests.ask_retry`,
`producers.replay.replay_dead_letter`) with the operator's name. Pages are Jinja2 templates with autoescape;
the only script is a static file (copy button, refresh of the live parts every few seconds), so the CSP allows
no inline script and no eval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
import structlog
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from processor.api.console import signin
from processor.api.console.auth import ConsoleAuth, Operator
from processor.api.console.letters import fill_record, letter_page, letters_page
from processor.api.console.mandate_views import MANDATE_STATUS_STATES, mandate_page, mandates_page
from processor.api.console.views import (
    PAGE_SIZE,
    SORTS,
    STATUS_STATES,
    batch_page,
    batches_page,
    money_text,
    overview_page,
    payday_text,
    shown_status,
)
from processor.api.people import audit_view, replay_audit, request_view
from processor.domain.ledger import month_window
from processor.domain.roles import Action, Controls
from processor.domain.text import text_problem
from processor.domain.time import Clock, SystemClock, iso_ms, within_range
from processor.engine.requests import Where, ask_retry, decide_request
from processor.engine.retries import Correction, RetryError, preview
from processor.engine.vrp_views import amount_text
from processor.engine.withdrawal import WithdrawError, act_audit, confirm_duplicate, lifecycle_detail, withdraw_batch
from processor.store import Store, StoreError, StoreTx
from processor.store.console import BatchFilter
from processor.store.vrp import MandateFilter
from producers.replay import DeadLetterReplayer, ReplayError, replay_dead_letter

log = structlog.get_logger("processor.api.console")

HERE = Path(__file__).parent
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",  # the approval link's token must not leave in a Referer
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
PRE_COOKIE = "dispersion_console_signin"
MAX_TEXT = 500
Page = Callable[[Request, Operator], Awaitable[Response]]


# The only banners a page shows: the server's own messages, picked by `?done=` (a text in the URL is never shown,
# so a link cannot put words in the console's mouth); `{id}` is the page's own batch or dead letter.
NOTICES = {
    "retry": "Created {id} from {original}; it needs its own approval: send the approver its link below.",
    "replayed": "Dead letter {id} replayed: where it landed is in its replays below.",
}


def notice(key: str | None, shown_id: str, original: str) -> str | None:
    """The fixed banner `?done=key` asks for, or None."""
    text = NOTICES.get(key or "")
    return None if text is None else text.format(id=shown_id, original=original)


class BadFormError(ValueError):
    """A form or query we refuse (400); the message says why."""


class _Headers:
    """Adds the security headers to every console answer (pages, redirects, static files)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                for name, value in HEADERS.items():
                    if name.lower().encode() not in names:
                        headers.append((name.lower().encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def _secure(request: Request, public_url: str) -> bool:
    """Served over TLS: the request itself, a proxy saying so, or an https public URL."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https" or urlsplit(public_url).scheme == "https"


def _field(value: object, name: str, *, required: bool = False, limit: int = MAX_TEXT) -> str | None:
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        if required:
            raise BadFormError(f"{name} is required")
        return None
    if len(text) > limit:
        raise BadFormError(f"{name} is longer than {limit} characters")
    bad = text_problem(text)
    if bad is not None:
        raise BadFormError(f"{name} holds {bad}")
    return text


def _address(request: Request) -> str:
    """The client's address (the proxy's, behind one: the console does not trust forwarded-for headers)."""
    return request.client.host if request.client else "unknown"


def _day(value: str | None, name: str) -> datetime | None:
    if not value:
        return None
    try:
        return within_range(datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC))
    except ValueError:
        raise BadFormError(f"{name} must be a date such as 2026-11-30 (years 1900 to 8999)") from None


@dataclass(frozen=True)
class _Listing:
    """A listing page's query, checked: the filter's fields, the page number, the values to show in the form."""

    filter: dict[str, Any]
    page: int
    shown: dict[str, str]


def _listing(request: Request, statuses: Mapping[str, tuple[str, ...]]) -> _Listing:
    """Read a listing's query (status, integration, from, to, q, page); `BadFormError` naming what is wrong."""
    q = request.query_params
    status = q.get("status") or ""
    if status and status not in statuses:
        raise BadFormError(f"unknown status {status!r}")
    since, until = _day(q.get("from"), "from"), _day(q.get("to"), "to")
    page_text = q.get("page") or "0"
    if not page_text.isdigit() or len(page_text) > 6:
        raise BadFormError("page must be a whole number")
    wanted = {
        "states": statuses.get(status, ()),
        "integration": _field(q.get("integration"), "integration", limit=200),
        "since": since,
        "until": until + timedelta(days=1) if until else None,
        "text": _field(q.get("q"), "search", limit=200),
    }
    shown = {k: q.get(k) or "" for k in ("status", "integration", "from", "to", "q")}
    return _Listing(wanted, int(page_text), shown)


def _period(form: Mapping[str, str], now: datetime) -> tuple[datetime, datetime, str]:
    """The overview's window: `month=2026-11`, `from`/`to` days (both included), or `day` (default today, UTC)."""
    if form["month"]:
        try:
            since, until = month_window(form["month"])
        except ValueError:
            raise BadFormError("month must be like 2026-11") from None
        return since, until, f"in {since:%B %Y}"
    start, end = _day(form["from"], "from"), _day(form["to"], "to")
    if start or end:
        if start is None or end is None or end < start:
            raise BadFormError("give both from and to, to not before from")
        return start, end + timedelta(days=1), f"from {start.date()} to {end.date()}"
    day = _day(form["day"], "day") or now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day, day + timedelta(days=1), f"on {day.date()}"


@dataclass(frozen=True)
class Console:
    """What the console's handlers need, kept on its app's state (`request.app.state.console`)."""

    store: Store
    auth: ConsoleAuth
    public_url: str
    integrations: Collection[str] | None
    replayer: DeadLetterReplayer | None
    clock: Clock
    refresh_seconds: float
    controls: Controls
    turns: signin.Turns
    env: jinja2.Environment

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """A page from template `name` (no-store), with the operator's name and CSRF token when signed in."""
        operator: Operator | None = context.pop("operator", None)
        body = self.env.get_template(name).render(
            base=request.scope.get("root_path", ""),
            operator=operator,
            csrf=self.auth.csrf_token(operator.session_id) if operator else "",
            refresh=self.refresh_seconds,
            **context,
        )
        return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})

    def refusal(self, request: Request, operator: Operator, status: int, message: str, back: str) -> HTMLResponse:
        """The error page of an action the application refused, with a link back."""
        return self.render(request, "error.html", status, operator=operator, message=message, back=back)


def _console(request: Request) -> Console:
    console = request.app.state.console
    assert isinstance(console, Console)
    return console


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", ""))


def signed_in(handler: Page, action: Action = Action.READ) -> Callable[[Request], Awaitable[Response]]:
    """`handler` for a signed-in operator whose role may do `action` (else sign-in, or 403); a POST must carry its
    form's CSRF token (else 403). Bad input and an unreachable store are the app's exception handler's."""

    async def run(request: Request) -> Response:
        console = _console(request)
        operator = console.auth.session(request.cookies.get(console.auth.cookie))
        request.state.operator = operator  # for the error page, should the store fail while checking the session
        alive = operator is not None and await signin.session_alive(
            console.store, console.auth, operator, now=console.clock.now()
        )
        if operator is None or not alive:
            return RedirectResponse(f"{_base(request)}/sign-in", status_code=303)
        if not operator.actor.may(action):
            message = f"{operator.name} has the {operator.role} role, which may not {action.value}."
            return console.render(request, "error.html", 403, operator=operator, message=message)
        if request.method == "POST":
            form = await request.form(max_files=0, max_fields=20_000)
            if not console.auth.csrf_ok(operator.session_id, form.get("csrf")):
                log.warning("console_csrf_refused", operator=operator.name, path=request.url.path)
                message = "The form's CSRF token is missing or wrong: reload the page and try again."
                return console.render(request, "error.html", 403, operator=operator, message=message)
        return await handler(request, operator)

    return run


async def _failed(request: Request, exc: Exception) -> Response:
    """The console's one exception handler: bad input 400, the store unreachable 503, no such page 404, a method
    not allowed 405; each an error page (with the operator's name when signed in)."""
    console = _console(request)
    operator: Operator | None = getattr(request.state, "operator", None)
    if isinstance(exc, BadFormError):
        return console.render(request, "error.html", 400, operator=operator, message=str(exc))
    if isinstance(exc, StoreError):
        log.warning("console_store_unavailable", error=str(exc)[:200])
        message = "The store is not reachable; try again."
        return console.render(request, "error.html", 503, operator=operator, message=message)
    if isinstance(exc, HTTPException) and exc.status_code == 405:
        return console.render(request, "error.html", 405, message="Method not allowed.")
    return console.render(request, "error.html", 404, message="No such page.")


# -- sign in / out -------------------------------------------------------------------------------------------


def _sign_in_form(request: Request, problem: str | None = None, status: int = 200) -> Response:
    console = _console(request)
    pre = request.cookies.get(PRE_COOKIE) or console.auth.new_form_id()  # an id for the sign-in form's CSRF token
    response = console.render(request, "sign_in.html", status, csrf_pre=console.auth.csrf_token(pre), problem=problem)
    response.set_cookie(
        PRE_COOKIE,
        pre,
        max_age=600,
        path=_base(request) or "/",
        httponly=True,
        samesite="strict",
        secure=_secure(request, console.public_url),
    )
    return response


async def sign_in_page(request: Request) -> Response:
    """GET /sign-in: the form."""
    return _sign_in_form(request)


async def sign_in(request: Request) -> Response:
    """POST /sign-in: a session cookie and to the batches, or the form again saying why not (slowly)."""
    console = _console(request)
    auth = console.auth
    form = await request.form(max_files=0, max_fields=10)
    if not auth.csrf_ok(request.cookies.get(PRE_COOKIE), form.get("csrf")):
        return _sign_in_form(request, "The sign-in form expired; please try again.", 403)
    name, password = form.get("name"), form.get("password")
    ok = isinstance(name, str) and isinstance(password, str) and len(password) <= 1024 and 0 < len(name) <= 64
    if not ok:
        await asyncio.sleep(0.5)
        return _sign_in_form(request, "Unknown operator or wrong password.", 401)
    attempt = await signin.sign_in(
        console.store,
        auth,
        console.turns,
        str(name),
        str(password),
        address=_address(request),
        now=console.clock.now(),
    )
    if attempt.locked_until is not None:
        await asyncio.sleep(0.5)
        until = attempt.locked_until.strftime("%H:%M:%S UTC")
        return _sign_in_form(request, f"Too many failed sign-ins: signing in is locked until {until}.", 429)
    if attempt.cookie is None:
        await asyncio.sleep(0.5)
        return _sign_in_form(request, "Unknown operator or wrong password.", 401)
    base = _base(request)
    response = RedirectResponse(f"{base}/", status_code=303)
    response.set_cookie(
        auth.cookie,
        attempt.cookie,
        max_age=int(auth.session_seconds),
        path=base or "/",
        httponly=True,
        samesite="strict",
        secure=_secure(request, console.public_url),
    )
    response.delete_cookie(PRE_COOKIE, path=base or "/")
    return response


async def sign_out(request: Request, operator: Operator) -> Response:
    """POST /sign-out: the session ends; to the sign-in form."""
    console, base = _console(request), _base(request)
    await signin.sign_out(console.store, operator, address=_address(request), now=console.clock.now())
    response = RedirectResponse(f"{base}/sign-in", status_code=303)
    response.delete_cookie(console.auth.cookie, path=base or "/", httponly=True, samesite="strict")
    return response


# -- pages ---------------------------------------------------------------------------------------------------


async def batches(request: Request, operator: Operator) -> Response:
    """GET /: the batches."""
    console = _console(request)
    listing = _listing(request, STATUS_STATES)
    wanted, page, filters = BatchFilter(**listing.filter), listing.page, listing.shown
    data = await console.store.arun(lambda tx: batches_page(tx, wanted, page), write=False)
    return console.render(
        request,
        "batches.html",
        operator=operator,
        data=data,
        filters=filters,
        page=page,
        statuses=list(STATUS_STATES),
        page_size=PAGE_SIZE,
    )


async def batch(request: Request, operator: Operator) -> Response:
    """GET /batches/{batch_id}: one batch."""
    console = _console(request)
    store, public_url = console.store, console.public_url
    batch_id = str(request.path_params["batch_id"])
    q = request.query_params
    sort = q.get("sort") or "index"
    if sort not in SORTS:
        raise BadFormError(f"sort must be one of {', '.join(SORTS)}")
    only_failed, descending = q.get("only") == "failed", q.get("dir") == "desc"
    data = await store.arun(
        lambda tx: batch_page(
            tx, batch_id, public_url=public_url, only_failed=only_failed, sort=sort, descending=descending
        ),
        write=False,
    )
    if data is None:
        return console.render(request, "error.html", 404, operator=operator, message=f"Batch {batch_id} is unknown.")
    reviews = await store.arun(lambda tx: [request_view(r) for r in tx.requests.of_batch(batch_id)], write=False)
    life = await store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)
    life["may_withdraw"] = operator.actor.may(Action.WITHDRAW)
    life["may_confirm"] = operator.actor.may(Action.CONFIRM)
    return console.render(
        request,
        "batch.html",
        operator=operator,
        data=data,
        life=life,
        sort=sort,
        descending=descending,
        only_failed=only_failed,
        notice=notice(q.get("done"), data.batch.batch_id, data.original),
        reviews=reviews,
    )


def _fixes(form: FormData) -> dict[int, Correction]:
    """The retry form's new account numbers (`account_<index>`), checked."""
    fixes: dict[int, Correction] = {}
    for key, value in form.multi_items():
        if key.startswith("account_") and key[8:].isdigit() and len(key) < 16:
            number = _field(value, f"new account of transfer #{key[8:]}", limit=64)
            if number is not None:
                fixes[int(key[8:])] = Correction(number)
    return fixes


async def retry(request: Request, operator: Operator) -> Response:
    """POST /retry: without `confirm=yes` the confirmation page (nothing written), with it the retry (or the
    request for a second person)."""
    console = _console(request)
    form = await request.form()
    batch_id = _field(form.get("batch_id"), "batch id", required=True, limit=200)
    assert batch_id is not None
    fixes = _fixes(form)
    base = _base(request)
    back = f"{base}/batches/{quote(batch_id, safe='')}"
    now, known = console.clock.now(), console.integrations
    try:
        if form.get("confirm") != "yes":  # the confirmation step: what would be created, nothing written yet
            plan = await preview(console.store, batch_id, fixes, now=now, integrations=known)
            if plan.outcome.retry_batch_id is None:
                return console.refusal(request, operator, 409, plan.outcome.message, back)
            corrections = sorted((index, fix.account_number) for index, fix in fixes.items())
            return console.render(
                request, "retry_confirm.html", operator=operator, plan=plan, batch_id=batch_id, corrections=corrections
            )
        where = Where("console", _address(request))
        answer = await ask_retry(
            console.store,
            batch_id,
            fixes,
            actor=operator.actor,
            controls=console.controls,
            where=where,
            now=now,
            integrations=known,
        )
    except RetryError as exc:
        return console.refusal(request, operator, exc.status, str(exc), back)
    outcome = answer.outcome
    log.info("console_retry", batch_id=batch_id, retry_batch_id=outcome.retry_batch_id, operator=operator.name)
    if answer.request is not None and answer.request.state == "PENDING":
        return RedirectResponse(f"{base}/requests#request-{answer.request.id}", status_code=303)
    if outcome.retry_batch_id is None:
        return console.refusal(request, operator, 409, outcome.message, back)
    return RedirectResponse(f"{base}/batches/{quote(outcome.retry_batch_id, safe='')}?done=retry", 303)


async def _act(request: Request, operator: Operator, kind: str) -> Response:
    """Withdraw a batch, or confirm a held one (the batch page's buttons), as the signed-in operator (recorded
    with the batch and in the audit trail); back to the batch page."""
    console = _console(request)
    store = console.store
    form = await request.form()
    batch_id = _field(form.get("batch_id"), "batch id", required=True, limit=200)
    assert batch_id is not None
    page = f"{_base(request)}/batches/{quote(batch_id, safe='')}"
    now, place = console.clock.now(), Where("console", _address(request))
    try:
        if kind == "withdraw":
            reason = _field(form.get("reason"), "reason", required=True, limit=500)
            assert reason is not None
            audit = act_audit("withdraw", operator.actor, place, now, reason=reason)
            await asyncio.to_thread(
                withdraw_batch, store, batch_id, by=operator.name, reason=reason, now=now, audit=audit
            )
        else:
            audit = act_audit("confirm-duplicate", operator.actor, place, now)
            await asyncio.to_thread(confirm_duplicate, store, batch_id, by=operator.name, now=now, audit=audit)
    except WithdrawError as exc:
        return console.refusal(request, operator, exc.status, str(exc), page)
    log.info("console_batch_act", batch_id=batch_id, act=kind, operator=operator.name)
    return RedirectResponse(page, status_code=303)


async def withdraw(request: Request, operator: Operator) -> Response:
    """POST /withdraw: withdraw a batch not yet initiated at the bank (a reason is required)."""
    return await _act(request, operator, "withdraw")


async def confirm(request: Request, operator: Operator) -> Response:
    """POST /confirm-duplicate: a batch held as a possible duplicate payroll goes to the bank."""
    return await _act(request, operator, "confirm")


def _whole_number(text: str, message: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise BadFormError(message)
    return int(text)


async def dead_letters(request: Request, operator: Operator) -> Response:
    """GET /dead-letters: the dead letters, a page at a time."""
    console = _console(request)
    after = _whole_number(request.query_params.get("after") or "0", "after must be a dead letter id")
    rows = await console.store.arun(lambda tx: letters_page(tx, after_id=after, limit=PAGE_SIZE + 1), write=False)
    return console.render(
        request,
        "dead_letters.html",
        operator=operator,
        rows=rows[:PAGE_SIZE],
        next_after=rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None,
    )


def _letter_id(request: Request) -> int:
    return _whole_number(str(request.path_params["letter_id"]), "a dead letter id is a whole number")


async def dead_letter(request: Request, operator: Operator) -> Response:
    """GET /dead-letters/{id}: one dead letter, its record decoded or as hex, its replays."""
    console = _console(request)
    letter_id = _letter_id(request)
    data = await console.store.arun(lambda tx: letter_page(tx, letter_id), write=False)
    if data is None:
        message = f"Dead letter {letter_id} is unknown."
        return console.render(request, "error.html", 404, operator=operator, message=message)
    await asyncio.to_thread(fill_record, data, console.replayer)
    shown = notice(request.query_params.get("done"), str(letter_id), "")
    return console.render(request, "dead_letter.html", operator=operator, data=data, notice=shown)


async def replay(request: Request, operator: Operator) -> Response:
    """POST /dead-letters/{id}/replay: replay it (a reason is required), back to its page."""
    console = _console(request)
    letter_id = _letter_id(request)
    form = await request.form()
    reason = _field(form.get("reason"), "reason", required=True)
    assert reason is not None
    back = f"{_base(request)}/dead-letters/{letter_id}"
    if console.replayer is None:
        message = "This instance has no Kafka connection (role api): replay on a processor instance."
        return console.refusal(request, operator, 409, message, back)
    now = console.clock.now()
    try:
        await asyncio.to_thread(
            replay_dead_letter,
            console.store,
            console.replayer,
            letter_id,
            by=operator.name,
            reason=reason,
            now=now,
            force=form.get("force") == "yes",
            audit=replay_audit(operator.actor, Where("console", _address(request)), reason, now),
        )
    except ReplayError as exc:
        return console.refusal(request, operator, exc.status, str(exc), back)
    log.info("console_replay", dead_letter=letter_id, operator=operator.name)
    return RedirectResponse(f"{back}?done=replayed", status_code=303)


async def overview(request: Request, operator: Operator) -> Response:
    """GET /overview: month-end, money counted once."""
    console = _console(request)
    q = request.query_params
    form = {k: q.get(k) or "" for k in ("day", "month", "from", "to")}
    since, until, label = _period(form, console.clock.now())
    data = await console.store.arun(lambda tx: overview_page(tx, since, until, label=label, form=form), write=False)
    return console.render(request, "overview.html", operator=operator, data=data)


async def mandates(request: Request, operator: Operator) -> Response:
    """GET /mandates: the VRP mandates."""
    console = _console(request)
    listing = _listing(request, MANDATE_STATUS_STATES)
    wanted, page, filters, now = MandateFilter(**listing.filter), listing.page, listing.shown, console.clock.now()
    data = await console.store.arun(lambda tx: mandates_page(tx, wanted, page, now), write=False)
    statuses = list(MANDATE_STATUS_STATES)
    shown: dict[str, Any] = {"data": data, "filters": filters, "page": page, "statuses": statuses}
    return console.render(request, "mandates.html", operator=operator, **shown)


async def mandate(request: Request, operator: Operator) -> Response:
    """GET /mandates/{mandate_id}: one mandate."""
    console = _console(request)
    mandate_id, now, public_url = str(request.path_params["mandate_id"]), console.clock.now(), console.public_url
    data = await console.store.arun(
        lambda tx: mandate_page(tx, mandate_id, public_url=public_url, now=now), write=False
    )
    if data is None:
        message = f"Mandate {mandate_id} is unknown."
        return console.render(request, "error.html", 404, operator=operator, message=message)
    return console.render(request, "mandate.html", operator=operator, data=data)


async def requests(request: Request, operator: Operator) -> Response:
    """GET /requests: requests waiting for a second person, and the latest decided."""
    console = _console(request)

    def read(tx: StoreTx) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        pending = tx.requests.listed(states=("PENDING",), limit=200)
        decided = tx.requests.listed(states=("APPROVED", "DECLINED"), limit=PAGE_SIZE, newest_first=True)
        return [request_view(r) for r in pending], [request_view(r) for r in decided]

    pending, decided = await console.store.arun(read, write=False)
    return console.render(
        request,
        "requests.html",
        operator=operator,
        pending=pending,
        decided=decided,
        may_decide=operator.actor.may(Action.DECIDE),
    )


async def _decide(request: Request, operator: Operator, *, approve: bool) -> Response:
    console = _console(request)
    request_id = _whole_number(str(request.path_params["request_id"]), "a request id is a whole number")
    base = _base(request)
    try:
        decided = await decide_request(
            console.store,
            request_id,
            approve=approve,
            actor=operator.actor,
            where=Where("console", _address(request)),
            now=console.clock.now(),
            integrations=console.integrations,
        )
    except RetryError as exc:
        return console.refusal(request, operator, exc.status, str(exc), f"{base}/requests")
    log.info("console_request_decided", request=decided.id, state=decided.state, operator=operator.name)
    return RedirectResponse(f"{base}/requests#request-{decided.id}", status_code=303)


async def approve(request: Request, operator: Operator) -> Response:
    """POST /requests/{id}/approve."""
    return await _decide(request, operator, approve=True)


async def decline(request: Request, operator: Operator) -> Response:
    """POST /requests/{id}/decline."""
    return await _decide(request, operator, approve=False)


async def audit(request: Request, operator: Operator) -> Response:
    """GET /audit: the audit trail since a day (default the last seven), a page at a time."""
    console = _console(request)
    q = request.query_params
    since = _day(q.get("since"), "since") or console.clock.now().astimezone(UTC).replace(
        hour=0, minute=0, second=0, microsecond=0
    ) - timedelta(days=6)
    after = _whole_number(q.get("after") or "0", "after must be an entry id")
    rows = await console.store.arun(lambda tx: tx.audit.since(since, after_id=after, limit=PAGE_SIZE + 1), write=False)
    return console.render(
        request,
        "audit.html",
        operator=operator,
        rows=[audit_view(r) for r in rows[:PAGE_SIZE]],
        since=since.date().isoformat(),
        next_after=rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None,
    )


ROUTES = [
    Route("/sign-in", sign_in_page, methods=["GET"]),
    Route("/sign-in", sign_in, methods=["POST"]),
    Route("/sign-out", signed_in(sign_out), methods=["POST"]),
    Route("/", signed_in(batches), methods=["GET"]),
    Route("/batches/{batch_id:path}", signed_in(batch), methods=["GET"]),
    Route("/retry", signed_in(retry, Action.RETRY), methods=["POST"]),
    Route("/withdraw", signed_in(withdraw, Action.WITHDRAW), methods=["POST"]),
    Route("/confirm-duplicate", signed_in(confirm, Action.CONFIRM), methods=["POST"]),
    Route("/dead-letters", signed_in(dead_letters), methods=["GET"]),
    Route("/dead-letters/{letter_id}", signed_in(dead_letter), methods=["GET"]),
    Route("/dead-letters/{letter_id}/replay", signed_in(replay, Action.REPLAY), methods=["POST"]),
    Route("/overview", signed_in(overview), methods=["GET"]),
    Route("/mandates", signed_in(mandates), methods=["GET"]),
    Route("/mandates/{mandate_id:path}", signed_in(mandate), methods=["GET"]),
    Route("/requests", signed_in(requests), methods=["GET"]),
    Route("/requests/{request_id}/approve", signed_in(approve), methods=["POST"]),
    Route("/requests/{request_id}/decline", signed_in(decline), methods=["POST"]),
    Route("/audit", signed_in(audit), methods=["GET"]),
    Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
]


def console_app(
    store: Store,
    auth: ConsoleAuth,
    *,
    public_url: str,
    integrations: Collection[str] | None = None,
    replayer: DeadLetterReplayer | None = None,
    clock: Clock | None = None,
    refresh_seconds: float = 3.0,
    controls: Controls | None = None,
) -> ASGIApp:
    """The console (see the module docstring), to be mounted at `/console`: the routes above, their dependencies
    on the app's state."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.filters["money"] = money_text
    env.filters["status"] = shown_status
    env.filters["q"] = lambda value: quote(str(value), safe="")
    env.filters["day"] = payday_text
    env.filters["vrp_amount"] = amount_text
    env.filters["iso"] = iso_ms  # instants: ISO 8601 UTC with milliseconds
    handlers = {BadFormError: _failed, StoreError: _failed, 404: _failed, 405: _failed}
    app = Starlette(routes=ROUTES, exception_handlers=handlers)
    app.state.console = Console(
        store=store,
        auth=auth,
        public_url=public_url,
        integrations=integrations,
        replayer=replayer,
        clock=clock or SystemClock(),
        refresh_seconds=refresh_seconds,
        controls=controls or Controls(),
        turns=signin.Turns(),
        env=env,
    )
    return _Headers(app)


_OFF_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>The console is off · dispersion</title><link rel="stylesheet" href="/console/static/console.css"></head>
<body><header class="top"><span class="brand">dispersion console</span></header><main>
<h1>The operator console is off on this processor</h1>
<p>It is served here once the configuration file names at least one operator. Add, then restart the processor:</p>
<pre>[console]
operators = { ana = "scrypt:..." }   # the line `dispersion console hash-password ana` prints
session_key_env = "DISPERSION_CONSOLE_SESSION_KEY"   # at least 32 characters, the same on every instance</pre>
<p><code>dispersion sandbox init DIR</code> writes such a table (and <code>[admin]</code>) with fresh secrets and
prints them once; <code>dispersion demo</code> configures an operator for its run. More in docs/console.md.</p>
</main></body></html>
"""


def console_off() -> ASGIApp:
    """`/console` on a processor whose configuration names no operator: a page (404) saying how to turn it on,
    and the console's stylesheet for it."""

    async def off(request: Request) -> Response:
        return HTMLResponse(_OFF_PAGE, status_code=404, headers={"Cache-Control": "no-store"})

    routes = [
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        Route("/{path:path}", off, methods=["GET", "HEAD"]),
    ]
    return _Headers(Starlette(routes=routes))
