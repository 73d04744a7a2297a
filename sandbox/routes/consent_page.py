"""The consent page (`GET {issuer}/auth`) and the approver's decision (`POST {issuer}/auth/decision`).

The page (sandbox.pages renders it) shows what the approver agrees to. The decision (sandbox.oauth.par.decide)
consumes the pushed authorization request, moves the consent to `Authorised` (with a code) or `Rejected`, and
answers 303 to `redirect_uri?code=…&state=…&iss=…` or `redirect_uri?error=access_denied&…`.
When the client registered a `callback_url`, the same redirect URL is also POSTed to it as
`{"redirect_url": …}` after the browser's answer is sent; each delivery is recorded in the store (kind
`callback_delivery`) and a failed delivery never affects the browser's redirect.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from urllib.parse import urlsplit

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from sandbox.clients import Client
from sandbox.clock import iso_ms
from sandbox.errors import SandboxError
from sandbox.oauth.par import ParUnavailableError, Pending, decide, pending_authorization
from sandbox.pages import PageError, render_consent_page, render_error_page
from sandbox.routes.http import read_form
from sandbox.state import Bank
from sandbox.store import Doc

log = logging.getLogger("sandbox.consent")

DELIVERY_KIND = "callback_delivery"
_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
# The page's title for each reason a pushed request cannot be decided on.
_TITLES = {
    "request_uri_missing": "Incomplete link",
    "request_uri_expired": "This authorization request has expired",
    "request_uri_used": "This authorization request was already decided",
    "consent_not_awaiting": "Nothing to authorise",
}


def _page(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=dict(_PAGE_HEADERS))


def _pending(bank: Bank, request_uri: str | None) -> Pending:
    try:
        return pending_authorization(bank, request_uri)
    except ParUnavailableError as exc:
        raise PageError(_TITLES.get(exc.reason, "Unknown authorization request"), exc.message) from None


# --- callback delivery (I/O) -----------------------------------------------------------------------------


async def deliver_callback(bank: Bank, client: Client, consent_id: str, decision: str, location: str) -> Doc:
    """POST `{"redirect_url": location}` to the client's callback_url once; record and return the outcome."""
    url = client.callback_url or ""
    record: Doc = {
        "client_id": client.client_id,
        "consent_id": consent_id,
        "decision": decision,
        "callback_url": url,
        "at": iso_ms(bank.now()),
        "outcome": "failed",
        "http_status": None,
        "reason": "",
    }
    try:
        async with httpx.AsyncClient(timeout=bank.config.callback_timeout, follow_redirects=False) as http:
            response = await http.post(url, json={"redirect_url": location})
        record["http_status"] = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code == 200 and isinstance(body, dict) and body.get("status") == "success":
            record["outcome"] = "delivered"
        else:
            record["outcome"] = "refused"
            record["reason"] = 'expected 200 {"status": "success", ...}'
    except httpx.HTTPError as exc:
        record["reason"] = f"{exc.__class__.__name__}: {exc}"[:300]
    except Exception as exc:  # a background task must never raise; the redirect already went out
        record["reason"] = f"{exc.__class__.__name__}"
        log.exception("callback delivery crashed: client=%s consent=%s", client.client_id, consent_id)
    bank.store.put(DELIVERY_KIND, bank.new_uuid(), record)
    log.info(
        "callback %s: client=%s consent=%s url=%s status=%s %s",
        record["outcome"],
        client.client_id,
        consent_id,
        url,
        record["http_status"],
        record["reason"],
    )
    return record


# --- routes ----------------------------------------------------------------------------------------------


def routes(bank: Bank) -> list[BaseRoute]:
    """The consent page and the decision."""
    decision_path = urlsplit(bank.config.issuer).path.rstrip("/") + "/auth/decision"

    async def consent_page(request: Request) -> Response:
        query = request.query_params
        request_uri = query.get("request_uri") or ""
        try:
            pending = _pending(bank, request_uri)
            par = pending.par
            if query.get("client_id") != par["client_id"]:
                raise PageError("Invalid link", "The client_id of the link does not match the authorization request.")
            if query.get("response_type") != "code":
                raise PageError("Invalid link", "The link's response_type must be code.")
            if query.get("scope") != "payments":
                raise PageError("Invalid link", "The link's scope must be payments.")
        except PageError as exc:
            return _page(render_error_page(exc.title, exc.message), 400)
        expires = datetime.fromtimestamp(float(par["expires_at"]), UTC)
        body = render_consent_page(
            pending.client.name or pending.client.client_id,
            par["consent_id"],
            pending.kind,
            pending.consent.get("data") or {},
            request_uri,
            decision_path,
            iso_ms(expires),
        )
        return _page(body)

    async def consent_decision(request: Request) -> Response:
        try:
            try:
                form = await read_form(bank, request)
            except SandboxError:
                raise PageError("Invalid decision", "The decision must be posted by the consent page's form.") from None
            decision = form.get("decision")
            if decision not in ("approve", "reject"):
                raise PageError("Invalid decision", "The decision must be approve or reject.")
            pending = _pending(bank, form.get("request_uri"))
        except PageError as exc:
            return _page(render_error_page(exc.title, exc.message), 400)
        location = decide(bank, pending, decision == "approve")
        client, consent_id = pending.client, str(pending.par["consent_id"])
        background = None
        if client.callback_url:
            background = BackgroundTask(deliver_callback, bank, client, consent_id, str(decision), location)
        return RedirectResponse(location, status_code=303, headers={"Cache-Control": "no-store"}, background=background)

    return [
        Route("/auth", consent_page, methods=["GET"], name="consent-page"),
        Route("/auth/decision", consent_decision, methods=["POST"], name="consent-decision"),
    ]
