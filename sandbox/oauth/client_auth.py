"""Client authentication: client_secret_basic, and exactly one method per token request.

private_key_jwt (client assertions) is in sandbox.oauth.assertions. Secrets are never logged.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from sandbox.clients import Client
from sandbox.errors import OAuthError
from sandbox.oauth.assertions import authenticate_assertion
from sandbox.state import Bank

_BASIC_FORM = "Authorization header must have the form Basic <token>"


def basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """(client_id, secret) from a `Basic` header value; None when absent; 400 invalid_client when malformed."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme != "Basic" or not token.strip():
        raise OAuthError("invalid_client", _BASIC_FORM)
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise OAuthError("invalid_client", _BASIC_FORM) from None
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        raise OAuthError("invalid_client", _BASIC_FORM)
    return client_id, secret


def authenticate_basic(bank: Bank, authorization: str | None) -> Client:
    """The client of a required `Authorization: Basic` header; 400 `invalid_client` otherwise."""
    credentials = basic_credentials(authorization)
    if credentials is None:
        raise OAuthError("invalid_client", "Authorization header is required and must have the form Basic <token>")
    client_id, secret = credentials
    client = bank.clients.get(client_id)
    if client is None or not hmac.compare_digest(secret.encode(), client.client_secret.encode()):
        raise OAuthError("invalid_client", "client authentication failed: unknown client or wrong secret")
    return client


def authenticate_token_client(bank: Bank, authorization: str | None, form: dict[str, str]) -> tuple[Client, str]:
    """Authenticate the token request's client by exactly one method; returns (client, method name)."""
    if "client_secret" in form:
        raise OAuthError(
            "invalid_client", "client_secret_post is not supported; use client_secret_basic or private_key_jwt"
        )
    has_basic = authorization is not None
    has_assertion = "client_assertion" in form or "client_assertion_type" in form
    if has_basic and has_assertion:
        raise OAuthError(
            "invalid_request",
            "use exactly one client authentication method: a Basic header or a client assertion, not both",
        )
    if has_basic:
        client, method = authenticate_basic(bank, authorization), "client_secret_basic"
    elif has_assertion:
        client = authenticate_assertion(
            bank, form.get("client_assertion_type"), form.get("client_assertion"), form.get("client_id") or None
        )
        method = "private_key_jwt"
    else:
        raise OAuthError(
            "invalid_client",
            "client authentication is required: Authorization: Basic <token> (client_secret_basic) or "
            "client_assertion_type + client_assertion (private_key_jwt)",
        )
    if form.get("client_id") and form["client_id"] != client.client_id:
        raise OAuthError("invalid_client", "client_id does not match the authenticated client")
    return client, method
