"""E1 discovery and E2 message-signature."""

# Fixtures are imported from sandbox_auth_fixtures by name; pytest injects them as parameters of the same name.
# ruff: noqa: F811

from __future__ import annotations

import json
import time

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from sandbox_auth_fixtures import ISSUER, Tpp, bank, clock, http, key_pair, other_tpp, tpp  # noqa: F401

ALGS = ["none", "PS256", "RS256", "HS256"]
# The fields of the spec's table that do not depend on the issuer, with their values.
SPEC_CONSTANTS: dict[str, object] = {
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
    "code_challenge_methods_supported": [],
    "claim_types_supported": ["normal"],
    "subject_types_supported": ["public"],
    "backchannel_token_delivery_modes_supported": ["poll", "ping", "push"],
    "backchannel_authentication_request_signing_alg_values_supported": ALGS,
    "id_token_signing_alg_values_supported": ALGS,
    "request_object_signing_alg_values_supported": ALGS,
    "token_endpoint_auth_signing_alg_values_supported": ALGS,
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
}


async def test_discovery_has_every_field_of_the_spec(http: httpx.AsyncClient, tpp: Tpp) -> None:
    r = await http.get(
        "/.well-known/openid-configuration",
        headers={**tpp.basic(), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["issuer"] == ISSUER
    assert d["token_endpoint"] == f"{ISSUER}/token"
    assert d["authorization_endpoint"] == f"{ISSUER}/auth"
    assert d["pushed_authorization_request_endpoint"] == f"{ISSUER}/par"
    assert d["registration_endpoint"] == f"{ISSUER}/dynamic-client-registration/v3.2/register"
    assert d["userinfo_endpoint"] == f"{ISSUER}/userinfo"
    assert d["introspection_endpoint"] == f"{ISSUER}/introspection"
    assert d["revocation_endpoint"] == f"{ISSUER}/token/revoke"
    assert d["backchannel_authentication_endpoint"] == f"{ISSUER}/bc-authorize"
    assert d["jwks_uri"].startswith(ISSUER + "/")
    assert d["mtls_endpoint_aliases"] == {
        "token_endpoint": f"{ISSUER}/token",
        "revocation_endpoint": f"{ISSUER}/token/revoke",
        "introspection_endpoint": f"{ISSUER}/introspection",
        "pushed_authorization_request_endpoint": f"{ISSUER}/par",
    }
    for name, value in SPEC_CONSTANTS.items():
        assert d[name] == value, name


@pytest.mark.parametrize(
    "header", ["Bearer abc", "Basic", "Basic !!!not-base64!!!", "Basic " + "bm8tY29sb24=", "basic dXNlcjpwYXNz"]
)
async def test_discovery_with_a_malformed_basic_header(http: httpx.AsyncClient, header: str) -> None:
    r = await http.get("/.well-known/openid-configuration", headers={"Authorization": header})
    assert r.status_code == 400
    body = r.json()
    assert body["error"] == "invalid_client"
    assert "must have the form Basic <token>" in body["error_description"]


async def test_discovery_without_credentials_or_with_a_wrong_secret(http: httpx.AsyncClient, tpp: Tpp) -> None:
    r = await http.get("/.well-known/openid-configuration")
    assert r.status_code == 400 and r.json()["error"] == "invalid_client"
    r = await http.get("/.well-known/openid-configuration", headers=tpp.basic("wrong-secret"))
    assert r.status_code == 400
    assert r.json() == {
        "error": "invalid_client",
        "error_description": "client authentication failed: unknown client or wrong secret",
    }


# --- E2 message-signature --------------------------------------------------------------------------------


def signature_request(tpp: Tpp, **changes: object) -> dict[str, object]:
    now = int(time.time())
    payload: dict[str, object] = {
        "header": {"alg": "PS256", "kid": tpp.client.kid},
        "body": {
            "aud": ISSUER,
            "exp": now + 60,
            "iat": now,
            "iss": tpp.client_id,
            "sub": tpp.client_id,
            "jti": "6d1c1a4e-6b70-4c8a-a0d1-9b7a7f6f0d0e",
        },
        "signingKeyPEM": tpp.private_pem,
    }
    payload.update(changes)
    return payload


async def sign(http: httpx.AsyncClient, content: bytes) -> httpx.Response:
    return await http.request(
        "GET", "/o3/v1.0/message-signature", content=content, headers={"Content-Type": "application/json"}
    )


async def test_message_signature_returns_a_ps256_jwt(http: httpx.AsyncClient, tpp: Tpp) -> None:
    payload = signature_request(tpp)
    r = await sign(http, json.dumps(payload).encode())
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    token = r.text
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "PS256" and header["kid"] == tpp.client.kid
    _, public = key_pair(0)
    claims = jwt.decode(token, public, algorithms=["PS256"], audience=ISSUER)
    assert claims == payload["body"]


async def test_message_signature_output_is_accepted_as_a_client_assertion(
    http: httpx.AsyncClient, tpp: Tpp, clock: object
) -> None:
    from manual_clock import ManualClock

    assert isinstance(clock, ManualClock)
    now = int(clock.now().timestamp())
    payload = signature_request(tpp)
    payload["body"] = {**payload["body"], "iat": now, "exp": now + 60}  # type: ignore[dict-item]
    assertion = (await sign(http, json.dumps(payload).encode())).text
    r = await http.post(
        "/token",
        data={
            "grand_type": "client_credentials",
            "scope": "payments openid",
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            "client_assertion": assertion,
        },
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("content", [b"", b"   ", b"{}", b"null"])
async def test_message_signature_empty_payload(http: httpx.AsyncClient, content: bytes) -> None:
    r = await sign(http, content)
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text == "The payload is empty"


def _ec_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _small_rsa_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"header": {"alg": "RS256", "kid": "k"}}, "header.alg must be PS256"),
        ({"header": {"alg": "PS256"}}, "header.kid must be a non-empty string"),
        ({"header": {"alg": "PS256", "kid": "k", "jku": "https://x"}}, "header may only carry"),
        ({"header": "PS256"}, "header must be an object"),
        ({"body": []}, "body must be an object"),
        ({"signingKeyPEM": ""}, "signingKeyPEM must be a PEM private key"),
        ({"signingKeyPEM": "-----BEGIN PRIVATE KEY-----\nxx\n-----END PRIVATE KEY-----"}, "not an unencrypted PEM"),
        ({"signingKeyPEM": 42}, "signingKeyPEM must be a PEM private key"),
        ({"extra": 1}, "unknown payload field: extra"),
    ],
)
async def test_message_signature_malformed_payload(
    http: httpx.AsyncClient, tpp: Tpp, change: dict[str, object], message: str
) -> None:
    r = await sign(http, json.dumps(signature_request(tpp, **change)).encode())
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("text/plain")
    assert message in r.text


@pytest.mark.parametrize(
    ("claim", "value", "message"),
    [
        ("exp", "tomorrow", "body.exp must be an integer"),
        ("iat", 1.5, "body.iat must be an integer"),
        ("exp", True, "body.exp must be an integer"),
        ("aud", 7, "body.aud must be a non-empty string"),
        ("jti", "", "body.jti must be a non-empty string"),
        ("scope", "payments", "unknown body claim: scope"),
    ],
)
async def test_message_signature_bad_claims(
    http: httpx.AsyncClient, tpp: Tpp, claim: str, value: object, message: str
) -> None:
    payload = signature_request(tpp)
    payload["body"] = {**payload["body"], claim: value}  # type: ignore[dict-item]
    r = await sign(http, json.dumps(payload).encode())
    assert r.status_code == 400
    assert message in r.text


async def test_message_signature_missing_claim(http: httpx.AsyncClient, tpp: Tpp) -> None:
    payload = signature_request(tpp)
    body = dict(payload["body"])  # type: ignore[call-overload]
    del body["sub"]
    payload["body"] = body
    r = await sign(http, json.dumps(payload).encode())
    assert r.status_code == 400 and "body.sub must be a non-empty string" in r.text


@pytest.mark.parametrize(("pem", "message"), [(_ec_pem(), "RSA private key"), (_small_rsa_pem(), "at least 2048")])
async def test_message_signature_refuses_unfit_keys(http: httpx.AsyncClient, tpp: Tpp, pem: str, message: str) -> None:
    r = await sign(http, json.dumps(signature_request(tpp, signingKeyPEM=pem)).encode())
    assert r.status_code == 400 and message in r.text


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe", b"[" * 10000])
async def test_message_signature_garbage_is_plain_400(http: httpx.AsyncClient, content: bytes) -> None:
    r = await sign(http, content)
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("text/plain")
    assert "Traceback" not in r.text
