"""The token endpoint (E3, E6, refresh): client credentials, authorization codes, refresh tokens, and the
authorization grant that ties a code to every token obtained from it.

Stored documents (kinds in the bank's store):

- ``auth_code`` keyed by the code: bound to client, redirect_uri, PKCE challenge, consent and state;
  single use, ``config.code_ttl`` seconds. Created by the approver's decision (sandbox.oauth.par), consumed
  here; after the exchange it names its ``grant_id``.
- ``grant`` keyed by a grant id: client, consent, every access token issued under the grant and its current
  refresh token. A replayed code revokes the whole grant: the code's tokens and every token obtained by
  refreshing them (RFC 6749 section 4.1.2).
- ``refresh_token`` keyed by the token: client, consent, scope, expiry, grant id. Rotated on every use: a
  refresh returns a new refresh token (same expiry: rotation never extends the grant) and the old one is
  refused afterwards.
- access tokens are issued through sandbox.oauth.tokens.

Secrets (codes, tokens, verifiers, assertions, Basic credentials) are never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
from typing import Any

from sandbox.clients import Client
from sandbox.consents import find_consent
from sandbox.errors import OAuthError
from sandbox.oauth.answer import NO_STORE, OAuthAnswer
from sandbox.oauth.client_auth import authenticate_token_client
from sandbox.oauth.params import AUTHORISED, grant_type_of, missing
from sandbox.oauth.tokens import TOKEN_KIND, issue_access_token
from sandbox.state import Bank
from sandbox.store import Doc

log = logging.getLogger("sandbox.auth")

CODE_KIND = "auth_code"
REFRESH_KIND = "refresh_token"
GRANT_KIND = "grant"
BAD_CODE = "invalid_auth_code_request_uri"
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")
_ADVERTISED_ONLY_GRANTS = ("urn:ietf:params:oauth:grant-type:jwt-bearer", "urn:openid:params:grant-type:ciba")


def pkce_s256(verifier: str) -> str:
    """The S256 code challenge of a verifier (RFC 7636)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def issue_code(bank: Bank, par: Doc) -> str:
    """Create the authorization code for an approved PAR (bound to its client, redirect, PKCE, consent)."""
    code = bank.new_secret()
    bank.store.put(
        CODE_KIND,
        code,
        {
            "client_id": par["client_id"],
            "redirect_uri": par["redirect_uri"],
            "code_challenge": par["code_challenge"],
            "consent_id": par["consent_id"],
            "state": par["state"],
            "expires_at": bank.now().timestamp() + bank.config.code_ttl,
            "used": False,
            "grant_id": None,
        },
    )
    return code


# --- grants: what a code led to --------------------------------------------------------------------------


def _issue_refresh_token(
    bank: Bank, client_id: str, consent_id: str, scope: str, expires_at: float, grant_id: str
) -> str:
    refresh = bank.new_secret()
    bank.store.put(
        REFRESH_KIND,
        refresh,
        {
            "client_id": client_id,
            "consent_id": consent_id,
            "scope": scope,
            "expires_at": expires_at,
            "grant_id": grant_id,
        },
    )
    return refresh


def _record_in_grant(bank: Bank, grant_id: str, client: Client, consent_id: str, access: str, refresh: str) -> None:
    """Add an access token to its grant and make `refresh` the grant's current refresh token."""
    grant = bank.store.get(GRANT_KIND, grant_id) or {
        "client_id": client.client_id,
        "consent_id": consent_id,
        "access_tokens": [],
        "refresh_token": None,
        "revoked": False,
    }
    grant["access_tokens"].append(access)
    grant["refresh_token"] = refresh
    bank.store.put(GRANT_KIND, grant_id, grant)


def revoke_grant(bank: Bank, grant_id: str | None) -> int:
    """Revoke every token of a grant (each access token ever issued under it and its refresh token); returns
    how many tokens were still stored."""
    grant = bank.store.get(GRANT_KIND, grant_id) if grant_id else None
    if grant_id is None or grant is None:
        return 0
    stored = [(TOKEN_KIND, value) for value in grant["access_tokens"]]
    if grant["refresh_token"]:
        stored.append((REFRESH_KIND, grant["refresh_token"]))
    revoked = 0
    for kind, value in stored:
        if bank.store.get(kind, value) is not None:
            bank.store.delete(kind, value)
            revoked += 1
    grant.update(access_tokens=[], refresh_token=None, revoked=True)
    bank.store.put(GRANT_KIND, grant_id, grant)
    return revoked


# --- the grants ------------------------------------------------------------------------------------------


def grant_client_credentials(bank: Bank, client: Client, form: dict[str, str]) -> dict[str, Any]:
    """E3: scope `payments openid` (both, in either order, nothing else) -> a 600 s token with scope `payments`."""
    missing(form, ("scope",))
    tokens = form["scope"].split()
    if len(tokens) != 2 or set(tokens) != {"payments", "openid"}:
        raise OAuthError("invalid_scope", "scope must be 'payments openid'")
    ttl = bank.config.client_credentials_ttl
    token = issue_access_token(bank, client.client_id, "client_credentials", "payments", None, ttl)
    log.info("token issued: client_credentials client=%s", client.client_id)
    return {"access_token": token.value, "token_type": "Bearer", "expires_in": ttl, "scope": "payments"}


def _check_code_scope(scope: str, consent_id: str) -> None:
    tokens = scope.split()
    allowed = {"payments", "openid", f"payments:{consent_id}"}
    if not tokens or not set(tokens) <= allowed or not any(t.startswith("payments") for t in tokens):
        raise OAuthError("invalid_scope", "scope must be 'payments'")


def grant_authorization_code(bank: Bank, client: Client, form: dict[str, str]) -> dict[str, Any]:
    """E6: a single-use code, bound to client, redirect_uri and PKCE verifier, for an Authorised consent."""
    missing(form, ("code", "redirect_uri", "code_verifier", "scope"))
    if not _VERIFIER.fullmatch(form["code_verifier"]):
        raise OAuthError("invalid_request", "code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~")
    code = form["code"]
    doc = bank.store.get(CODE_KIND, code)
    if doc is None:
        raise OAuthError("invalid_grant", f"{BAD_CODE}: unknown authorization code")
    if doc["client_id"] != client.client_id:
        raise OAuthError("invalid_grant", f"{BAD_CODE}: the code was issued to another client")
    _check_code_scope(form["scope"], doc["consent_id"])
    if doc["used"]:
        revoked = revoke_grant(bank, doc.get("grant_id"))
        log.warning(
            "authorization code replayed: client=%s consent=%s; grant revoked (%d tokens)",
            client.client_id,
            doc["consent_id"],
            revoked,
        )
        raise OAuthError(
            "invalid_grant",
            f"{BAD_CODE}: the code was already used; every token issued with it, or by refreshing them, is revoked",
        )
    # Consumed by this attempt whatever its outcome: a code is good for one exchange.
    doc["used"] = True
    bank.store.put(CODE_KIND, code, doc)
    if bank.now().timestamp() >= float(doc["expires_at"]):
        raise OAuthError("invalid_grant", f"{BAD_CODE}: the code has expired")
    if form["redirect_uri"] != doc["redirect_uri"]:
        raise OAuthError("invalid_grant", f"{BAD_CODE}: redirect_uri does not match the authorization request")
    if not hmac.compare_digest(pkce_s256(form["code_verifier"]), doc["code_challenge"]):
        raise OAuthError("invalid_grant", f"{BAD_CODE}: code_verifier does not match the code_challenge")
    consent_id = doc["consent_id"]
    found = find_consent(bank, consent_id)
    if found is None or found[1]["status"] != AUTHORISED:
        status = found[1]["status"] if found else "gone"
        raise OAuthError("invalid_grant", f"{BAD_CODE}: consent {consent_id} is {status}, not {AUTHORISED}")
    scope = f"payments:{consent_id} openid"
    ttl = bank.config.auth_code_token_ttl
    grant_id = bank.new_uuid()
    token = issue_access_token(bank, client.client_id, "authorization_code", scope, consent_id, ttl, grant_id)
    expires_at = bank.now().timestamp() + bank.config.refresh_token_ttl
    refresh = _issue_refresh_token(bank, client.client_id, consent_id, scope, expires_at, grant_id)
    _record_in_grant(bank, grant_id, client, consent_id, token.value, refresh)
    doc["grant_id"] = grant_id
    bank.store.put(CODE_KIND, code, doc)
    log.info("token issued: authorization_code client=%s consent=%s", client.client_id, consent_id)
    return {
        "access_token": token.value,
        "token_type": "Bearer",
        "expires_in": ttl,
        "scope": scope,
        "state": doc["state"],
        "refresh_token": refresh,
    }


def grant_refresh_token(bank: Bank, client: Client, form: dict[str, str]) -> dict[str, Any]:
    """A new access token for the same consent scope and a new refresh token; the one presented is spent."""
    missing(form, ("refresh_token",))
    refresh = form["refresh_token"]
    doc = bank.store.get(REFRESH_KIND, refresh)
    if doc is None or doc["client_id"] != client.client_id:
        raise OAuthError(
            "invalid_grant",
            "invalid_refresh_token: unknown refresh token (each refresh token is single use: "
            "a refresh answers with the next one)",
        )
    if bank.now().timestamp() >= float(doc["expires_at"]):
        raise OAuthError("invalid_grant", "invalid_refresh_token: the refresh token has expired")
    scope = str(doc["scope"])
    if form.get("scope") and not set(form["scope"].split()) <= set(scope.split()) | {"payments"}:
        raise OAuthError("invalid_scope", f"scope may only repeat the original scope '{scope}'")
    consent_id = str(doc["consent_id"])
    found = find_consent(bank, consent_id)
    if found is None or found[1]["status"] not in (AUTHORISED, "Consumed"):
        status = found[1]["status"] if found else "gone"
        raise OAuthError("invalid_grant", f"invalid_refresh_token: consent {consent_id} is {status}")
    # Rotation: the presented token is spent before its successor exists (no await in between).
    bank.store.delete(REFRESH_KIND, refresh)
    grant_id = str(doc.get("grant_id") or bank.new_uuid())  # documents of an older --db file had no grant id
    ttl = bank.config.auth_code_token_ttl
    token = issue_access_token(bank, client.client_id, "authorization_code", scope, consent_id, ttl, grant_id)
    successor = _issue_refresh_token(bank, client.client_id, consent_id, scope, float(doc["expires_at"]), grant_id)
    _record_in_grant(bank, grant_id, client, consent_id, token.value, successor)
    log.info("token issued: refresh_token client=%s consent=%s (refresh token rotated)", client.client_id, consent_id)
    return {
        "access_token": token.value,
        "token_type": "Bearer",
        "expires_in": ttl,
        "scope": scope,
        "refresh_token": successor,
    }


def token_endpoint(bank: Bank, form: dict[str, str], authorization: str | None) -> OAuthAnswer:
    """The token endpoint for a parsed form and the `Authorization` header value (None when absent)."""
    try:
        grant = grant_type_of(form)
        client, method = authenticate_token_client(bank, authorization, form)
        log.debug("token request: grant=%s client=%s auth=%s", grant, client.client_id, method)
        if grant == "client_credentials":
            body = grant_client_credentials(bank, client, form)
        elif grant == "authorization_code":
            body = grant_authorization_code(bank, client, form)
        elif grant == "refresh_token":
            body = grant_refresh_token(bank, client, form)
        elif grant in _ADVERTISED_ONLY_GRANTS:
            raise OAuthError("unsupported_grant_type", f"{grant} is advertised but not supported by the sandbox")
        else:
            raise OAuthError("unsupported_grant_type", f"unsupported grant type {grant[:80]!r}")
    except OAuthError as exc:
        return OAuthAnswer.of_error(exc)
    return OAuthAnswer.json(body, NO_STORE)


# --- what the bank's customer does in their banking app (the admin interface) ----------------------------


def grants_of(bank: Bank, consent_id: str) -> list[tuple[str, Doc]]:
    """Every grant (id, document) issued for a consent, revoked or not."""
    return [(grant_id, doc) for grant_id, doc in bank.store.items(GRANT_KIND) if doc.get("consent_id") == consent_id]


def revoke_refresh_tokens(bank: Bank, consent_id: str) -> int:
    """Revoke the current refresh token of every grant of a consent (its access tokens live on until they expire);
    returns how many were still stored."""
    revoked = 0
    for grant_id, grant in grants_of(bank, consent_id):
        refresh = grant.get("refresh_token")
        if refresh and bank.store.get(REFRESH_KIND, refresh) is not None:
            bank.store.delete(REFRESH_KIND, refresh)
            revoked += 1
        grant["refresh_token"] = None
        bank.store.put(GRANT_KIND, grant_id, grant)
    log.info("refresh tokens revoked by the customer: consent=%s (%d)", consent_id, revoked)
    return revoked


def revoke_consent_grants(bank: Bank, consent_id: str) -> int:
    """Revoke every grant of a consent (its access and refresh tokens); returns how many tokens were stored."""
    return sum(revoke_grant(bank, grant_id) for grant_id, _ in grants_of(bank, consent_id))
