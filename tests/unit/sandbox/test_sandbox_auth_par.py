"""E4 pushed authorization requests and E5 the authorization URL."""

# Fixtures are imported from sandbox_auth_fixtures by name; pytest injects them as parameters of the same name.
# ruff: noqa: F811

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from manual_clock import ManualClock
from sandbox_auth_fixtures import (  # noqa: F401 (fixtures)
    ISSUER,
    Harness,
    Tpp,
    bank,
    clock,
    consent_status,
    file_consent,
    harness,
    http,
    key_pair,
    other_tpp,
    par_form,
    pkce,
    tpp,
    vrp_consent,
)

from sandbox.state import Bank

PARAMETERS = [
    "client_id",
    "redirect_uri",
    "scope",
    "response_type",
    "state",
    "code_challenge",
    "code_challenge_method",
    "client_assertion_type",
    "client_assertion",
]


async def test_par_returns_a_request_uri(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    r, _, state = await harness.push(tpp, consent_id)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"request_uri", "expires_in"}
    assert re.fullmatch(
        r"urn:ietf:params:oauth:request_uri:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        body["request_uri"],
    )
    assert body["expires_in"] == 300
    stored = bank.store.get("par", body["request_uri"])
    assert stored is not None
    assert stored["consent_id"] == consent_id and stored["state"] == state and stored["used"] is False


async def test_par_with_basic_of_the_same_client(harness: Harness, bank: Bank, tpp: Tpp, clock: ManualClock) -> None:
    _, challenge = pkce()
    form = par_form(tpp, vrp_consent(bank, tpp), clock.now().timestamp(), challenge)
    r = await harness.http.post("/par", data=form, headers=tpp.basic())
    assert r.status_code == 200, r.text


async def test_par_with_basic_of_another_client(
    harness: Harness, bank: Bank, tpp: Tpp, other_tpp: Tpp, clock: ManualClock
) -> None:
    form = par_form(tpp, vrp_consent(bank, tpp), clock.now().timestamp(), pkce()[1])
    r = await harness.http.post("/par", data=form, headers=other_tpp.basic())
    assert r.status_code == 400 and r.json()["error"] == "invalid_client"
    r = await harness.http.post("/par", data=form, headers={"Authorization": "Basic"})
    assert r.status_code == 400
    assert "must have the form Basic <token>" in r.json()["error_description"]
    # The header was refused before the assertion was looked at: its jti is still unspent.
    r = await harness.http.post("/par", data=form, headers=tpp.basic())
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("name", PARAMETERS)
async def test_every_par_parameter_is_required(harness: Harness, bank: Bank, tpp: Tpp, name: str) -> None:
    consent_id = file_consent(bank, tpp)
    form = par_form(tpp, consent_id, harness.now(), pkce()[1])
    del form[name]
    r = await harness.http.post("/par", data=form)
    assert r.status_code == 400
    assert r.json() == {"error": "invalid_request", "error_description": f"missing required parameter: {name}"}
    assert bank.store.count("par") == 0


async def test_par_invalid_signature_is_invalid_client(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    other_private, _ = key_pair(1)
    r, _, _ = await harness.push(
        tpp, file_consent(bank, tpp), client_assertion=tpp.assertion(harness.now(), key=other_private)
    )
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_client"
    assert "signature does not verify" in r.json()["error_description"]


async def test_par_assertion_of_another_client(harness: Harness, bank: Bank, tpp: Tpp, other_tpp: Tpp) -> None:
    r, _, _ = await harness.push(tpp, file_consent(bank, tpp), client_assertion=other_tpp.assertion(harness.now()))
    assert r.status_code == 400 and r.json()["error"] == "invalid_client"


@pytest.mark.parametrize(
    ("override", "error", "description"),
    [
        ({"redirect_uri": "https://tpp.example/callback/"}, "invalid_request", "redirect_uri is not registered"),
        ({"redirect_uri": "https://evil.example/callback"}, "invalid_request", "redirect_uri is not registered"),
        ({"code_challenge_method": "plain"}, "invalid_request", "code_challenge_method must be S256"),
        ({"code_challenge_method": "s256"}, "invalid_request", "code_challenge_method must be S256"),
        ({"code_challenge": "too-short"}, "invalid_request", "code_challenge must be"),
        ({"response_type": "code id_token"}, "unsupported_response_type", "response_type must be code"),
        ({"scope": "payments openid"}, "invalid_scope", "scope must be 'payments:<consent_id> openid'"),
        ({"scope": "payments:"}, "invalid_scope", "scope must be"),
        ({"scope": "payments:a payments:b openid"}, "invalid_scope", "scope must be"),
        ({"scope": "payments:pay-fi-nope openid"}, "invalid_scope", "does not exist for this client"),
        ({"client_id": "tpp-two"}, "invalid_client", "iss must be the client id"),
        ({"client_id": "nobody"}, "invalid_client", "iss must be the client id"),
    ],
)
async def test_par_checks(
    harness: Harness, bank: Bank, tpp: Tpp, override: dict[str, str], error: str, description: str
) -> None:
    r, _, _ = await harness.push(tpp, file_consent(bank, tpp), **override)
    assert r.status_code == 400
    assert r.json()["error"] == error
    assert description in r.json()["error_description"]


async def test_par_scope_order_is_free(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = vrp_consent(bank, tpp)
    r, _, _ = await harness.push(tpp, consent_id, scope=f"openid payments:{consent_id}")
    assert r.status_code == 200


async def test_par_for_a_consent_of_another_client(harness: Harness, bank: Bank, tpp: Tpp, other_tpp: Tpp) -> None:
    theirs = file_consent(bank, other_tpp)
    r, _, _ = await harness.push(tpp, theirs)
    assert r.status_code == 400
    assert r.json() == {
        "error": "invalid_scope",
        "error_description": f"consent {theirs} does not exist for this client",
    }


@pytest.mark.parametrize("status", ["AwaitingUpload", "Authorised", "Rejected", "Consumed"])
async def test_par_needs_a_consent_awaiting_authorisation(harness: Harness, bank: Bank, tpp: Tpp, status: str) -> None:
    consent_id = file_consent(bank, tpp, status=status)
    r, _, _ = await harness.push(tpp, consent_id)
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_request"
    assert f"is {status}" in r.json()["error_description"]


async def test_par_reused_assertion(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    assertion = tpp.assertion(harness.now())
    assert (await harness.push(tpp, consent_id, client_assertion=assertion))[0].status_code == 200
    r, _, _ = await harness.push(tpp, consent_id, client_assertion=assertion)
    assert r.status_code == 400 and "already used" in r.json()["error_description"]


# --- E5 authorization URL --------------------------------------------------------------------------------


async def pushed(harness: Harness, tpp: Tpp, consent_id: str) -> str:
    r, _, _ = await harness.push(tpp, consent_id)
    assert r.status_code == 200, r.text
    return str(r.json()["request_uri"])


async def test_authorization_url(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    request_uri = await pushed(harness, tpp, consent_id)
    r = await harness.auth_url(tpp, consent_id, request_uri)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    url = r.text
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{ISSUER}/auth"
    assert parse_qs(parts.query) == {
        "client_id": [tpp.client_id],
        "response_type": ["code"],
        "scope": ["payments"],
        "request_uri": [request_uri],
    }
    assert "request_uri=urn%3Aietf%3Aparams%3Aoauth%3Arequest_uri%3A" in url
    assert url.startswith(f"{ISSUER}/auth?client_id={tpp.client_id}&response_type=code&scope=payments&request_uri=")


async def test_authorization_url_without_request_uri(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    r = await harness.http.get(
        f"/o3/v1.0/par-auth-code-url/{consent_id}",
        params={"response_type": "code", "scope": "payments"},
        headers=tpp.basic(),
    )
    assert r.status_code == 400
    assert r.json()["error"] == "general_error"
    assert "request_uri_not_specified" in r.json()["error_description"]


async def test_authorization_url_needs_basic(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    request_uri = await pushed(harness, tpp, consent_id)
    params = {"request_uri": request_uri, "response_type": "code", "scope": "payments"}
    url = f"/o3/v1.0/par-auth-code-url/{consent_id}"
    r = await harness.http.get(url, params=params)
    assert r.status_code == 400 and r.json()["error"] == "invalid_client"
    r = await harness.http.get(url, params=params, headers={"Authorization": "Token x"})
    assert r.status_code == 400
    assert r.json()["error_description"] == "Authorization header must have the form Basic <token>"
    r = await harness.http.get(url, params=params, headers=tpp.basic("bad"))
    assert r.status_code == 400 and r.json()["error"] == "invalid_client"


async def test_authorization_url_checks(harness: Harness, bank: Bank, tpp: Tpp, other_tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    other_consent = file_consent(bank, tpp)
    request_uri = await pushed(harness, tpp, consent_id)

    async def ask(who: Tpp, consent: str, **params: str) -> httpx.Response:
        query = {"request_uri": request_uri, "response_type": "code", "scope": "payments", **params}
        return await harness.http.get(f"/o3/v1.0/par-auth-code-url/{consent}", params=query, headers=who.basic())

    cases = [
        (await ask(other_tpp, consent_id), "request_uri_invalid"),
        (await ask(tpp, other_consent), "request_uri_mismatch"),
        (await ask(tpp, consent_id, request_uri="urn:ietf:params:oauth:request_uri:nope"), "request_uri_invalid"),
        (await ask(tpp, consent_id, request_uri="garbage"), "request_uri_invalid"),
        (await ask(tpp, consent_id, response_type="token"), "response_type must be code"),
        (await ask(tpp, consent_id, scope="openid"), "scope must be payments"),
    ]
    for response, description in cases:
        assert response.status_code == 400
        assert response.json()["error"] == "general_error"
        assert description in response.json()["error_description"]
    assert (await ask(tpp, consent_id)).status_code == 200


async def test_request_uri_expires_after_par_ttl(harness: Harness, bank: Bank, tpp: Tpp, clock: ManualClock) -> None:
    consent_id = file_consent(bank, tpp)
    request_uri = await pushed(harness, tpp, consent_id)
    clock.advance(299)
    assert (await harness.auth_url(tpp, consent_id, request_uri)).status_code == 200
    clock.advance(1)
    r = await harness.auth_url(tpp, consent_id, request_uri)
    assert r.status_code == 400
    assert r.json()["error_description"].startswith("request_uri_expired")
    d = await harness.decide(request_uri, "approve")
    assert d.status_code == 400
    assert consent_status(bank, consent_id) == "AwaitingAuthorisation"


async def test_request_uri_is_single_use(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    request_uri = await pushed(harness, tpp, consent_id)
    assert (await harness.decide(request_uri, "approve")).status_code == 303
    r = await harness.auth_url(tpp, consent_id, request_uri)
    assert r.status_code == 400
    assert r.json()["error_description"].startswith("request_uri_used")
    assert (await harness.decide(request_uri, "approve")).status_code == 400
    assert bank.store.count("auth_code") == 1
