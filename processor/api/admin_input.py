"""What every admin API handler shares (`processor.api.admin` and its neighbours): the app's state (`AdminState` on
`request.app.state.admin`), the token guard, the one exception handler, the JSON answers and the query readers.
Request bodies are parsed by `processor.api.admin_bodies`."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from processor.domain.ledger import day_window, month_window
from processor.domain.roles import Action, Actor, AdminToken, Controls
from processor.domain.text import text_problem
from processor.domain.time import Clock, within_range
from processor.engine.requests import Where
from processor.engine.retries import RetryError
from processor.engine.withdrawal import WithdrawError
from processor.store import Store, StoreError
from producers.replay import DeadLetterReplayer, ReplayError

log = structlog.get_logger("processor.api.admin")

MAX_LIMIT = 500
MAX_ID = 200
Handler = Callable[[Request, Actor], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


class BadRequestError(ValueError):
    """Input we refuse; the message says why (400)."""


class ForbiddenError(ValueError):
    """The token's holder may not do this (403)."""


@dataclass(frozen=True)
class AdminState:
    """What the admin API's handlers need, kept on its app's state."""

    store: Store
    holders: tuple[AdminToken, ...]
    integrations: Collection[str] | None
    replayer: DeadLetterReplayer | None
    clock: Clock
    controls: Controls


def state(request: Request) -> AdminState:
    """The admin API's dependencies, from the app serving `request`."""
    found = request.app.state.admin
    assert isinstance(found, AdminState)
    return found


def error(status: int, message: str) -> JSONResponse:
    """`{"error": message}` with `status`, never cached."""
    return JSONResponse({"error": message}, status_code=status, headers={"Cache-Control": "no-store"})


def ok(body: Any, status: int = 200) -> JSONResponse:
    """A JSON answer, never cached."""
    return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def token_digest(token: str) -> str:
    """The SHA-256 (hex) of an admin token, as `token_sha256` holds it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


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


def guarded(handler: Handler, action: Action = Action.READ) -> Endpoint:
    """`handler` for the holder of a configured token whose role may do `action` (else 401 or 403)."""

    async def run(request: Request) -> Response:
        holders = state(request).holders
        if not holders:
            return error(401, "the admin API is not configured: set [admin.tokens.NAME] (or [admin] token_sha256)")
        actor = _holder(request, holders)
        if actor is None:
            return error(401, "a valid admin token is required (Authorization: Bearer ...)")
        if not actor.may(action):
            log.info("admin_refused_role", actor=actor.name, role=str(actor.role), path=request.url.path)
            return error(403, f"{actor.name} has the {actor.role} role, which may not {action.value} here")
        return await handler(request, actor)

    return run


async def refused(request: Request, exc: Exception) -> Response:
    """The admin API's one exception handler: bad input 400, a holder who may not 403, a refused action its own
    status (409 mostly), the store unreachable 503, no such endpoint 404, a method not allowed 405."""
    if isinstance(exc, BadRequestError):
        return error(400, str(exc))
    if isinstance(exc, ForbiddenError):
        return error(403, str(exc))
    if isinstance(exc, RetryError | ReplayError | WithdrawError):
        return error(exc.status, str(exc))
    if isinstance(exc, StoreError):
        log.warning("admin_store_unavailable", error=str(exc)[:200])
        return error(503, "the store is not reachable; try again")
    if isinstance(exc, HTTPException) and exc.status_code == 405:
        return error(405, "method not allowed")
    return error(404, "no such admin endpoint")


EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    kind: refused
    for kind in (BadRequestError, ForbiddenError, RetryError, ReplayError, WithdrawError, StoreError, 404, 405)
}


def where(request: Request) -> Where:
    """Where an admin API action came from, for the audit trail."""
    return Where("admin-api", request.client.host if request.client else None)


# -- reading the query ---------------------------------------------------------------------------------------


def single(request: Request, name: str) -> str | None:
    """Query parameter `name`, given at most once."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise BadRequestError(f"{name} is given more than once")
    return values[0] if values else None


def instant(request: Request, name: str) -> datetime | None:
    """Query parameter `name` as a time: a bare day (its midnight UTC) or ISO 8601 with an offset."""
    text = single(request, name)
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


def offset(request: Request) -> int:
    """`offset`, a whole number (default 0)."""
    text = single(request, "offset") or "0"
    if not text.isdigit() or len(text) > 9:
        raise BadRequestError("offset must be a whole number")
    return int(text)


def limit(request: Request) -> int:
    """`limit`, 1 to MAX_LIMIT (default 100)."""
    text = single(request, "limit")
    if text is None:
        return 100
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise BadRequestError(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return int(text)


def whole(request: Request, name: str) -> int:
    """Query parameter `name`, a whole number (default 0)."""
    text = single(request, name) or "0"
    if not text.isdigit() or len(text) > 18:
        raise BadRequestError(f"{name} must be a whole number")
    return int(text)


def text_fault(value: object, limit: int) -> str | None:
    """What is wrong with `value` as a text of at most `limit` characters with no control, bidi or lone surrogate
    character (`must be a non-empty string`, `is longer than ...`, `holds ...`), or None."""
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty string"
    if len(value) > limit:
        return f"is longer than {limit} characters"
    bad = text_problem(value)
    return None if bad is None else f"holds {bad}"


def text(value: object, name: str, *, limit: int = MAX_ID, required: bool = True) -> str | None:
    """`value` as a text (see `text_fault`); None only when not `required`."""
    if value is None and not required:
        return None
    fault = text_fault(value, limit)
    if fault is not None:
        raise BadRequestError(f"{name} {fault}")
    assert isinstance(value, str)
    return value


def path_id(request: Request, name: str) -> str:
    """Path parameter `name`, a text."""
    value = text(request.path_params.get(name), name)
    assert value is not None
    return value


def window(request: Request, now: datetime | None = None) -> tuple[datetime, datetime]:
    """A report's window: `day=2026-11-30`, `month=2026-11`, or `since` and `until` (`since` earlier; with `now`,
    `until` may be left out and is now)."""
    day, month = single(request, "day"), single(request, "month")
    try:
        if day is not None:
            return day_window(day)
        if month is not None:
            return month_window(month)
    except ValueError:
        raise BadRequestError("day must be like 2026-11-30, month like 2026-11") from None
    since, until = instant(request, "since"), instant(request, "until") or now
    if since is None or until is None:
        raise BadRequestError("since and until are required" if now is None else "give day, month or since")
    if until <= since:
        raise BadRequestError("until must be later than since")
    return since, until
