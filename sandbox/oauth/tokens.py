"""Access tokens: issuing them and checking a Bearer header on resource calls.

Stored as kind `access_token`, keyed by the token: client, grant, scope, consent, expiry, and for
authorization-code tokens the `grant_id` of the grant they belong to (sandbox.oauth.grants revokes by it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from sandbox.errors import header_invalid, header_missing
from sandbox.state import Bank

Grant = Literal["client_credentials", "authorization_code"]
TOKEN_KIND = "access_token"


@dataclass(frozen=True)
class AccessToken:
    """A stored access token."""

    value: str
    client_id: str
    grant: Grant
    scope: str
    consent_id: str | None
    expires_at: float


def issue_access_token(
    bank: Bank,
    client_id: str,
    grant: Grant,
    scope: str,
    consent_id: str | None,
    ttl: int,
    grant_id: str | None = None,
) -> AccessToken:
    """Create, store and return a new access token (`grant_id`: the authorization grant it belongs to)."""
    token = AccessToken(
        bank.new_secret(), client_id, grant, scope, consent_id, (bank.now() + timedelta(seconds=ttl)).timestamp()
    )
    bank.store.put(
        TOKEN_KIND,
        token.value,
        {
            "client_id": client_id,
            "grant": grant,
            "scope": scope,
            "consent_id": consent_id,
            "expires_at": token.expires_at,
            "grant_id": grant_id,
        },
    )
    return token


def bearer(bank: Bank, header: str | None, grant: Grant, consent_id: str | None = None) -> AccessToken:
    """Check a request's `Authorization` header value: a Bearer token present, known, unexpired, of the right
    grant (and consent).

    Missing header: 401 Header.Missing; unknown, malformed, wrong grant or wrong consent: 401
    Header.Invalid `no_access_token`; expired: 403 Header.Invalid `token_expired`.
    """
    if header is None or not header.strip():
        raise header_missing("Authorization", "missing_authorization_header")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise header_invalid("Authorization", "no_access_token: expected 'Bearer <ACCESS_TOKEN>'", 401)
    doc = bank.store.get(TOKEN_KIND, value.strip())
    if doc is None:
        raise header_invalid("Authorization", "no_access_token: unknown access token", 401)
    token = AccessToken(
        value.strip(), doc["client_id"], doc["grant"], doc["scope"], doc["consent_id"], float(doc["expires_at"])
    )
    if bank.now().timestamp() >= token.expires_at:
        raise header_invalid("Authorization", "token_expired", 403)
    if token.grant != grant:
        wanted = "a client-credentials" if grant == "client_credentials" else "an authorization-code"
        raise header_invalid("Authorization", f"no_access_token: this operation needs {wanted} token", 401)
    if consent_id is not None and token.consent_id != consent_id:
        raise header_invalid("Authorization", "no_access_token: token scope does not name this consent", 401)
    return token


def require_token_scope(token: AccessToken) -> None:
    """Client-credentials tokens must carry scope `payments`."""
    if "payments" not in token.scope.split():
        raise header_invalid("Authorization", "no_access_token: scope payments required", 401)
