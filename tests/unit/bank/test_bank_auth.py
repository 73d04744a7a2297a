"""Client assertions (decoded and verified), PKCE pairs, state values."""

from __future__ import annotations

import base64
import hashlib
import string
from datetime import UTC, datetime

import jwt
import pytest
from bank_support import key_pair

from processor.bank.auth import (
    PKCE_ALPHABET,
    ClientAssertions,
    LocalSigner,
    assertion_claims,
    basic_credential,
    new_pkce,
    new_state,
    s256_challenge,
)

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current


async def test_assertion_is_ps256_signed_with_kid_and_claims() -> None:
    clock = FixedClock(NOW)
    assertions = ClientAssertions(
        "client-1", "kid-1", "http://bank.test", LocalSigner(key_pair().private_pem), lifetime=60, clock=clock
    )
    token = await assertions.new()
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "PS256"
    assert header["kid"] == "kid-1"
    claims = jwt.decode(
        token,
        key_pair().public_pem,
        algorithms=["PS256"],
        audience="http://bank.test",
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims["iss"] == claims["sub"] == "client-1"
    assert claims["aud"] == "http://bank.test"
    assert claims["iat"] == int(NOW.timestamp())
    assert claims["exp"] == claims["iat"] + 60
    # A different key must not verify it: the signature is real.
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(
            token,
            key_pair("other").public_pem,
            algorithms=["PS256"],
            audience="http://bank.test",
            options={"verify_exp": False, "verify_iat": False},
        )


async def test_every_assertion_has_a_fresh_jti_and_current_iat() -> None:
    clock = FixedClock(NOW)
    assertions = ClientAssertions("c", "k", "http://bank.test", LocalSigner(key_pair().private_pem), clock=clock)
    first = jwt.decode(await assertions.new(), options={"verify_signature": False})
    clock.current = NOW.replace(minute=5)
    second = jwt.decode(await assertions.new(), options={"verify_signature": False})
    assert first["jti"] != second["jti"]
    assert len(first["jti"]) == 36
    assert second["iat"] - first["iat"] == 300


def test_claims_are_pure() -> None:
    claims = assertion_claims("c", "http://aud", NOW, 30, "jti-1")
    assert claims == {"iss": "c", "sub": "c", "aud": "http://aud", "iat": 1793610000, "exp": 1793610030, "jti": "jti-1"}


def test_local_signer_refuses_non_rsa_keys() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(ValueError, match="RSA"):
        LocalSigner(pem)
    assert "PRIVATE" not in repr(LocalSigner(key_pair().private_pem))


def test_s256_matches_rfc7636_appendix_b() -> None:
    assert (
        s256_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    )


@pytest.mark.parametrize("length", [43, 64, 128])
def test_pkce_verifier_length_charset_and_challenge(length: int) -> None:
    pair = new_pkce(length)
    assert len(pair.verifier) == length
    assert set(pair.verifier) <= set(string.ascii_letters + string.digits + "-._~")
    expected = base64.urlsafe_b64encode(hashlib.sha256(pair.verifier.encode()).digest()).rstrip(b"=").decode()
    assert pair.challenge == expected
    assert pair.method == "S256"
    assert pair.verifier not in repr(pair)


@pytest.mark.parametrize("length", [42, 129])
def test_pkce_refuses_out_of_range_lengths(length: int) -> None:
    with pytest.raises(ValueError, match="43-128"):
        new_pkce(length)


def test_pkce_uses_the_whole_alphabet_and_is_fresh() -> None:
    seen = "".join(new_pkce(128).verifier for _ in range(50))
    assert set(seen) == set(PKCE_ALPHABET)
    assert len({new_pkce().verifier for _ in range(100)}) == 100


def test_state_has_at_least_128_random_bits() -> None:
    states = {new_state() for _ in range(200)}
    assert len(states) == 200
    for value in states:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        assert len(raw) * 8 >= 128


def test_basic_credential() -> None:
    assert base64.b64decode(basic_credential("id", "se:cret")).decode() == "id:se:cret"
