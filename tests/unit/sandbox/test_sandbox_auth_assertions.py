"""Client assertion checks: the pure verifier and the token endpoint's use of it (jti single use, clock)."""

# Fixtures are imported from sandbox_auth_fixtures by name; pytest injects them as parameters of the same name.
# ruff: noqa: F811

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from manual_clock import ManualClock
from sandbox_auth_fixtures import (  # noqa: F401 (fixtures)
    ASSERTION_TYPE,
    ISSUER,
    Tpp,
    bank,
    clock,
    http,
    key_pair,
    make_bank,
    make_tpp,
    other_tpp,
    tpp,
)

from sandbox.app import create_app
from sandbox.errors import OAuthError
from sandbox.oauth.assertions import (
    JTI_KIND,
    InvalidAssertionError,
    Policy,
    authenticate_assertion,
    sweep_used_jtis,
    verify_assertion,
)
from sandbox.state import Bank

NOW = 1_800_000_000.0


def policy(now: float = NOW) -> Policy:
    return Policy(issuer=ISSUER, now=now, max_lifetime=3600, clock_skew=30, max_age=300)


@functools.cache
def small_key_pair() -> tuple[str, str]:
    """(private PEM, public PEM) of a 1024-bit RSA key: too short for the sandbox."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def with_small_key(tpp: Tpp) -> Tpp:
    """The same client, registered with a 1024-bit key instead."""
    private, public = small_key_pair()
    return Tpp(dataclasses.replace(tpp.client, public_key_pem=public), private)


def test_valid_assertion_is_accepted(tpp: Tpp) -> None:
    claims = verify_assertion(tpp.assertion(NOW, jti="j-1"), tpp.client, policy())
    assert claims.client_id == tpp.client_id
    assert claims.jti == "j-1"
    assert claims.exp == NOW + 60


@pytest.mark.parametrize("aud", [["https://elsewhere.example", ISSUER], [ISSUER], f"{ISSUER}/", ISSUER.upper()])
def test_audience_must_be_the_issuer_string_alone(tpp: Tpp, aud: Any) -> None:
    # FAPI: the issuer as a single string. A list is refused even when it holds only the issuer.
    with pytest.raises(InvalidAssertionError, match="aud must be the issuer"):
        verify_assertion(tpp.assertion(NOW, aud=aud), tpp.client, policy())


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_a_1024_bit_client_key_is_refused() -> None:
    small = with_small_key(make_tpp("tpp-small", 0))
    with pytest.raises(InvalidAssertionError, match="RSA of 1024 bits; at least 2048 bits are required"):
        verify_assertion(small.assertion(NOW), small.client, policy())


def test_iat_may_be_up_to_max_age_old(tpp: Tpp) -> None:
    assert verify_assertion(tpp.assertion(NOW, iat=int(NOW) - 300), tpp.client, policy()).jti


@pytest.mark.parametrize("age", [301, 3000, 365 * 24 * 3600])
def test_an_old_iat_is_refused(tpp: Tpp, age: int) -> None:
    # exp is still valid (within the lifetime): only iat tells the assertion was made long ago.
    token = tpp.assertion(NOW, iat=int(NOW) - age)
    with pytest.raises(InvalidAssertionError, match="iat is more than 300 s old"):
        verify_assertion(token, tpp.client, policy())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alg": "RS256"}, "must be signed with PS256"),
        ({"alg": "PS384"}, "must be signed with PS256"),
        ({"alg": "PS512"}, "must be signed with PS256"),
        ({"kid": "another-kid"}, "kid does not match"),
        ({"iss": "someone-else"}, "iss must be the client id"),
        ({"sub": "someone-else"}, "sub must be the client id"),
        ({"aud": "https://other-issuer.example"}, "aud must be the issuer"),
        ({"aud": [f"{ISSUER}/token"]}, "aud must be the issuer"),
        ({"drop": ("aud",)}, "aud must be the issuer"),
        ({"exp": int(NOW) - 1}, "has expired"),
        ({"exp": int(NOW)}, "has expired"),
        ({"exp": int(NOW) + 3601}, "more than 3600 s ahead"),
        ({"iat": int(NOW) + 31}, "iat is in the future"),
        ({"nbf": int(NOW) + 31}, "nbf is in the future"),
        ({"drop": ("exp",)}, "no exp claim"),
        ({"drop": ("iat",)}, "no iat claim"),
        ({"exp": "soon"}, "exp must be a numeric date"),
        ({"drop": ("jti",)}, "no jti claim"),
        ({"jti": ""}, "no jti claim"),
        ({"jti": "x" * 257}, "longer than 256"),
    ],
)
def test_each_check_refuses(tpp: Tpp, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidAssertionError, match=message):
        verify_assertion(tpp.assertion(NOW, **kwargs), tpp.client, policy())


def test_iat_within_the_skew_is_accepted(tpp: Tpp) -> None:
    assert verify_assertion(tpp.assertion(NOW, iat=int(NOW) + 30), tpp.client, policy()).jti


def test_wrong_key_fails_the_signature(tpp: Tpp) -> None:
    other_private, _ = key_pair(1)
    with pytest.raises(InvalidAssertionError, match="signature does not verify"):
        verify_assertion(tpp.assertion(NOW, key=other_private), tpp.client, policy())


def test_hs256_signed_with_the_public_key_is_refused(tpp: Tpp) -> None:
    # The classic algorithm-confusion attack: HMAC keyed with the (public) PEM.
    token = jwt.encode(
        {"iss": tpp.client_id, "sub": tpp.client_id, "aud": ISSUER, "iat": NOW, "exp": NOW + 60, "jti": "x"},
        b"any-shared-secret-of-enough-length-000",
        algorithm="HS256",
        headers={"kid": tpp.client.kid},
    )
    with pytest.raises(InvalidAssertionError, match="must be signed with PS256"):
        verify_assertion(token, tpp.client, policy())


def test_unsigned_token_is_refused(tpp: Tpp) -> None:
    token = jwt.encode({"iss": tpp.client_id}, "", algorithm="none", headers={"kid": tpp.client.kid})
    with pytest.raises(InvalidAssertionError, match="must be signed with PS256"):
        verify_assertion(token, tpp.client, policy())


def test_tampered_payload_fails_the_signature(tpp: Tpp) -> None:
    header, _, signature = tpp.assertion(NOW).split(".")
    forged = jwt.utils.base64url_encode(
        b'{"iss":"tpp-one","sub":"tpp-one","aud":"http://sandbox.test","iat":1,"exp":9999999999,"jti":"z"}'
    ).decode()
    with pytest.raises(InvalidAssertionError, match="signature does not verify"):
        verify_assertion(f"{header}.{forged}.{signature}", tpp.client, policy())


def test_garbage_is_not_a_jwt(tpp: Tpp) -> None:
    with pytest.raises(InvalidAssertionError, match="not a well-formed JWT"):
        verify_assertion("not-a-jwt", tpp.client, policy())


def test_time_comes_from_the_policy_not_the_wall_clock(tpp: Tpp) -> None:
    # An assertion from 2020 is valid at a 2020 policy time, although the wall clock is far later.
    then = 1_600_000_000.0
    assert verify_assertion(tpp.assertion(then), tpp.client, policy(then)).client_id == tpp.client_id
    with pytest.raises(InvalidAssertionError, match="has expired"):
        verify_assertion(tpp.assertion(then), tpp.client, policy(then + 61))


# --- through the token endpoint --------------------------------------------------------------------------


async def cc_token(http: httpx.AsyncClient, assertion: str, **extra: str) -> httpx.Response:
    form = {
        "grand_type": "client_credentials",
        "scope": "payments openid",
        "client_assertion_type": ASSERTION_TYPE,
        "client_assertion": assertion,
        **extra,
    }
    return await http.post("/token", data=form)


async def test_reused_jti_is_refused(http: httpx.AsyncClient, tpp: Tpp, clock: ManualClock) -> None:
    assertion = tpp.assertion(clock.now().timestamp())
    first = await cc_token(http, assertion)
    assert first.status_code == 200, first.text
    second = await cc_token(http, assertion)
    assert second.status_code == 400
    assert second.json() == {"error": "invalid_client", "error_description": "client_assertion jti was already used"}


async def test_same_jti_for_two_clients_is_fine(
    http: httpx.AsyncClient, tpp: Tpp, other_tpp: Tpp, clock: ManualClock
) -> None:
    now = clock.now().timestamp()
    assert (await cc_token(http, tpp.assertion(now, jti="shared"))).status_code == 200
    assert (await cc_token(http, other_tpp.assertion(now, jti="shared"))).status_code == 200


async def test_endpoint_uses_the_bank_clock(http: httpx.AsyncClient, tpp: Tpp, clock: ManualClock) -> None:
    assertion = tpp.assertion(clock.now().timestamp())
    clock.advance(61)
    r = await cc_token(http, assertion)
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_client"
    assert "expired" in r.json()["error_description"]


async def test_expired_jtis_are_swept_without_reopening_live_ones(bank: Bank, tpp: Tpp, clock: ManualClock) -> None:
    for _ in range(3):
        authenticate_assertion(bank, ASSERTION_TYPE, tpp.assertion(clock.now().timestamp()))
    clock.advance(120)
    live = tpp.assertion(clock.now().timestamp())
    authenticate_assertion(bank, ASSERTION_TYPE, live)
    sweep_used_jtis(bank, clock.now().timestamp())
    assert bank.store.count(JTI_KIND) == 1
    with pytest.raises(OAuthError, match="already used"):
        authenticate_assertion(bank, ASSERTION_TYPE, live)


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"client_assertion_type": "urn:other"}, "client_assertion_type must be"),
        ({"client_assertion_type": ""}, "client_assertion_type is required"),
        ({"client_assertion": ""}, "client_assertion is required"),
        ({"client_id": "tpp-two"}, "iss must be the client id"),
    ],
)
async def test_assertion_parameters(
    http: httpx.AsyncClient, tpp: Tpp, clock: ManualClock, form: dict[str, str], message: str
) -> None:
    r = await cc_token(http, tpp.assertion(clock.now().timestamp()), **form)
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_client"
    assert message in r.json()["error_description"]


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
async def test_small_key_answers_invalid_client_at_the_endpoint(clock: ManualClock, tpp: Tpp) -> None:
    small = with_small_key(tpp)
    small_bank = make_bank([small], clock)
    transport = httpx.ASGITransport(app=create_app(small_bank))
    async with httpx.AsyncClient(transport=transport, base_url=ISSUER) as client:
        r = await cc_token(client, small.assertion(clock.now().timestamp()))
    assert r.status_code == 400
    assert r.json() == {
        "error": "invalid_client",
        "error_description": "the client's registered key is RSA of 1024 bits; at least 2048 bits are required",
    }


async def test_unknown_client_in_assertion(http: httpx.AsyncClient, tpp: Tpp, clock: ManualClock) -> None:
    now = clock.now().timestamp()
    r = await cc_token(http, tpp.assertion(now, iss="nobody", sub="nobody"))
    assert r.status_code == 400
    assert r.json() == {"error": "invalid_client", "error_description": "client_assertion names an unknown client"}


async def test_every_check_answers_invalid_client_at_the_endpoint(
    http: httpx.AsyncClient, tpp: Tpp, clock: ManualClock
) -> None:
    now = clock.now().timestamp()
    other_private, _ = key_pair(1)
    bad = [
        tpp.assertion(now, alg="RS256"),
        tpp.assertion(now, key=other_private),
        tpp.assertion(now, kid="wrong"),
        tpp.assertion(now, sub="x"),
        tpp.assertion(now, aud="https://x"),
        tpp.assertion(now, exp=int(now) - 5),
        tpp.assertion(now, exp=int(now) + 7200),
        tpp.assertion(now, iat=int(now) + 600),
        tpp.assertion(now, iat=int(now) - 365 * 24 * 3600),
        tpp.assertion(now, aud=[ISSUER]),
    ]
    for assertion in bad:
        r = await cc_token(http, assertion)
        assert r.status_code == 400
        assert r.json()["error"] == "invalid_client"
