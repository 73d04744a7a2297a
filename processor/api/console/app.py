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
from processor.domain.time import Clock, SystemClock, within_range
from processor.engine.requests import Where, ask_retry, decide_request
from processor.engine.retries import Correction, RetryError, preview
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
    """The console (see the module docstring), to be mounted at `/console`."""
    time: Clock = clock or SystemClock()
    rules = controls or Controls()
    turns = signin.Turns()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.filters["money"] = money_text
    env.filters["status"] = shown_status
    env.filters["q"] = lambda value: quote(str(value), safe="")
    env.filters["day"] = payday_text

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        operator: Operator | None = context.pop("operator", None)
        body = env.get_template(name).render(
            base=request.scope.get("root_path", ""),
            operator=operator,
            csrf=auth.csrf_token(operator.session_id) if operator else "",
            refresh=refresh_seconds,
            **context,
        )
        return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})

    def signed_in(handler: Page, action: Action = Action.READ) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            operator = auth.session(request.cookies.get(auth.cookie))
            base = request.scope.get("root_path", "")
            try:
                if operator is None or not await signin.session_alive(store, auth, operator, now=time.now()):
                    return RedirectResponse(f"{base}/sign-in", status_code=303)
                if not operator.actor.may(action):
                    message = f"{operator.name} has the {operator.role} role, which may not {action.value}."
                    return render(request, "error.html", 403, operator=operator, message=message)
                if request.method == "POST":
                    form = await request.form(max_files=0, max_fields=20_000)
                    if not auth.csrf_ok(operator.session_id, form.get("csrf")):
                        log.warning("console_csrf_refused", operator=operator.name, path=request.url.path)
                        return render(
                            request,
                            "error.html",
                            403,
                            operator=operator,
                            message="The form's CSRF token is missing or wrong: reload the page and try again.",
                        )
                return await handler(request, operator)
            except BadFormError as exc:
                return render(request, "error.html", 400, operator=operator, message=str(exc))
            except StoreError as exc:
                log.warning("console_store_unavailable", error=str(exc)[:200])
                return render(
                    request, "error.html", 503, operator=operator, message="The store is not reachable; try again."
                )

        return run

    # -- sign in / out ---------------------------------------------------------------------------------------

    async def sign_in_form(request: Request, problem: str | None = None, status: int = 200) -> Response:
        pre = request.cookies.get(PRE_COOKIE) or auth.new_form_id()  # an id for the sign-in form's CSRF token
        response = render(request, "sign_in.html", status, csrf_pre=auth.csrf_token(pre), problem=problem)
        response.set_cookie(
            PRE_COOKIE,
            pre,
            max_age=600,
            path=request.scope.get("root_path", "") or "/",
            httponly=True,
            samesite="strict",
            secure=_secure(request, public_url),
        )
        return response

    async def sign_in_page(request: Request) -> Response:
        return await sign_in_form(request)

    async def sign_in(request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=10)
        pre = request.cookies.get(PRE_COOKIE)
        if not auth.csrf_ok(pre, form.get("csrf")):
            return await sign_in_form(request, "The sign-in form expired; please try again.", 403)
        name, password = form.get("name"), form.get("password")
        ok = isinstance(name, str) and isinstance(password, str) and len(password) <= 1024 and 0 < len(name) <= 64
        if not ok:
            await asyncio.sleep(0.5)
            return await sign_in_form(request, "Unknown operator or wrong password.", 401)
        address = _address(request)
        attempt = await signin.sign_in(store, auth, turns, str(name), str(password), address=address, now=time.now())
        if attempt.locked_until is not None:
            await asyncio.sleep(0.5)
            until = attempt.locked_until.strftime("%H:%M:%S UTC")
            message = f"Too many failed sign-ins: signing in is locked until {until}."
            return await sign_in_form(request, message, 429)
        if attempt.cookie is None:
            await asyncio.sleep(0.5)
            return await sign_in_form(request, "Unknown operator or wrong password.", 401)
        base = request.scope.get("root_path", "")
        response = RedirectResponse(f"{base}/", status_code=303)
        response.set_cookie(
            auth.cookie,
            attempt.cookie,
            max_age=int(auth.session_seconds),
            path=base or "/",
            httponly=True,
            samesite="strict",
            secure=_secure(request, public_url),
        )
        response.delete_cookie(PRE_COOKIE, path=base or "/")
        return response

    async def sign_out(request: Request, operator: Operator) -> Response:
        base = request.scope.get("root_path", "")
        await signin.sign_out(store, operator, address=_address(request), now=time.now())
        response = RedirectResponse(f"{base}/sign-in", status_code=303)
        response.delete_cookie(auth.cookie, path=base or "/", httponly=True, samesite="strict")
        return response

    # -- pages -----------------------------------------------------------------------------------------------

    async def batches(request: Request, operator: Operator) -> Response:
        listing = _listing(request, STATUS_STATES)
        wanted, page, filters = BatchFilter(**listing.filter), listing.page, listing.shown
        data = await store.arun(lambda tx: batches_page(tx, wanted, page), write=False)
        return render(
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
            return render(request, "error.html", 404, operator=operator, message=f"Batch {batch_id} is unknown.")
        reviews = await store.arun(lambda tx: [request_view(r) for r in tx.requests.of_batch(batch_id)], write=False)
        life = await store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)
        life["may_withdraw"] = operator.actor.may(Action.WITHDRAW)
        life["may_confirm"] = operator.actor.may(Action.CONFIRM)
        return render(
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

    async def retry(request: Request, operator: Operator) -> Response:
        form = await request.form()
        batch_id = _field(form.get("batch_id"), "batch id", required=True, limit=200)
        assert batch_id is not None
        fixes: dict[int, Correction] = {}
        for key, value in form.multi_items():
            if key.startswith("account_") and key[8:].isdigit() and len(key) < 16:
                number = _field(value, f"new account of transfer #{key[8:]}", limit=64)
                if number is not None:
                    fixes[int(key[8:])] = Correction(number)
        base = request.scope.get("root_path", "")
        back = f"{base}/batches/{quote(batch_id, safe='')}"
        confirmed = form.get("confirm") == "yes"
        try:
            if not confirmed:  # the confirmation step: what would be created, nothing written yet
                plan = await preview(store, batch_id, fixes, now=time.now(), integrations=integrations)
            else:
                answer = await ask_retry(
                    store,
                    batch_id,
                    fixes,
                    actor=operator.actor,
                    controls=rules,
                    where=Where("console", _address(request)),
                    now=time.now(),
                    integrations=integrations,
                )
        except RetryError as exc:
            return render(request, "error.html", exc.status, operator=operator, message=str(exc), back=back)
        if not confirmed:
            if plan.outcome.retry_batch_id is None:
                return render(request, "error.html", 409, operator=operator, message=plan.outcome.message, back=back)
            corrections = sorted((index, fix.account_number) for index, fix in fixes.items())
            return render(
                request, "retry_confirm.html", operator=operator, plan=plan, batch_id=batch_id, corrections=corrections
            )
        outcome = answer.outcome
        log.info("console_retry", batch_id=batch_id, retry_batch_id=outcome.retry_batch_id, operator=operator.name)
        if answer.request is not None and answer.request.state == "PENDING":
            return RedirectResponse(f"{base}/requests#request-{answer.request.id}", status_code=303)
        if outcome.retry_batch_id is None:
            return render(request, "error.html", 409, operator=operator, message=outcome.message, back=back)
        return RedirectResponse(f"{base}/batches/{quote(outcome.retry_batch_id, safe='')}?done=retry", 303)

    def act(kind: str) -> Page:
        """Withdraw a batch, or confirm a held one (the batch page's buttons), as the signed-in operator (recorded
        with the batch and in the audit trail); back to the batch page."""

        async def run(request: Request, operator: Operator) -> Response:
            form = await request.form()
            batch_id = _field(form.get("batch_id"), "batch id", required=True, limit=200)
            assert batch_id is not None
            page = f"{request.scope.get('root_path', '')}/batches/{quote(batch_id, safe='')}"
            now, place = time.now(), Where("console", _address(request))
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
                return render(request, "error.html", exc.status, operator=operator, message=str(exc), back=page)
            log.info("console_batch_act", batch_id=batch_id, act=kind, operator=operator.name)
            return RedirectResponse(page, status_code=303)

        return run

    async def dead_letters(request: Request, operator: Operator) -> Response:
        after_text = request.query_params.get("after") or "0"
        if not after_text.isdigit() or len(after_text) > 18:
            raise BadFormError("after must be a dead letter id")
        rows = await store.arun(lambda tx: letters_page(tx, after_id=int(after_text), limit=PAGE_SIZE + 1), write=False)
        return render(
            request,
            "dead_letters.html",
            operator=operator,
            rows=rows[:PAGE_SIZE],
            next_after=rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None,
        )

    def _letter_id(request: Request) -> int:
        text = str(request.path_params["letter_id"])
        if not text.isdigit() or len(text) > 18:
            raise BadFormError("a dead letter id is a whole number")
        return int(text)

    async def dead_letter(request: Request, operator: Operator) -> Response:
        letter_id = _letter_id(request)
        data = await store.arun(lambda tx: letter_page(tx, letter_id), write=False)
        if data is None:
            return render(request, "error.html", 404, operator=operator, message=f"Dead letter {letter_id} is unknown.")
        await asyncio.to_thread(fill_record, data, replayer)
        shown = notice(request.query_params.get("done"), str(letter_id), "")
        return render(request, "dead_letter.html", operator=operator, data=data, notice=shown)

    async def replay(request: Request, operator: Operator) -> Response:
        letter_id = _letter_id(request)
        form = await request.form()
        reason = _field(form.get("reason"), "reason", required=True)
        assert reason is not None
        force = form.get("force") == "yes"
        base = request.scope.get("root_path", "")
        back = f"{base}/dead-letters/{letter_id}"
        if replayer is None:
            return render(
                request,
                "error.html",
                409,
                operator=operator,
                back=back,
                message="This instance has no Kafka connection (role api): replay on a processor instance.",
            )
        now = time.now()
        try:
            await asyncio.to_thread(
                replay_dead_letter,
                store,
                replayer,
                letter_id,
                by=operator.name,
                reason=reason,
                now=now,
                force=force,
                audit=replay_audit(operator.actor, Where("console", _address(request)), reason, now),
            )
        except ReplayError as exc:
            return render(request, "error.html", exc.status, operator=operator, message=str(exc), back=back)
        log.info("console_replay", dead_letter=letter_id, operator=operator.name)
        return RedirectResponse(f"{back}?done=replayed", status_code=303)

    async def overview(request: Request, operator: Operator) -> Response:
        q = request.query_params
        form = {k: q.get(k) or "" for k in ("day", "month", "from", "to")}
        since, until, label = _period(form, time.now())
        data = await store.arun(lambda tx: overview_page(tx, since, until, label=label, form=form), write=False)
        return render(request, "overview.html", operator=operator, data=data)

    async def mandates(request: Request, operator: Operator) -> Response:
        listing = _listing(request, MANDATE_STATUS_STATES)
        wanted, page, filters, now = MandateFilter(**listing.filter), listing.page, listing.shown, time.now()
        data = await store.arun(lambda tx: mandates_page(tx, wanted, page, now), write=False)
        statuses = list(MANDATE_STATUS_STATES)
        shown: dict[str, Any] = {"data": data, "filters": filters, "page": page, "statuses": statuses}
        return render(request, "mandates.html", operator=operator, **shown)

    async def mandate(request: Request, operator: Operator) -> Response:
        mandate_id, now = str(request.path_params["mandate_id"]), time.now()
        data = await store.arun(lambda tx: mandate_page(tx, mandate_id, public_url=public_url, now=now), write=False)
        if data is None:
            return render(request, "error.html", 404, operator=operator, message=f"Mandate {mandate_id} is unknown.")
        return render(request, "mandate.html", operator=operator, data=data)

    async def requests(request: Request, operator: Operator) -> Response:
        def read(tx: StoreTx) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            pending = tx.requests.listed(states=("PENDING",), limit=200)
            decided = tx.requests.listed(states=("APPROVED", "DECLINED"), limit=PAGE_SIZE, newest_first=True)
            return [request_view(r) for r in pending], [request_view(r) for r in decided]

        pending, decided = await store.arun(read, write=False)
        return render(
            request,
            "requests.html",
            operator=operator,
            pending=pending,
            decided=decided,
            may_decide=operator.actor.may(Action.DECIDE),
        )

    def decision(approve: bool) -> Page:
        async def decide(request: Request, operator: Operator) -> Response:
            text = str(request.path_params["request_id"])
            if not text.isdigit() or len(text) > 18:
                raise BadFormError("a request id is a whole number")
            base = request.scope.get("root_path", "")
            try:
                decided = await decide_request(
                    store,
                    int(text),
                    approve=approve,
                    actor=operator.actor,
                    where=Where("console", _address(request)),
                    now=time.now(),
                    integrations=integrations,
                )
            except RetryError as exc:
                back = f"{base}/requests"
                return render(request, "error.html", exc.status, operator=operator, message=str(exc), back=back)
            log.info("console_request_decided", request=decided.id, state=decided.state, operator=operator.name)
            return RedirectResponse(f"{base}/requests#request-{decided.id}", status_code=303)

        return decide

    async def audit(request: Request, operator: Operator) -> Response:
        q = request.query_params
        since = _day(q.get("since"), "since") or time.now().astimezone(UTC).replace(
            hour=0, minute=0, second=0, microsecond=0
        ) - timedelta(days=6)
        after_text = q.get("after") or "0"
        if not after_text.isdigit() or len(after_text) > 18:
            raise BadFormError("after must be an entry id")
        rows = await store.arun(
            lambda tx: tx.audit.since(since, after_id=int(after_text), limit=PAGE_SIZE + 1), write=False
        )
        return render(
            request,
            "audit.html",
            operator=operator,
            rows=[audit_view(r) for r in rows[:PAGE_SIZE]],
            since=since.date().isoformat(),
            next_after=rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None,
        )

    async def not_found(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", 404, message="No such page.")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", 405, message="Method not allowed.")

    routes = [
        Route("/sign-in", sign_in_page, methods=["GET"]),
        Route("/sign-in", sign_in, methods=["POST"]),
        Route("/sign-out", signed_in(sign_out), methods=["POST"]),
        Route("/", signed_in(batches), methods=["GET"]),
        Route("/batches/{batch_id:path}", signed_in(batch), methods=["GET"]),
        Route("/retry", signed_in(retry, Action.RETRY), methods=["POST"]),
        Route("/withdraw", signed_in(act("withdraw"), Action.WITHDRAW), methods=["POST"]),
        Route("/confirm-duplicate", signed_in(act("confirm"), Action.CONFIRM), methods=["POST"]),
        Route("/dead-letters", signed_in(dead_letters), methods=["GET"]),
        Route("/dead-letters/{letter_id}", signed_in(dead_letter), methods=["GET"]),
        Route("/dead-letters/{letter_id}/replay", signed_in(replay, Action.REPLAY), methods=["POST"]),
        Route("/overview", signed_in(overview), methods=["GET"]),
        Route("/mandates", signed_in(mandates), methods=["GET"]),
        Route("/mandates/{mandate_id:path}", signed_in(mandate), methods=["GET"]),
        Route("/requests", signed_in(requests), methods=["GET"]),
        Route("/requests/{request_id}/approve", signed_in(decision(True)), methods=["POST"]),
        Route("/requests/{request_id}/decline", signed_in(decision(False)), methods=["POST"]),
        Route("/audit", signed_in(audit), methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
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
