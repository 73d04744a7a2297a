"""The token endpoint: client authentication, the grant parameter, client credentials, codes and refresh."""

# Fixtures are imported from sandbox_auth_fixtures by name; pytest injects them as parameters of the same name.
# ruff: noqa: F811

from __future__ import annotations

import httpx
import pytest
from manual_clock import ManualClock
from sandbox_auth_fixtures import (  # noqa: F401 (fixtures)
    ASSERTION_TYPE,
    REDIRECT_URI,
    Harness,
    Tpp,
    bank,
    clock,
    consent_status,
    file_consent,
    harness,
    http,
    other_tpp,
    tpp,
    vrp_consent,
)

from sandbox.consents import FILE_KIND, set_status
from sandbox.oauth.tokens import TOKEN_KIND
from sandbox.state import Bank


def now(clock: ManualClock) -> float:
    return clock.now().timestamp()


async def client_credentials(http: httpx.AsyncClient, form: dict[str, str], **headers: str) -> httpx.Response:
    return await http.post("/token", data=form, headers=headers)


# --- client credentials ----------------------------------------------------------------------------------


async def test_client_credentials_with_private_key_jwt(
    http: httpx.AsyncClient, bank: Bank, tpp: Tpp, clock: ManualClock
) -> None:
    form = {"grand_type": "client_credentials", "scope": "payments openid", **tpp.assertion_form(now(clock))}
    r = await client_credentials(http, form)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"access_token", "token_type", "expires_in", "scope"}
    assert body["token_type"] == "Bearer" and body["expires_in"] == 600 and body["scope"] == "payments"
    assert r.headers["cache-control"] == "no-store"
    stored = bank.store.get(TOKEN_KIND, body["access_token"])
    assert stored is not None
    assert stored["client_id"] == tpp.client_id and stored["grant"] == "client_credentials"
    assert stored["expires_at"] == now(clock) + 600


async def test_client_credentials_with_basic_and_grant_type_spelling(
    http: httpx.AsyncClient, bank: Bank, tpp: Tpp
) -> None:
    r = await client_credentials(http, {"grant_type": "client_credentials", "scope": "payments openid"}, **tpp.basic())
    assert r.status_code == 200, r.text
    assert bank.store.get(TOKEN_KIND, r.json()["access_token"])["client_id"] == tpp.client_id  # type: ignore[index]


async def test_both_spellings_agreeing_are_accepted(http: httpx.AsyncClient, tpp: Tpp) -> None:
    form = {"grand_type": "client_credentials", "grant_type": "client_credentials", "scope": "payments openid"}
    assert (await client_credentials(http, form, **tpp.basic())).status_code == 200


async def test_client_credentials_token_expires_with_the_bank_clock(
    http: httpx.AsyncClient, bank: Bank, tpp: Tpp, clock: ManualClock
) -> None:
    from sandbox.errors import ResourceError
    from sandbox.oauth.tokens import bearer

    r = await client_credentials(http, {"grand_type": "client_credentials", "scope": "payments openid"}, **tpp.basic())
    header = f"Bearer {r.json()['access_token']}"
    assert bearer(bank, header, "client_credentials").client_id == tpp.client_id
    clock.advance(600)
    with pytest.raises(ResourceError) as info:
        bearer(bank, header, "client_credentials")
    assert info.value.status == 403 and info.value.message == "token_expired"


@pytest.mark.parametrize(
    ("form", "error", "description"),
    [
        ({"scope": "payments openid"}, "invalid_request", "missing required parameter: grand_type (or grant_type)"),
        (
            {"grand_type": "client_credentials", "grant_type": "authorization_code", "scope": "payments"},
            "invalid_request",
            "grand_type and grant_type are both present and differ",
        ),
        ({"grand_type": "password", "scope": "payments"}, "unsupported_grant_type", "unsupported grant type"),
        (
            {"grand_type": "urn:openid:params:grant-type:ciba"},
            "unsupported_grant_type",
            "advertised but not supported",
        ),
        ({"grand_type": "client_credentials"}, "invalid_request", "missing required parameter: scope"),
        ({"grand_type": "client_credentials", "scope": "openid"}, "invalid_scope", "scope must be 'payments openid'"),
        ({"grand_type": "client_credentials", "scope": "payments"}, "invalid_scope", "scope must be 'payments openid'"),
        (
            {"grand_type": "client_credentials", "scope": "payments openid openid"},
            "invalid_scope",
            "scope must be 'payments openid'",
        ),
        (
            {"grand_type": "client_credentials", "scope": "payments accounts"},
            "invalid_scope",
            "scope must be 'payments openid'",
        ),
    ],
)
async def test_token_request_errors(
    http: httpx.AsyncClient, tpp: Tpp, form: dict[str, str], error: str, description: str
) -> None:
    r = await client_credentials(http, form, **tpp.basic())
    assert r.status_code == 400
    assert r.json()["error"] == error
    assert description in r.json()["error_description"]


async def test_wrong_content_type_is_invalid_request(http: httpx.AsyncClient, tpp: Tpp) -> None:
    r = await http.post("/token", json={"grand_type": "client_credentials"}, headers=tpp.basic())
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"


async def test_oversized_form_is_an_oauth_error(bank: Bank, http: httpx.AsyncClient, tpp: Tpp) -> None:
    bank.config.max_body_bytes = 100
    r = await http.post("/token", data={"grand_type": "client_credentials", "scope": "x" * 200}, headers=tpp.basic())
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"


# --- client authentication -------------------------------------------------------------------------------


async def test_no_client_authentication(http: httpx.AsyncClient) -> None:
    r = await client_credentials(http, {"grand_type": "client_credentials", "scope": "payments openid"})
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_client"
    assert "client authentication is required" in r.json()["error_description"]


async def test_two_methods_at_once_are_refused(http: httpx.AsyncClient, tpp: Tpp, clock: ManualClock) -> None:
    form = {"grand_type": "client_credentials", "scope": "payments openid", **tpp.assertion_form(now(clock))}
    r = await client_credentials(http, form, **tpp.basic())
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_request"
    assert "exactly one client authentication method" in r.json()["error_description"]


async def test_client_secret_post_is_not_supported(http: httpx.AsyncClient, tpp: Tpp) -> None:
    form = {
        "grand_type": "client_credentials",
        "scope": "payments openid",
        "client_id": tpp.client_id,
        "client_secret": tpp.client.client_secret,
    }
    r = await client_credentials(http, form)
    assert r.status_code == 400 and r.json()["error"] == "invalid_client"


@pytest.mark.parametrize("header", ["Bearer x", "Basic", "Basic %%%"])
async def test_malformed_basic_on_token(http: httpx.AsyncClient, header: str) -> None:
    r = await client_credentials(
        http, {"grand_type": "client_credentials", "scope": "payments openid"}, Authorization=header
    )
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_client"
    assert "must have the form Basic <token>" in r.json()["error_description"]


async def test_wrong_secret_and_unknown_client(http: httpx.AsyncClient, tpp: Tpp, other_tpp: Tpp) -> None:
    form = {"grand_type": "client_credentials", "scope": "payments openid"}
    assert (await client_credentials(http, form, **tpp.basic("nope"))).json()["error"] == "invalid_client"
    other_secret = other_tpp.client.client_secret
    assert (await client_credentials(http, form, **tpp.basic(other_secret))).json()["error"] == "invalid_client"


async def test_client_id_parameter_must_match(http: httpx.AsyncClient, tpp: Tpp) -> None:
    form = {"grand_type": "client_credentials", "scope": "payments openid", "client_id": "tpp-two"}
    r = await client_credentials(http, form, **tpp.basic())
    assert r.status_code == 400 and r.json()["error"] == "invalid_client"


# --- authorization code ----------------------------------------------------------------------------------


async def test_code_exchange_returns_the_consent_scope(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    auth = await harness.authorise(tpp, consent_id)
    r = await harness.exchange(tpp, auth.code, auth.verifier)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["scope"] == f"payments:{consent_id} openid"
    assert body["state"] == auth.state
    assert body["expires_in"] == 432000 and body["token_type"] == "Bearer"
    assert body["refresh_token"] and body["refresh_token"] != body["access_token"]
    stored = bank.store.get(TOKEN_KIND, body["access_token"])
    assert stored is not None
    assert stored["grant"] == "authorization_code" and stored["consent_id"] == consent_id


async def test_code_exchange_with_basic_and_grant_type(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = vrp_consent(bank, tpp)
    auth = await harness.authorise(tpp, consent_id)
    form = {
        "grant_type": "authorization_code",
        "scope": "payments",
        "code": auth.code,
        "redirect_uri": REDIRECT_URI,
        "code_verifier": auth.verifier,
    }
    r = await harness.http.post("/token", data=form, headers=tpp.basic())
    assert r.status_code == 200, r.text
    assert r.json()["scope"] == f"payments:{consent_id} openid"


async def test_code_is_single_use_and_replay_revokes(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    first = await harness.exchange(tpp, auth.code, auth.verifier)
    assert first.status_code == 200
    second = await harness.exchange(tpp, auth.code, auth.verifier)
    assert second.status_code == 400
    assert second.json()["error"] == "invalid_grant"
    assert second.json()["error_description"].startswith("invalid_auth_code_request_uri")
    # The tokens of the first exchange are revoked by the replay.
    assert bank.store.get(TOKEN_KIND, first.json()["access_token"]) is None
    refresh = await harness.http.post(
        "/token",
        data={"grand_type": "refresh_token", "refresh_token": first.json()["refresh_token"]},
        headers=tpp.basic(),
    )
    assert refresh.status_code == 400 and refresh.json()["error"] == "invalid_grant"


async def test_code_expires(harness: Harness, bank: Bank, tpp: Tpp, clock: ManualClock) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    clock.advance(bank.config.code_ttl)
    r = await harness.exchange(tpp, auth.code, auth.verifier)
    assert r.status_code == 400
    assert r.json() == {
        "error": "invalid_grant",
        "error_description": "invalid_auth_code_request_uri: the code has expired",
    }


async def test_code_just_before_expiry_works(harness: Harness, bank: Bank, tpp: Tpp, clock: ManualClock) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    clock.advance(bank.config.code_ttl - 1)
    assert (await harness.exchange(tpp, auth.code, auth.verifier)).status_code == 200


async def test_pkce_mismatch(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    r = await harness.exchange(tpp, auth.code, "x" * 43)
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_grant"
    assert "code_verifier does not match" in r.json()["error_description"]
    # The failed attempt consumed the code.
    assert (await harness.exchange(tpp, auth.code, auth.verifier)).status_code == 400


async def test_malformed_verifier_is_invalid_request(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    r = await harness.exchange(tpp, auth.code, "short")
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"
    # Refused before the code was looked at: the code still works.
    assert (await harness.exchange(tpp, auth.code, auth.verifier)).status_code == 200


async def test_wrong_redirect_uri(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    r = await harness.exchange(tpp, auth.code, auth.verifier, redirect_uri="https://tpp.example/other")
    assert r.status_code == 400
    assert "redirect_uri does not match" in r.json()["error_description"]


async def test_code_of_another_client(harness: Harness, bank: Bank, tpp: Tpp, other_tpp: Tpp) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    r = await harness.exchange(other_tpp, auth.code, auth.verifier)
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_grant"
    assert "another client" in r.json()["error_description"]
    # The rightful client can still use it.
    assert (await harness.exchange(tpp, auth.code, auth.verifier)).status_code == 200


async def test_unknown_code(harness: Harness, tpp: Tpp) -> None:
    r = await harness.exchange(tpp, "no-such-code", "v" * 43)
    assert r.status_code == 400
    assert r.json() == {
        "error": "invalid_grant",
        "error_description": "invalid_auth_code_request_uri: unknown authorization code",
    }


@pytest.mark.parametrize("name", ["code", "redirect_uri", "code_verifier", "scope"])
async def test_code_exchange_missing_parameter(harness: Harness, bank: Bank, tpp: Tpp, name: str) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    r = await harness.exchange(tpp, auth.code, auth.verifier, **{name: ""})
    assert r.status_code == 400
    assert r.json() == {"error": "invalid_request", "error_description": f"missing required parameter: {name}"}


async def test_code_exchange_scope(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    auth = await harness.authorise(tpp, consent_id)
    r = await harness.exchange(tpp, auth.code, auth.verifier, scope="accounts")
    assert r.status_code == 400 and r.json()["error"] == "invalid_scope"
    r = await harness.exchange(tpp, auth.code, auth.verifier, scope=f"payments:{consent_id} openid")
    assert r.status_code == 200, r.text


async def test_consent_no_longer_authorised(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    auth = await harness.authorise(tpp, consent_id)
    set_status(bank, FILE_KIND, consent_id, "Rejected")
    r = await harness.exchange(tpp, auth.code, auth.verifier)
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_grant"
    assert "is Rejected, not Authorised" in r.json()["error_description"]


# --- refresh ---------------------------------------------------------------------------------------------


async def test_refresh_grant_rotates_the_refresh_token(
    harness: Harness, bank: Bank, tpp: Tpp, clock: ManualClock
) -> None:
    consent_id = file_consent(bank, tpp)
    auth = await harness.authorise(tpp, consent_id)
    tokens = (await harness.exchange(tpp, auth.code, auth.verifier)).json()
    clock.advance(432000)  # the access token has expired; the refresh token lives on
    r = await harness.http.post(
        "/token",
        data={
            "grand_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            **tpp.assertion_form(now(clock)),
        },
    )
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    assert body["scope"] == f"payments:{consent_id} openid"
    assert body["expires_in"] == 432000
    assert body["access_token"] != tokens["access_token"]
    assert body["refresh_token"] and body["refresh_token"] != tokens["refresh_token"]  # rotated
    stored = bank.store.get(TOKEN_KIND, body["access_token"])
    assert stored is not None and stored["consent_id"] == consent_id
    assert stored["expires_at"] == now(clock) + 432000

    async def refresh(value: str) -> httpx.Response:
        form = {"grand_type": "refresh_token", "refresh_token": value}
        return await harness.http.post("/token", data=form, headers=tpp.basic())

    # The spent refresh token is refused from now on; its successor works, once, and names the next one.
    old = await refresh(tokens["refresh_token"])
    assert old.status_code == 400 and old.json()["error"] == "invalid_grant"
    assert old.json()["error_description"].startswith("invalid_refresh_token: unknown refresh token")
    third = await refresh(body["refresh_token"])
    assert third.status_code == 200, third.text
    assert third.json()["refresh_token"] not in (tokens["refresh_token"], body["refresh_token"])
    assert (await refresh(body["refresh_token"])).status_code == 400


async def test_rotation_keeps_the_grant_expiry(harness: Harness, bank: Bank, tpp: Tpp, clock: ManualClock) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    refresh = (await harness.exchange(tpp, auth.code, auth.verifier)).json()["refresh_token"]
    for _ in range(3):  # rotating never extends the grant past the first refresh token's lifetime
        clock.advance(bank.config.refresh_token_ttl // 4)
        r = await harness.http.post(
            "/token", data={"grand_type": "refresh_token", "refresh_token": refresh}, headers=tpp.basic()
        )
        assert r.status_code == 200, r.text
        refresh = r.json()["refresh_token"]
    clock.advance(bank.config.refresh_token_ttl // 4)
    r = await harness.http.post(
        "/token", data={"grand_type": "refresh_token", "refresh_token": refresh}, headers=tpp.basic()
    )
    assert r.json()["error_description"] == "invalid_refresh_token: the refresh token has expired"


async def test_code_replay_revokes_tokens_obtained_by_refreshing(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    auth = await harness.authorise(tpp, file_consent(bank, tpp))
    first = (await harness.exchange(tpp, auth.code, auth.verifier)).json()
    refreshed = await harness.http.post(
        "/token", data={"grand_type": "refresh_token", "refresh_token": first["refresh_token"]}, headers=tpp.basic()
    )
    assert refreshed.status_code == 200, refreshed.text
    later = refreshed.json()
    assert bank.store.get(TOKEN_KIND, later["access_token"]) is not None
    replay = await harness.exchange(tpp, auth.code, auth.verifier)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    # The whole grant is gone: the code's access token, and the access and refresh tokens of the refresh.
    assert bank.store.get(TOKEN_KIND, first["access_token"]) is None
    assert bank.store.get(TOKEN_KIND, later["access_token"]) is None
    again = await harness.http.post(
        "/token", data={"grand_type": "refresh_token", "refresh_token": later["refresh_token"]}, headers=tpp.basic()
    )
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


async def test_code_replay_leaves_other_grants_alone(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    auth = await harness.authorise(tpp, consent_id)
    other = await harness.authorise(tpp, file_consent(bank, tpp, reference="OTHER-1"))
    kept = (await harness.exchange(tpp, other.code, other.verifier)).json()
    await harness.exchange(tpp, auth.code, auth.verifier)
    assert (await harness.exchange(tpp, auth.code, auth.verifier)).status_code == 400
    assert bank.store.get(TOKEN_KIND, kept["access_token"]) is not None


async def test_refresh_errors(harness: Harness, bank: Bank, tpp: Tpp, other_tpp: Tpp, clock: ManualClock) -> None:
    consent_id = file_consent(bank, tpp)
    auth = await harness.authorise(tpp, consent_id)
    refresh = (await harness.exchange(tpp, auth.code, auth.verifier)).json()["refresh_token"]

    async def use(who: Tpp, **form: str) -> httpx.Response:
        return await harness.http.post("/token", data={"grand_type": "refresh_token", **form}, headers=who.basic())

    r = await use(tpp)
    assert r.json() == {"error": "invalid_request", "error_description": "missing required parameter: refresh_token"}
    r = await use(other_tpp, refresh_token=refresh)
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
    r = await use(tpp, refresh_token=refresh, scope="accounts")
    assert r.status_code == 400 and r.json()["error"] == "invalid_scope"
    set_status(bank, FILE_KIND, consent_id, "Consumed")
    r = await use(tpp, refresh_token=refresh, scope="payments")
    assert r.status_code == 200
    refresh = r.json()["refresh_token"]
    clock.advance(bank.config.refresh_token_ttl)
    r = await use(tpp, refresh_token=refresh)
    assert r.status_code == 400
    assert r.json()["error_description"] == "invalid_refresh_token: the refresh token has expired"
    assert consent_status(bank, consent_id) == "Consumed"
