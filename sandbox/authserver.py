"""The authorization server: discovery (E1), message-signature (E2), token (E3, E6, refresh), PAR (E4) and
the authorization URL (E5).

Stored documents (kinds in the bank's store):

- ``par`` keyed by request_uri: client, redirect_uri, consent, state, PKCE challenge, expiry, ``used``.
  Created by PAR, consumed by the approver's decision on the consent page (sandbox.consent_page).
- ``auth_code`` keyed by the code: bound to client, redirect_uri, PKCE challenge, consent and state;
  single use, ``config.code_ttl`` seconds. Created by the decision, consumed by the token endpoint.
- ``refresh_token`` keyed by the token: client, consent, scope, expiry. Not rotated on use.
- access tokens are issued through sandbox.tokens.

Secrets (codes, tokens, verifiers, assertions, Basic credentials) are never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
from typing import Any
from urllib.parse import urlencode

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from sandbox.assertions import ALGORITHM, authenticate_assertion
from sandbox.clients import Client
from sandbox.consents import find_consent
from sandbox.errors import OAuthError, PlainTextError, ResourceError
from sandbox.http import basic_credentials, json_response, read_body, read_form
from sandbox.jsonutil import loads
from sandbox.state import Bank
from sandbox.store import Doc
from sandbox.tokens import TOKEN_KIND, issue_access_token

log = logging.getLogger("sandbox.auth")

PAR_KIND = "par"
CODE_KIND = "auth_code"
REFRESH_KIND = "refresh_token"
REQUEST_URI_PREFIX = "urn:ietf:params:oauth:request_uri:"
AWAITING = "AwaitingAuthorisation"
AUTHORISED = "Authorised"
BAD_CODE = "invalid_auth_code_request_uri"
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")
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
_ADVERTISED_ONLY_GRANTS = ("urn:ietf:params:oauth:grant-type:jwt-bearer", "urn:openid:params:grant-type:ciba")
_ALGS = ["none", "PS256", "RS256", "HS256"]
MAX_PEM_CHARS = 16_384


# --- discovery -------------------------------------------------------------------------------------------


def discovery_document(issuer: str) -> dict[str, Any]:
    """The discovery document of the spec's table, addresses built from the issuer."""
    issuer = issuer.rstrip("/")
    token = f"{issuer}/token"
    revoke = f"{issuer}/token/revoke"
    introspect = f"{issuer}/introspection"
    par = f"{issuer}/par"
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/auth",
        "token_endpoint": token,
        "pushed_authorization_request_endpoint": par,
        "registration_endpoint": f"{issuer}/dynamic-client-registration/v3.2/register",
        "jwks_uri": f"{issuer}/.well-known/jwks.json",
        "userinfo_endpoint": f"{issuer}/userinfo",
        "introspection_endpoint": introspect,
        "revocation_endpoint": revoke,
        "backchannel_authentication_endpoint": f"{issuer}/bc-authorize",
        "claims_parameter_supported": True,
        "claims_supported": ["openbanking_intent_id", "acr"],
        "grant_types_supported": [
            "authorization_code",
            "client_credentials",
            "refresh_token",
            "urn:ietf:params:oauth:grant-type:jwt-bearer",
            "urn:openid:params:grant-type:ciba",
        ],
        "response_types_supported": ["code", "code id_token"],
        "request_parameter_supported": True,
        "request_uri_parameter_supported": False,
        "require_request_uri_registration": True,
        "scopes_supported": [
            "openid",
            "accounts",
            "payments",
            "fundsconfirmations",
            "consents",
            "resources",
            "credit-cards-accounts",
            "customers",
            "loans",
            "financings",
            "invoice-financings",
            "unarranged-accounts-overdraft",
            "consumption",
            "lg",
            "recurring-payments",
            "bank-fixed-incomes",
            "recurring-consent",
        ],
        "token_endpoint_auth_methods_supported": [
            "client_secret_basic",
            "client_secret_jwt",
            "tls_client_auth",
            "private_key_jwt",
        ],
        "tls_client_certificate_bound_access_tokens": True,
        # Empty, as in the spec, although PAR requires code_challenge_method=S256.
        "code_challenge_methods_supported": [],
        "claim_types_supported": ["normal"],
        "subject_types_supported": ["public"],
        "backchannel_token_delivery_modes_supported": ["poll", "ping", "push"],
        "backchannel_authentication_request_signing_alg_values_supported": list(_ALGS),
        "id_token_signing_alg_values_supported": list(_ALGS),
        "request_object_signing_alg_values_supported": list(_ALGS),
        "token_endpoint_auth_signing_alg_values_supported": list(_ALGS),
        "userinfo_signing_alg_values_supported": ["PS256", "RS256", "HS256", "none"],
        "backchannel_user_code_parameter_supported": False,
        "request_object_encryption_alg_values_supported": ["RSA-OAEP"],
        "request_object_encryption_enc_values_supported": ["A256GCM"],
        "id_token_encryption_alg_values_supported": ["RSA-OAEP-256"],
        "id_token_encryption_enc_values_supported": ["A128CBC-HS256"],
        "acr_values_supported": [],
        "authorization_details_types_supported": [],
        "authorization_signing_alg_values_supported": [],
        "authorization_encryption_alg_values_supported": [],
        "authorization_encryption_enc_values_supported": [],
        "userinfo_encryption_alg_values_supported": [],
        "userinfo_encryption_enc_values_supported": [],
        "response_modes_supported": ["query", "fragment"],
        "mtls_endpoint_aliases": {
            "token_endpoint": token,
            "revocation_endpoint": revoke,
            "introspection_endpoint": introspect,
            "pushed_authorization_request_endpoint": par,
        },
    }


# --- client authentication -------------------------------------------------------------------------------


def authenticate_basic(bank: Bank, request: Request) -> Client:
    """The client of a required `Authorization: Basic` header; 400 `invalid_client` otherwise."""
    credentials = basic_credentials(request)
    if credentials is None:
        raise OAuthError("invalid_client", "Authorization header is required and must have the form Basic <token>")
    client_id, secret = credentials
    client = bank.clients.get(client_id)
    if client is None or not hmac.compare_digest(secret.encode(), client.client_secret.encode()):
        raise OAuthError("invalid_client", "client authentication failed: unknown client or wrong secret")
    return client


def authenticate_token_client(bank: Bank, request: Request, form: dict[str, str]) -> tuple[Client, str]:
    """Authenticate the token request's client by exactly one method; returns (client, method name)."""
    if "client_secret" in form:
        raise OAuthError(
            "invalid_client", "client_secret_post is not supported; use client_secret_basic or private_key_jwt"
        )
    has_basic = "authorization" in request.headers
    has_assertion = "client_assertion" in form or "client_assertion_type" in form
    if has_basic and has_assertion:
        raise OAuthError(
            "invalid_request",
            "use exactly one client authentication method: a Basic header or a client assertion, not both",
        )
    if has_basic:
        client, method = authenticate_basic(bank, request), "client_secret_basic"
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


# --- helpers ---------------------------------------------------------------------------------------------


async def read_oauth_form(bank: Bank, request: Request) -> dict[str, str]:
    """The urlencoded form, with every problem reported in the OAuth error shape."""
    try:
        return await read_form(bank, request)
    except ResourceError as exc:  # the body-size limit speaks the resource shape; this endpoint speaks OAuth
        raise OAuthError("invalid_request", exc.message) from None


def missing(form: dict[str, str], names: tuple[str, ...]) -> None:
    """400 invalid_request naming every required parameter that is absent or empty."""
    absent = [name for name in names if not form.get(name)]
    if absent:
        raise OAuthError("invalid_request", f"missing required parameter: {', '.join(absent)}")


def pkce_s256(verifier: str) -> str:
    """The S256 code challenge of a verifier (RFC 7636)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def consent_id_of_scope(scope: str) -> str:
    """The consent id of a PAR scope `payments:<consent_id> openid` (order free); 400 invalid_scope otherwise."""
    tokens = scope.split()
    named = [t.removeprefix("payments:") for t in tokens if t.startswith("payments:")]
    others = sorted(t for t in tokens if not t.startswith("payments:"))
    if len(named) != 1 or not named[0] or others != ["openid"]:
        raise OAuthError("invalid_scope", "scope must be 'payments:<consent_id> openid'")
    return named[0]


def token_response(body: dict[str, Any]) -> Response:
    """A token endpoint answer; never cached (RFC 6749 section 5.1)."""
    response = json_response(body)
    response.headers["Cache-Control"] = "no-store"
    response.headers["Pragma"] = "no-cache"
    return response


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
            "access_token": None,
            "refresh_token": None,
        },
    )
    return code


def _revoke_tokens_of(bank: Bank, code_doc: Doc) -> None:
    """A replayed code revokes what was issued with it (RFC 6749 section 4.1.2)."""
    if code_doc.get("access_token"):
        bank.store.delete(TOKEN_KIND, code_doc["access_token"])
    if code_doc.get("refresh_token"):
        bank.store.delete(REFRESH_KIND, code_doc["refresh_token"])


# --- grants ----------------------------------------------------------------------------------------------


def grant_client_credentials(bank: Bank, client: Client, form: dict[str, str]) -> Response:
    """E3: scope `payments openid` (both, in either order, nothing else) -> a 600 s token with scope `payments`."""
    missing(form, ("scope",))
    tokens = form["scope"].split()
    if len(tokens) != 2 or set(tokens) != {"payments", "openid"}:
        raise OAuthError("invalid_scope", "scope must be 'payments openid'")
    ttl = bank.config.client_credentials_ttl
    token = issue_access_token(bank, client.client_id, "client_credentials", "payments", None, ttl)
    log.info("token issued: client_credentials client=%s", client.client_id)
    return token_response({"access_token": token.value, "token_type": "Bearer", "expires_in": ttl, "scope": "payments"})


def _check_code_scope(scope: str, consent_id: str) -> None:
    tokens = scope.split()
    allowed = {"payments", "openid", f"payments:{consent_id}"}
    if not tokens or not set(tokens) <= allowed or not any(t.startswith("payments") for t in tokens):
        raise OAuthError("invalid_scope", "scope must be 'payments'")


def grant_authorization_code(bank: Bank, client: Client, form: dict[str, str]) -> Response:
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
        _revoke_tokens_of(bank, doc)
        log.warning("authorization code replayed: client=%s consent=%s", client.client_id, doc["consent_id"])
        raise OAuthError("invalid_grant", f"{BAD_CODE}: the code was already used; tokens issued with it are revoked")
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
    token = issue_access_token(bank, client.client_id, "authorization_code", scope, consent_id, ttl)
    refresh = bank.new_secret()
    bank.store.put(
        REFRESH_KIND,
        refresh,
        {
            "client_id": client.client_id,
            "consent_id": consent_id,
            "scope": scope,
            "expires_at": bank.now().timestamp() + bank.config.refresh_token_ttl,
        },
    )
    doc["access_token"] = token.value
    doc["refresh_token"] = refresh
    bank.store.put(CODE_KIND, code, doc)
    log.info("token issued: authorization_code client=%s consent=%s", client.client_id, consent_id)
    return token_response(
        {
            "access_token": token.value,
            "token_type": "Bearer",
            "expires_in": ttl,
            "scope": scope,
            "state": doc["state"],
            "refresh_token": refresh,
        }
    )


def grant_refresh_token(bank: Bank, client: Client, form: dict[str, str]) -> Response:
    """A new access token for the same consent scope; the refresh token is not rotated (it is returned again)."""
    missing(form, ("refresh_token",))
    refresh = form["refresh_token"]
    doc = bank.store.get(REFRESH_KIND, refresh)
    if doc is None or doc["client_id"] != client.client_id:
        raise OAuthError("invalid_grant", "invalid_refresh_token: unknown refresh token")
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
    ttl = bank.config.auth_code_token_ttl
    token = issue_access_token(bank, client.client_id, "authorization_code", scope, consent_id, ttl)
    log.info("token issued: refresh_token client=%s consent=%s", client.client_id, consent_id)
    return token_response(
        {
            "access_token": token.value,
            "token_type": "Bearer",
            "expires_in": ttl,
            "scope": scope,
            "refresh_token": refresh,
        }
    )


def grant_type_of(form: dict[str, str]) -> str:
    """The grant, from `grand_type` (the spec's spelling) or `grant_type`; both must agree when both are sent."""
    grand, grant = form.get("grand_type"), form.get("grant_type")
    if grand and grant and grand != grant:
        raise OAuthError("invalid_request", "grand_type and grant_type are both present and differ")
    value = grand or grant
    if not value:
        raise OAuthError("invalid_request", "missing required parameter: grand_type (or grant_type)")
    return value


# --- message signature -----------------------------------------------------------------------------------


def _text_field(obj: dict[str, Any], where: str, name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise PlainTextError(f"{where}.{name} must be a non-empty string")
    return value


def _int_field(obj: dict[str, Any], where: str, name: str) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlainTextError(f"{where}.{name} must be an integer (a numeric date)")
    return value


def sign_message(payload: object) -> str:
    """E2: the PS256 JWT for a `{header, body, signingKeyPEM}` payload; `PlainTextError` when it is unusable."""
    if payload is None or payload == {}:
        raise PlainTextError("The payload is empty")
    if not isinstance(payload, dict):
        raise PlainTextError("The payload must be a JSON object with header, body and signingKeyPEM")
    unknown = sorted(set(payload) - {"header", "body", "signingKeyPEM"})
    if unknown:
        raise PlainTextError(f"unknown payload field: {', '.join(unknown)}")
    header, body, pem = payload.get("header"), payload.get("body"), payload.get("signingKeyPEM")
    if not isinstance(header, dict):
        raise PlainTextError("header must be an object with alg and kid")
    if not isinstance(body, dict):
        raise PlainTextError("body must be an object with aud, exp, iat, iss, sub and jti")
    if not isinstance(pem, str) or not pem.strip():
        raise PlainTextError("signingKeyPEM must be a PEM private key")
    if set(header) - {"alg", "kid", "typ"}:
        raise PlainTextError("header may only carry alg, kid and typ")
    if header.get("alg") != ALGORITHM:
        raise PlainTextError(f"header.alg must be {ALGORITHM}")
    kid = _text_field(header, "header", "kid")
    extra = sorted(set(body) - {"aud", "exp", "iat", "iss", "sub", "jti", "nbf"})
    if extra:
        raise PlainTextError(f"unknown body claim: {', '.join(extra)}")
    claims: dict[str, Any] = {
        "aud": _text_field(body, "body", "aud"),
        "exp": _int_field(body, "body", "exp"),
        "iat": _int_field(body, "body", "iat"),
        "iss": _text_field(body, "body", "iss"),
        "sub": _text_field(body, "body", "sub"),
        "jti": _text_field(body, "body", "jti"),
    }
    if "nbf" in body:
        claims["nbf"] = _int_field(body, "body", "nbf")
    if len(pem) > MAX_PEM_CHARS:
        raise PlainTextError("signingKeyPEM is too long")
    try:
        key = serialization.load_pem_private_key(pem.encode("utf-8"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError):
        raise PlainTextError("signingKeyPEM is not an unencrypted PEM private key") from None
    if not isinstance(key, RSAPrivateKey) or key.key_size < 2048:
        raise PlainTextError("signingKeyPEM must be an RSA private key of at least 2048 bits (PS256)")
    headers = {"kid": kid}
    if "typ" in header:
        headers["typ"] = _text_field(header, "header", "typ")
    return jwt.encode(claims, key, algorithm=ALGORITHM, headers=headers)


# --- routes ----------------------------------------------------------------------------------------------


def routes(bank: Bank) -> list[BaseRoute]:
    """The authorization server's routes."""

    async def discovery(request: Request) -> Response:
        authenticate_basic(bank, request)
        return json_response(discovery_document(bank.config.issuer), request=request)

    async def message_signature(request: Request) -> Response:
        try:
            raw = await read_body(bank, request)
        except ResourceError as exc:
            raise PlainTextError(exc.message) from None
        if not raw.strip():
            raise PlainTextError("The payload is empty")
        try:
            payload = loads(raw)
        except (ValueError, RecursionError):
            raise PlainTextError("The payload is not valid JSON") from None
        return PlainTextResponse(sign_message(payload))

    async def token(request: Request) -> Response:
        form = await read_oauth_form(bank, request)
        grant = grant_type_of(form)
        client, method = authenticate_token_client(bank, request, form)
        log.debug("token request: grant=%s client=%s auth=%s", grant, client.client_id, method)
        if grant == "client_credentials":
            return grant_client_credentials(bank, client, form)
        if grant == "authorization_code":
            return grant_authorization_code(bank, client, form)
        if grant == "refresh_token":
            return grant_refresh_token(bank, client, form)
        if grant in _ADVERTISED_ONLY_GRANTS:
            raise OAuthError("unsupported_grant_type", f"{grant} is advertised but not supported by the sandbox")
        raise OAuthError("unsupported_grant_type", f"unsupported grant type {grant[:80]!r}")

    async def par(request: Request) -> Response:
        form = await read_oauth_form(bank, request)
        missing(form, _PAR_PARAMETERS)
        # The optional Basic header (flow B) is checked first, so a bad header does not spend the assertion's jti.
        basic_client = authenticate_basic(bank, request) if "authorization" in request.headers else None
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
        if consent["status"] != AWAITING:
            raise OAuthError(
                "invalid_request",
                f"consent {consent_id} is {consent['status']}; only a consent in {AWAITING} can be authorised",
            )
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
        response = json_response({"request_uri": request_uri, "expires_in": bank.config.par_ttl})
        response.headers["Cache-Control"] = "no-store"
        return response

    async def authorization_url(request: Request) -> Response:
        client = authenticate_basic(bank, request)
        consent_id = request.path_params["consent_id"]
        query = request.query_params
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
        params = {
            "client_id": client.client_id,
            "response_type": "code",
            "scope": "payments",
            "request_uri": request_uri,
        }
        return PlainTextResponse(f"{bank.config.issuer}/auth?{urlencode(params)}")

    return [
        Route("/.well-known/openid-configuration", discovery, methods=["GET"], name="discovery"),
        Route("/o3/v1.0/message-signature", message_signature, methods=["GET"], name="message-signature"),
        Route("/token", token, methods=["POST"], name="token"),
        Route("/par", par, methods=["POST"], name="par"),
        Route("/o3/v1.0/par-auth-code-url/{consent_id}", authorization_url, methods=["GET"], name="authorization-url"),
    ]
