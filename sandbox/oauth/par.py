"""Pushed authorization requests (E4), the authorization URL (E5) and the approver's decision.

Stored documents (kinds in the bank's store):

- ``par`` keyed by request_uri: client, redirect_uri, consent, state, PKCE challenge, expiry, ``used``.
  Created by PAR; consumed by the approver's decision on the consent page (sandbox/routes/consent_page.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from sandbox.clients import Client
from sandbox.consents import find_consent, set_status
from sandbox.errors import OAuthError
from sandbox.oauth.answer import OAuthAnswer
from sandbox.oauth.assertions import authenticate_assertion
from sandbox.oauth.client_auth import authenticate_basic
from sandbox.oauth.grants import issue_code
from sandbox.oauth.params import AUTHORISED, AWAITING, consent_id_of_scope, may_authorise, missing
from sandbox.state import Bank
from sandbox.store import Doc

log = logging.getLogger("sandbox.auth")

PAR_KIND = "par"
REQUEST_URI_PREFIX = "urn:ietf:params:oauth:request_uri:"
REJECTED = "Rejected"
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")
_PAR_PARAMETERS = (
    "client_id",
    "redirect_uri",
    "scope",
    "response_type",
    "state",
    "code_challenge",
    "code_challenge_method",
    "client_assertion_type",
    "client_assertion",
)


class ParUnavailableError(Exception):
    """A request_uri that cannot be used: `reason` is a short code, `message` says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def live_par(bank: Bank, request_uri: str) -> Doc:
    """The stored PAR of a request_uri that is known, unexpired and not yet consumed."""
    doc = bank.store.get(PAR_KIND, request_uri) if request_uri.startswith(REQUEST_URI_PREFIX) else None
    if doc is None:
        raise ParUnavailableError("request_uri_invalid", "the request_uri is unknown")
    if doc["used"]:
        raise ParUnavailableError("request_uri_used", "the request_uri was already used for a decision")
    if bank.now().timestamp() >= float(doc["expires_at"]):
        raise ParUnavailableError(
            "request_uri_expired", "the request_uri has expired; push a new authorization request"
        )
    return doc


def push_authorization_request(bank: Bank, form: dict[str, str], authorization: str | None) -> OAuthAnswer:
    """E4: check the pushed request (client assertion, PKCE S256, registered redirect, a consent awaiting
    authorisation) and store it under a new request_uri."""
    try:
        missing(form, _PAR_PARAMETERS)
        # The optional Basic header (flow B) is checked first, so a bad header does not spend the assertion's jti.
        basic_client = authenticate_basic(bank, authorization) if authorization is not None else None
        if basic_client is not None and basic_client.client_id != form["client_id"]:
            raise OAuthError("invalid_client", "the Basic credential and client_id name different clients")
        client = authenticate_assertion(
            bank, form["client_assertion_type"], form["client_assertion"], form["client_id"]
        )
        if form["response_type"] != "code":
            raise OAuthError("unsupported_response_type", "response_type must be code")
        if form["code_challenge_method"] != "S256":
            raise OAuthError("invalid_request", "code_challenge_method must be S256")
        if not _CHALLENGE.fullmatch(form["code_challenge"]):
            raise OAuthError("invalid_request", "code_challenge must be the base64url SHA-256 of the verifier")
        if form["redirect_uri"] not in client.redirect_uris:
            raise OAuthError("invalid_request", "redirect_uri is not registered for this client")
        consent_id = consent_id_of_scope(form["scope"])
        found = find_consent(bank, consent_id)
        if found is None or found[1].get("client_id") != client.client_id:
            raise OAuthError("invalid_scope", f"consent {consent_id} does not exist for this client")
        kind, consent = found
        if not may_authorise(kind, consent["status"]):
            raise OAuthError(
                "invalid_request",
                f"consent {consent_id} is {consent['status']}; only a consent in {AWAITING} can be authorised"
                f" (or an {AUTHORISED} VRP consent re-authenticated)",
            )
    except OAuthError as exc:
        return OAuthAnswer.of_error(exc)
    request_uri = REQUEST_URI_PREFIX + bank.new_uuid()
    bank.store.put(
        PAR_KIND,
        request_uri,
        {
            "client_id": client.client_id,
            "redirect_uri": form["redirect_uri"],
            "consent_id": consent_id,
            "consent_kind": kind,
            "state": form["state"],
            "code_challenge": form["code_challenge"],
            "expires_at": bank.now().timestamp() + bank.config.par_ttl,
            "used": False,
        },
    )
    log.info("authorization request pushed: client=%s consent=%s", client.client_id, consent_id)
    return OAuthAnswer.json(
        {"request_uri": request_uri, "expires_in": bank.config.par_ttl}, {"Cache-Control": "no-store"}
    )


def authorization_url(bank: Bank, authorization: str | None, consent_id: str, query: Mapping[str, str]) -> OAuthAnswer:
    """E5: the consent page's address for a pushed request of this client and consent (plain text)."""
    try:
        client = authenticate_basic(bank, authorization)
        request_uri = query.get("request_uri")
        if not request_uri:
            raise OAuthError("general_error", "request_uri_not_specified: the request_uri query parameter is required")
        if query.get("response_type") != "code":
            raise OAuthError("general_error", "invalid_parameter: response_type must be code")
        if query.get("scope") != "payments":
            raise OAuthError("general_error", "invalid_parameter: scope must be payments")
        try:
            doc = live_par(bank, request_uri)
        except ParUnavailableError as exc:
            raise OAuthError("general_error", f"{exc.reason}: {exc.message}") from None
        if doc["client_id"] != client.client_id:
            raise OAuthError("general_error", "request_uri_invalid: the request_uri is unknown")
        if doc["consent_id"] != consent_id:
            raise OAuthError("general_error", "request_uri_mismatch: the request_uri was pushed for another consent")
    except OAuthError as exc:
        return OAuthAnswer.of_error(exc)
    params = {"client_id": client.client_id, "response_type": "code", "scope": "payments", "request_uri": request_uri}
    return OAuthAnswer.text(f"{bank.config.issuer}/auth?{urlencode(params)}")


# --- the approver's decision -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """A pushed request the approver can decide on, with its consent and client."""

    request_uri: str
    par: Doc
    kind: str
    consent: Doc
    client: Client


def pending_authorization(bank: Bank, request_uri: str | None) -> Pending:
    """The live PAR, its consent (still awaiting authorisation) and its client; `ParUnavailableError` otherwise
    (reasons: request_uri_missing, _invalid, _used, _expired, consent_gone, consent_not_awaiting)."""
    if not request_uri:
        raise ParUnavailableError("request_uri_missing", "The link has no request_uri.")
    par = live_par(bank, request_uri)
    client = bank.clients.get(par["client_id"])
    found = find_consent(bank, par["consent_id"])
    if client is None or found is None or found[1].get("client_id") != par["client_id"]:
        raise ParUnavailableError("consent_gone", "The consent of this request no longer exists.")
    kind, consent = found
    if not may_authorise(kind, consent["status"]):
        raise ParUnavailableError(
            "consent_not_awaiting",
            f"Consent {par['consent_id']} is {consent['status']}, not awaiting authorisation.",
        )
    return Pending(request_uri, par, kind, consent, client)


def redirect_location(redirect_uri: str, params: dict[str, str]) -> str:
    """The redirect URI with the result parameters appended to its query."""
    separator = "&" if urlsplit(redirect_uri).query else ("" if redirect_uri.endswith("?") else "?")
    return f"{redirect_uri}{separator}{urlencode(params)}"


def decide(bank: Bank, pending: Pending, approve: bool) -> str:
    """Consume the pushed request, move the consent to Authorised (with a code) or Rejected, and return where
    the browser goes: `redirect_uri?code=…&state=…&iss=…` or `redirect_uri?error=access_denied&…`."""
    par = pending.par
    par["used"] = True  # single use: consumed by this decision
    bank.store.put(PAR_KIND, pending.request_uri, par)
    consent_id = str(par["consent_id"])
    base = {"state": par["state"], "iss": bank.config.issuer}
    if approve:
        set_status(bank, pending.kind, consent_id, AUTHORISED)
        params = {"code": issue_code(bank, par), **base}
    else:
        set_status(bank, pending.kind, consent_id, REJECTED)
        params = {"error": "access_denied", **base}
    log.info(
        "consent %s: client=%s consent=%s", "approve" if approve else "reject", pending.client.client_id, consent_id
    )
    return redirect_location(str(par["redirect_uri"]), params)
