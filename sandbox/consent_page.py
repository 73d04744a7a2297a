"""The consent page (`GET {issuer}/auth`) and the approver's decision (`POST {issuer}/auth/decision`).

The page shows what the approver agrees to: for a file consent the file reference, the number of
transactions, the total and its currency (and the transfers); for a VRP mandate the creditor, the limits and
the validity. Approve and Reject are two forms (buttons `#approve` and `#reject`) posting the request_uri.

The decision consumes the pushed authorization request, moves the consent to `Authorised` (with a code) or
`Rejected`, and answers 303 to `redirect_uri?code=…&state=…&iss=…` or `redirect_uri?error=access_denied&…`.
When the client registered a `callback_url`, the same redirect URL is also POSTed to it as
`{"redirect_url": …}` after the browser's answer is sent; each delivery is recorded in the store (kind
`callback_delivery`) and a failed delivery never affects the browser's redirect.

Every value placed in the HTML is escaped.
"""

from __future__ import annotations

import functools
import html
import logging
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from importlib import resources
from string import Template
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from sandbox.authserver import AUTHORISED, AWAITING, PAR_KIND, ParUnavailableError, issue_code, live_par
from sandbox.clients import Client
from sandbox.clock import iso_ms
from sandbox.consents import FILE_KIND, find_consent, set_status
from sandbox.errors import SandboxError
from sandbox.http import read_form
from sandbox.state import Bank
from sandbox.store import Doc

log = logging.getLogger("sandbox.consent")

DELIVERY_KIND = "callback_delivery"
REJECTED = "Rejected"
MAX_LISTED_TRANSFERS = 25
_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class PageError(Exception):
    """A request the page cannot serve; shown to the person as an HTML error page with 400."""

    def __init__(self, title: str, message: str) -> None:
        super().__init__(message)
        self.title = title
        self.message = message


# --- rendering (pure) ------------------------------------------------------------------------------------


@functools.cache
def template(name: str) -> Template:
    """A page template shipped in sandbox/templates."""
    return Template(resources.files("sandbox").joinpath("templates", name).read_text(encoding="utf-8"))


def esc(value: object) -> str:
    """HTML-escape any value (attribute-safe)."""
    return html.escape("" if value is None else str(value), quote=True)


def format_amount(value: object) -> str:
    """An amount for people: thousands separators, two decimals unless it has more."""
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return str(value)
    if not number.is_finite():
        return str(value)
    exponent = number.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -2:
        return f"{number:,f}"
    return f"{number:,.2f}"


def _get(obj: object, *path: str | int) -> Any:
    """Walk dicts and lists; None when any step is missing."""
    for step in path:
        if isinstance(step, int) and isinstance(obj, list) and -len(obj) <= step < len(obj):
            obj = obj[step]
        elif isinstance(step, str) and isinstance(obj, dict):
            obj = obj.get(step)
        else:
            return None
    return obj


def _summary(rows: list[tuple[str, str, str | None]]) -> str:
    """A <dl> of (label, already-escaped value html, element id)."""
    items = []
    for label, value_html, element_id in rows:
        ident = f' id="{esc(element_id)}"' if element_id else ""
        items.append(f"<dt>{esc(label)}</dt><dd{ident}>{value_html}</dd>")
    return '<dl class="summary">' + "".join(items) + "</dl>"


def file_consent_details(data: dict[str, Any]) -> str:
    """What a file payment consent commits to: reference, count, total and currency, and its transfers."""
    initiation = _get(data, "Initiation") or {}
    transactions = _get(initiation, "SupplementaryData", "data", "transaction")
    transactions = transactions if isinstance(transactions, list) else []
    currency = _get(transactions, 0, "originAccount", "currency") or "(currency not stated)"
    origin = _get(transactions, 0, "originAccount", "accountNumber")
    total = f"{esc(format_amount(_get(initiation, 'ControlSum')))} {esc(currency)}"
    rows: list[tuple[str, str, str | None]] = [
        ("File reference", f'<span class="figure">{esc(_get(initiation, "FileReference"))}</span>', "file-reference"),
        (
            "Number of transactions",
            f'<span class="figure">{esc(_get(initiation, "NumberOfTransactions"))}</span>',
            "number-of-transactions",
        ),
        ("Total", f'<span class="figure">{total}</span>', "control-sum"),
        ("Currency", esc(currency), "currency"),
        ("From account", esc(origin or "(not stated)"), "origin-account"),
        ("File type", esc(_get(initiation, "FileType")), None),
    ]
    parts = ["<h2>Funds dispersion (file payment)</h2>", _summary(rows)]
    if transactions:
        lines = []
        for i, tx in enumerate(transactions[:MAX_LISTED_TRANSFERS], start=1):
            amount = format_amount(_get(tx, "transferInfo", "transactionAmount"))
            lines.append(
                f"<tr><td>{i}</td><td>{esc(_get(tx, 'destinationAccount', 'accountNumber'))}</td>"
                f"<td>{esc(_get(tx, 'destinationAccount', 'email'))}</td>"
                f"<td>{esc(_get(tx, 'transferInfo', 'concept'))}</td>"
                f'<td class="amount">{esc(amount)} {esc(_get(tx, "destinationAccount", "currency"))}</td></tr>'
            )
        parts.append(
            '<h2>Transfers</h2><table id="transfers"><thead><tr><th>#</th><th>To account</th><th>Holder e-mail</th>'
            '<th>Concept</th><th class="amount">Amount</th></tr></thead><tbody>' + "".join(lines) + "</tbody></table>"
        )
        if len(transactions) > MAX_LISTED_TRANSFERS:
            more = len(transactions) - MAX_LISTED_TRANSFERS
            parts.append(f'<p class="note">… and {more} more transfers, included in the total above.</p>')
    return "".join(parts)


def _money(obj: object) -> str:
    return f"{format_amount(_get(obj, 'Amount'))} {_get(obj, 'Currency') or ''}".strip()


def vrp_consent_details(data: dict[str, Any]) -> str:
    """What a VRP mandate commits to: the creditor, the per-payment and periodic limits, the validity."""
    control = _get(data, "ControlParameters") or {}
    creditor = _get(data, "Initiation", "CreditorAccount") or {}
    validity = (
        f"{esc(_get(control, 'ValidFromDateTime') or '(open)')} to {esc(_get(control, 'ValidToDateTime') or '(open)')}"
    )
    vrp_types = _get(control, "VRPType")
    rows: list[tuple[str, str, str | None]] = [
        ("Pay to", f'<span class="figure">{esc(_get(creditor, "Name"))}</span>', "creditor-name"),
        ("Creditor account", f"{esc(_get(creditor, 'Identification'))} ({esc(_get(creditor, 'SchemeName'))})", None),
        (
            "Maximum per payment",
            f'<span class="figure">{esc(_money(_get(control, "MaximumIndividualAmount")))}</span>',
            "maximum-individual-amount",
        ),
        ("Valid", validity, "validity"),
        ("Type", esc(", ".join(map(str, vrp_types)) if isinstance(vrp_types, list) else vrp_types), None),
        ("Reference", esc(_get(data, "RemittanceInformation", "Reference")), None),
        ("Description", esc(_get(data, "RemittanceInformation", "Unstructured")), None),
    ]
    parts = ["<h2>Variable recurring payments (sweeping mandate)</h2>", _summary(rows)]
    limits = _get(control, "PeriodicLimits")
    if isinstance(limits, list) and limits:
        lines = [
            f"<tr><td>{esc(_get(limit, 'PeriodType'))}</td><td>{esc(_get(limit, 'PeriodAlignment'))}</td>"
            f'<td class="amount">{esc(_money(limit))}</td></tr>'
            for limit in limits
        ]
        parts.append(
            '<h2>Limits per period</h2><table id="periodic-limits"><thead><tr><th>Period</th><th>Counted from</th>'
            '<th class="amount">At most</th></tr></thead><tbody>' + "".join(lines) + "</tbody></table>"
        )
    else:
        parts.append('<p class="note" id="periodic-limits">No limits per period.</p>')
    return "".join(parts)


def render_consent_page(
    client_name: str, consent_id: str, kind: str, data: dict[str, Any], request_uri: str, action: str, expires: str
) -> str:
    """The full consent page."""
    is_file = kind == FILE_KIND
    details = file_consent_details(data) if is_file else vrp_consent_details(data)
    title = "Authorise a funds dispersion" if is_file else "Authorise variable recurring payments"
    return template("consent.html").substitute(
        title=esc(title),
        client_name=esc(client_name),
        consent_id=esc(consent_id),
        details=details,
        action=esc(action),
        request_uri=esc(request_uri),
        expires_at=esc(expires),
    )


def render_error_page(title: str, message: str) -> str:
    """The page shown for a request that cannot be served."""
    return template("error.html").substitute(title=esc(title), message=esc(message))


def redirect_location(redirect_uri: str, params: dict[str, str]) -> str:
    """The redirect URI with the result parameters appended to its query."""
    separator = "&" if urlsplit(redirect_uri).query else ("" if redirect_uri.endswith("?") else "?")
    return f"{redirect_uri}{separator}{urlencode(params)}"


def _page(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=dict(_PAGE_HEADERS))


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


def _par_and_consent(bank: Bank, request_uri: str | None) -> tuple[Doc, str, Doc, Client]:
    """The live PAR, its consent (still awaiting authorisation) and its client, or a PageError."""
    if not request_uri:
        raise PageError("Incomplete link", "The link has no request_uri.")
    try:
        par = live_par(bank, request_uri)
    except ParUnavailableError as exc:
        titles = {
            "request_uri_expired": "This authorization request has expired",
            "request_uri_used": "This authorization request was already decided",
        }
        raise PageError(titles.get(exc.reason, "Unknown authorization request"), exc.message) from None
    client = bank.clients.get(par["client_id"])
    found = find_consent(bank, par["consent_id"])
    if client is None or found is None or found[1].get("client_id") != par["client_id"]:
        raise PageError("Unknown authorization request", "The consent of this request no longer exists.")
    kind, consent = found
    if consent["status"] != AWAITING:
        raise PageError(
            "Nothing to authorise", f"Consent {par['consent_id']} is {consent['status']}, not awaiting authorisation."
        )
    return par, kind, consent, client


def routes(bank: Bank) -> list[BaseRoute]:
    """The consent page and the decision."""
    decision_path = urlsplit(bank.config.issuer).path.rstrip("/") + "/auth/decision"

    async def consent_page(request: Request) -> Response:
        query = request.query_params
        request_uri = query.get("request_uri") or ""
        try:
            par, kind, consent, client = _par_and_consent(bank, request_uri)
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
            client.name or client.client_id,
            par["consent_id"],
            kind,
            consent.get("data") or {},
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
            par, kind, _consent, client = _par_and_consent(bank, form.get("request_uri"))
        except PageError as exc:
            return _page(render_error_page(exc.title, exc.message), 400)
        request_uri = form["request_uri"]
        par["used"] = True  # single use: consumed by this decision (no await since it was read)
        bank.store.put(PAR_KIND, request_uri, par)
        consent_id = str(par["consent_id"])
        base = {"state": par["state"], "iss": bank.config.issuer}
        if decision == "approve":
            set_status(bank, kind, consent_id, AUTHORISED)
            params = {"code": issue_code(bank, par), **base}
        else:
            set_status(bank, kind, consent_id, REJECTED)
            params = {"error": "access_denied", **base}
        log.info("consent %s: client=%s consent=%s", decision, client.client_id, consent_id)
        location = redirect_location(str(par["redirect_uri"]), params)
        background = None
        if client.callback_url:
            background = BackgroundTask(deliver_callback, bank, client, consent_id, decision, location)
        return RedirectResponse(location, status_code=303, headers={"Cache-Control": "no-store"}, background=background)

    return [
        Route("/auth", consent_page, methods=["GET"], name="consent-page"),
        Route("/auth/decision", consent_decision, methods=["POST"], name="consent-decision"),
    ]
