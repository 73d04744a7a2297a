"""The message-signature operation (E2): the bank signs a client's claims with the client's own key (PS256).

It answers plain text: the JWT, or the reason it cannot (`PlainTextError`).
"""

from __future__ import annotations

from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from sandbox.errors import PlainTextError
from sandbox.jsonutil import loads
from sandbox.oauth.answer import OAuthAnswer
from sandbox.oauth.assertions import ALGORITHM, MIN_RSA_BITS

MAX_PEM_CHARS = 16_384


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
    if not isinstance(key, RSAPrivateKey) or key.key_size < MIN_RSA_BITS:
        raise PlainTextError(f"signingKeyPEM must be an RSA private key of at least {MIN_RSA_BITS} bits (PS256)")
    headers = {"kid": kid}
    if "typ" in header:
        headers["typ"] = _text_field(header, "header", "typ")
    return jwt.encode(claims, key, algorithm=ALGORITHM, headers=headers)


def message_signature(raw: bytes) -> OAuthAnswer:
    """E2 for a raw request body: the JWT as plain text, or a plain-text 400 saying why not."""
    try:
        if not raw.strip():
            raise PlainTextError("The payload is empty")
        try:
            payload = loads(raw)
        except (ValueError, RecursionError):
            raise PlainTextError("The payload is not valid JSON") from None
        return OAuthAnswer.text(sign_message(payload))
    except PlainTextError as exc:
        return OAuthAnswer.of_error(exc)
