"""The callback API: the client's public API of the spec ("Events"), an ASGI app (Starlette).

- `GET /approve/{kind}/{flow_id}?t=<token>`: 302 to the bank's consent page (a fresh PAR each time), or an
  HTML page saying why not (unknown link 404, deadline passed 410, already authorised 409, bank down 502/503);
- `GET {redirect path}?code&state&iss` (or `?error&state`): the approver's browser after the decision; a small
  HTML page when the request's Accept names `text/html` (browsers do), else the JSON answer below;
- `POST {redirect path}` `{"redirect_url": "..."}`: the bank's delivery of the same redirect; 200
  `{"status": "success", "message"}`, or `{"status": "error", "error", "message"}` with a 4xx/5xx;
- `GET /healthz`: `{"status": "ok", ...}` (200) while the instance can do its work, else 503 with
  `"status": "unavailable"` and a `reason` (a component thread died, the relay has no working producer, the store
  cannot be read; see docs/operations.md).

The redirect path is the path part of each integration's `redirect_uri`. Malformed input (missing or repeated
parameters, a body that is not JSON or nested too deep, a URL that is not ours) gets a 400 with a clear message,
never a 500. HEAD is refused (405) on the approval link and the redirect: it runs no side effect.
Pages carry `Cache-Control: no-store`, `Referrer-Policy: no-referrer` (the approval token and the code must not
leak to other sites) and a CSP that allows no scripts.
"""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from processor.engine.assembly import Engine
from processor.engine.authorization import Authorizer, Outcome

log = structlog.get_logger("processor.api.callback")
Endpoint = Callable[[Request], Awaitable[Response]]

MAX_BODY = 64 * 1024
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
}
_TITLES = {
    "authorized": "Authorization received",
    "rejected": "Rejection received",
    "duplicate": "Already received",
    "already_authorized": "Already authorised",
    "deadline_passed": "Approval deadline passed",
    "ended": "This payment has ended",
    "not_ready": "Not ready yet",
    "unknown_link": "Unknown approval link",
}
_STYLE = (
    "body{font:16px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1d232b;background:#f6f7f9;"
    "margin:0}main{max-width:36em;margin:3em auto;padding:1.2em 1.4em;background:#fff;border:1px solid #d9dee4;"
    "border-radius:6px}h1{font-size:1.4em;margin:0 0 .4em}.batch{color:#66707c;font-size:.95em;word-break:break-all}"
    ".ok h1{color:#0d5d2c}.no h1{color:#8a1212}.payday{font-weight:600}"
)


class BadInputError(ValueError):
    """A request we cannot read; the message says what is wrong."""


def _page(title: str, message: str, status: int, outcome: Outcome | None = None) -> HTMLResponse:
    """The approver's page: what happened, for which batch, and its payday when it has one."""
    batch = ""
    if outcome is not None and outcome.flow_id:
        noun = "Batch" if outcome.kind in (None, "file") else "Mandate or payment"
        batch = f"<p class='batch' id='batch'>{noun} {html.escape(outcome.flow_id)}</p>"
    payday = ""
    if outcome is not None and outcome.paid_on is not None and outcome.paid_on not in message:
        payday = f"<p class='payday' id='payday'>It will be paid on {html.escape(outcome.paid_on)}.</p>"
    body = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><main class='{'ok' if status < 400 else 'no'}'><h1 id='title'>{html.escape(title)}</h1>{batch}"
        f"<p id='message'>{html.escape(message)}</p>{payday}</main></body></html>"
    )
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _single_values(pairs: Mapping[str, list[str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, values in pairs.items():
        if len(values) != 1:
            raise BadInputError(f"parameter {key!r} is repeated")
        out[key] = values[0]
    return out


def _query(request: Request) -> dict[str, str]:
    pairs: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        pairs.setdefault(key, []).append(value)
    return _single_values(pairs)


def parse_redirect_url(raw: object, paths: Collection[str]) -> dict[str, str]:
    """The query parameters of a POSTed `redirect_url`, which must be an http(s) URL on one of our paths."""
    if not isinstance(raw, str) or not raw.strip():
        raise BadInputError("redirect_url must be a non-empty string")
    if len(raw) > 8192:
        raise BadInputError("redirect_url is too long")
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadInputError("redirect_url must be an absolute http(s) URL")
    if parts.path not in paths:
        raise BadInputError("redirect_url does not point at this API's redirect address")
    return _single_values(parse_qs(parts.query, keep_blank_values=True))


@dataclass(frozen=True)
class CallbackState:
    """What the callback API's handlers need, kept on its app's state (`request.app.state.callback`)."""

    authorizer: Authorizer
    paths: frozenset[str]
    health: Callable[[], Awaitable[Mapping[str, Any]]] | None


def _state(request: Request) -> CallbackState:
    found = request.app.state.callback
    assert isinstance(found, CallbackState)
    return found


def _html_wanted(request: Request) -> bool:
    # The approver's browser gets a page, any other client (curl, a bank-side relay) the JSON answer of the POST
    # form. Browsers name text/html in Accept; httpx and curl send */*.
    return "text/html" in request.headers.get("accept", "").lower()


async def approve(request: Request) -> Response:
    """GET /approve/{kind}/{flow_id}?t=: to the bank's consent page, or a page saying why not."""
    if request.method == "HEAD":
        return _head_refused()
    token = _query(request).get("t", "")
    outcome = await _state(request).authorizer.open_link(
        request.path_params["kind"], request.path_params["flow_id"], token
    )
    if outcome.location is not None:
        return RedirectResponse(outcome.location, status_code=302, headers=SECURITY_HEADERS)
    return _page(_title(outcome), outcome.message, outcome.status, outcome)


async def redirect_get(request: Request) -> Response:
    """GET {redirect path}?code&state&iss: a page for the approver's browser, else the JSON answer."""
    if request.method == "HEAD":
        return _head_refused()
    outcome = await _state(request).authorizer.complete(_query(request))
    if _html_wanted(request):
        response: Response = _page(_title(outcome), outcome.message, outcome.status, outcome)
    else:
        response = _json_outcome(outcome)
    response.headers["Vary"] = "Accept"
    return response


async def redirect_post(request: Request) -> Response:
    """POST {redirect path} `{"redirect_url": ...}`: the bank's delivery of the redirect; a JSON answer."""
    state = _state(request)
    params = parse_redirect_url(await _json_field(request, "redirect_url"), state.paths)
    return _json_outcome(await state.authorizer.complete(params))


async def healthz(request: Request) -> Response:
    """GET /healthz: 200 while the instance can do its work, else 503 with a reason."""
    health = _state(request).health
    body = {"status": "ok", **(await health() if health is not None else {})}
    return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)


def _failed(request: Request, exc: Exception, *, link: bool, event: str) -> Response:
    """The callback API's one exception handler: input we cannot read is a 400 saying what is wrong; anything
    else failed on our side, a 503 saying to try again shortly (logged with its trace). A page on the approval
    link and for a browser on the redirect, else JSON."""
    bad = isinstance(exc, BadInputError)
    if not bad:
        log.exception(event, path=request.url.path)
    if link:
        if bad:
            return _page("Invalid link", str(exc), 400)
        return _page("Temporarily unavailable", "Something went wrong on our side. Try again shortly.", 503)
    negotiated = request.method == "GET"
    response: Response
    if negotiated and _html_wanted(request):
        if bad:
            response = _page("Invalid request", str(exc), 400)
        else:
            response = _page("Temporarily unavailable", "Something went wrong on our side. Try again shortly.", 503)
    elif bad:
        response = _json_error(400, "invalid_request", str(exc))
    else:
        response = _json_error(503, "temporarily_unavailable", "Something went wrong on our side; try again.")
    if negotiated:
        response.headers["Vary"] = "Accept"
    return response


def _answered(handler: Endpoint, event: str, *, link: bool = False) -> Endpoint:
    """`handler`, its failures answered by `_failed` (never a 500) and logged as `event`: each route keeps its own
    log line so an on-call engineer can tell a broken approval link from a failed redirect."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            return _failed(request, exc, link=link, event=event)

    return run


def create_app(
    authorizer: Authorizer,
    *,
    redirect_paths: Collection[str],
    health: Callable[[], Awaitable[Mapping[str, Any]]] | None = None,
) -> Starlette:
    """The callback API over an `Authorizer`; `redirect_paths`: the path parts of the integrations' redirect URIs."""
    paths = frozenset(p or "/" for p in redirect_paths)
    if not paths:
        raise ValueError("at least one redirect path is needed")
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/approve/{kind}/{flow_id:path}", _answered(approve, "approval link failed", link=True), methods=["GET"]),
    ]
    for path in sorted(paths):
        routes.append(Route(path, _answered(redirect_get, "redirect handling failed"), methods=["GET"]))
        routes.append(Route(path, _answered(redirect_post, "redirect delivery failed"), methods=["POST"]))
    app = Starlette(routes=routes)
    app.state.callback = CallbackState(authorizer, paths, health)
    return app


def _head_refused() -> Response:
    # Starlette answers HEAD with the GET handler; here GET has effects (a PAR pushed, a `state` used up), and
    # link scanners send HEAD before a person clicks. HEAD is refused and does nothing.
    return Response(status_code=405, headers={**SECURITY_HEADERS, "Allow": "GET"})


def _title(outcome: Outcome) -> str:
    if outcome.code in _TITLES:
        return _TITLES[outcome.code]
    return "Authorization" if outcome.ok else "This did not work"


def _json_outcome(outcome: Outcome) -> JSONResponse:
    if outcome.ok:
        return JSONResponse({"status": "success", "message": outcome.message}, headers=SECURITY_HEADERS)
    return _json_error(outcome.status, outcome.code, outcome.message)


def _json_error(status: int, code: str, message: str) -> JSONResponse:
    body = {"status": "error", "error": code, "message": message}
    return JSONResponse(body, status_code=status, headers=SECURITY_HEADERS)


async def _json_field(request: Request, name: str) -> object:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise BadInputError("the body must be JSON (Content-Type: application/json)")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise BadInputError("the body is too large")
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        raise BadInputError("the body is not valid JSON") from None
    if not isinstance(document, dict) or name not in document:
        raise BadInputError(f'the body must be a JSON object with "{name}"')
    return document[name]


def callback_app(engine: Engine) -> Starlette:
    """The callback API of an assembled engine: its authorizer, on every integration's redirect path."""
    return create_app(engine.authorizer, redirect_paths=engine.redirect_paths())
