"""Client assertions (private_key_jwt): the checks on a signed JWT a client presents instead of a secret.

`verify_assertion` is pure: the token, the registered client and a `Policy` (issuer, the bank's current
time, lifetimes, age) in; the verified claims or `InvalidAssertionError` out. PyJWT only checks the signature; every
time claim is checked here against the policy's time, so the sandbox's injectable clock is what counts
(never the wall clock PyJWT would use).

`authenticate_assertion` is the thin adapter used by the token and PAR endpoints: it finds the client,
verifies, remembers each `jti` in the store until the assertion expires (single use; with `--db` the store is
the SQLite file, so a restart does not forget them), and turns failures into 400 `invalid_client`.

Stricter than FAPI requires where FAPI leaves room: RSA keys of at least 2048 bits, `aud` exactly the
issuer string (never a list), `iat` at most `max_age` seconds old.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from sandbox.clients import Client
from sandbox.errors import OAuthError
from sandbox.state import Bank

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ALGORITHM = "PS256"
JTI_KIND = "assertion_jti"
MIN_RSA_BITS = 2048
MAX_JTI_LENGTH = 256
# Used jtis are swept of expired entries whenever their count reaches a multiple of this.
_SWEEP_EVERY = 512


class InvalidAssertionError(Exception):
    """The assertion fails a check; the message says which (it becomes the error description)."""


@dataclass(frozen=True)
class Policy:
    """What an assertion is checked against."""

    issuer: str
    now: float
    max_lifetime: int
    clock_skew: int
    max_age: int


@dataclass(frozen=True)
class AssertionClaims:
    """The verified facts the caller still needs."""

    client_id: str
    jti: str
    exp: float


@functools.lru_cache(maxsize=256)
def load_public_key(pem: str) -> RSAPublicKey:
    """Parse a registered RSA public key (cached: the clients file does not change while running)."""
    key = serialization.load_pem_public_key(pem.encode("utf-8"))
    if not isinstance(key, RSAPublicKey):
        raise ValueError("registered public key is not an RSA key")
    return key


def unverified_header(assertion: str) -> dict[str, Any]:
    """The JOSE header, before any verification; malformed tokens are refused."""
    try:
        return dict(jwt.get_unverified_header(assertion))
    except jwt.PyJWTError:
        raise InvalidAssertionError("client_assertion is not a well-formed JWT") from None


def unverified_issuer(assertion: str) -> str:
    """The `iss` claim before verification, to find which client's key to verify with."""
    try:
        claims = jwt.decode(assertion, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise InvalidAssertionError("client_assertion is not a well-formed JWT") from None
    iss = claims.get("iss")
    if not isinstance(iss, str) or not iss:
        raise InvalidAssertionError("client_assertion has no iss claim")
    return iss


def _number(claims: dict[str, Any], name: str) -> float:
    value = claims.get(name)
    if value is None:
        raise InvalidAssertionError(f"client_assertion has no {name} claim")
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise InvalidAssertionError(f"client_assertion {name} must be a numeric date")
    return float(value)


def verify_assertion(assertion: str, client: Client, policy: Policy) -> AssertionClaims:
    """Verify a client assertion for `client`; raise `InvalidAssertionError` naming the first failed check.

    Checks: PS256 only; `kid` equal to the registered kid; the registered key RSA of `MIN_RSA_BITS` bits
    or more; signature against it; `iss` = `sub` = client id; `aud` = the issuer string (a list is refused,
    even one holding only the issuer); `exp` in the future and at most `max_lifetime` ahead; `iat` not later
    than now + `clock_skew` and not earlier than now - `max_age`; `nbf`, when present, not later than
    now + `clock_skew`; `jti` present.
    """
    header = unverified_header(assertion)
    alg = header.get("alg")
    if alg != ALGORITHM:
        raise InvalidAssertionError(f"client_assertion must be signed with {ALGORITHM}, not {alg!s:.20}")
    if header.get("kid") != client.kid:
        raise InvalidAssertionError("client_assertion kid does not match the client's registered kid")
    try:
        key = load_public_key(client.public_key_pem)
    except ValueError:
        raise InvalidAssertionError("the client's registered public key cannot be used") from None
    if key.key_size < MIN_RSA_BITS:
        raise InvalidAssertionError(
            f"the client's registered key is RSA of {key.key_size} bits; at least {MIN_RSA_BITS} bits are required"
        )
    try:
        claims: dict[str, Any] = jwt.decode(
            assertion,
            key,
            algorithms=[ALGORITHM],
            options={
                "verify_signature": True,
                # Time and identity claims are checked below, against the bank's clock.
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_aud": False,
                "verify_iss": False,
                "verify_sub": False,
                "verify_jti": False,
                "require": [],
            },
        )
    except jwt.InvalidSignatureError:
        raise InvalidAssertionError(
            "client_assertion signature does not verify with the client's registered key"
        ) from None
    except jwt.PyJWTError:
        raise InvalidAssertionError("client_assertion is not a well-formed JWT") from None

    if claims.get("iss") != client.client_id:
        raise InvalidAssertionError("client_assertion iss must be the client id")
    if claims.get("sub") != client.client_id:
        raise InvalidAssertionError("client_assertion sub must be the client id")
    if claims.get("aud") != policy.issuer:  # a list never equals the string: FAPI wants the issuer alone
        raise InvalidAssertionError(f"client_assertion aud must be the issuer {policy.issuer} (a string, not a list)")
    exp = _number(claims, "exp")
    iat = _number(claims, "iat")
    if exp <= policy.now:
        raise InvalidAssertionError("client_assertion has expired (exp is not in the future)")
    if exp - policy.now > policy.max_lifetime:
        raise InvalidAssertionError(f"client_assertion exp is more than {policy.max_lifetime} s ahead")
    if iat > policy.now + policy.clock_skew:
        raise InvalidAssertionError("client_assertion iat is in the future")
    if iat < policy.now - policy.max_age:
        raise InvalidAssertionError(f"client_assertion iat is more than {policy.max_age} s old")
    if "nbf" in claims and _number(claims, "nbf") > policy.now + policy.clock_skew:
        raise InvalidAssertionError("client_assertion is not valid yet (nbf is in the future)")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti.strip():
        raise InvalidAssertionError("client_assertion has no jti claim")
    if len(jti) > MAX_JTI_LENGTH:
        raise InvalidAssertionError(f"client_assertion jti is longer than {MAX_JTI_LENGTH} characters")
    return AssertionClaims(client.client_id, jti, exp)


def policy_for(bank: Bank) -> Policy:
    """The policy of this bank, at this bank's current time."""
    return Policy(
        issuer=bank.config.issuer,
        now=bank.now().timestamp(),
        max_lifetime=bank.config.assertion_max_lifetime,
        clock_skew=bank.config.clock_skew,
        max_age=bank.config.assertion_max_age,
    )


def sweep_used_jtis(bank: Bank, now: float) -> None:
    """Forget used jtis whose assertions have expired (they can no longer be replayed anyway)."""
    expired = [key for key, doc in bank.store.items(JTI_KIND) if float(doc["exp"]) <= now]
    for key in expired:
        bank.store.delete(JTI_KIND, key)


def authenticate_assertion(
    bank: Bank, assertion_type: str | None, assertion: str | None, client_id: str | None = None
) -> Client:
    """Authenticate a client by its assertion (private_key_jwt); 400 `invalid_client` on any failure.

    `client_id`, when the request names one, must be the assertion's issuer. The assertion's `jti` is
    single use: it is remembered until the assertion's `exp`.
    """
    if not assertion_type:
        raise OAuthError("invalid_client", f"client_assertion_type is required ({ASSERTION_TYPE})")
    if assertion_type != ASSERTION_TYPE:
        raise OAuthError("invalid_client", f"client_assertion_type must be {ASSERTION_TYPE}")
    if not assertion:
        raise OAuthError("invalid_client", "client_assertion is required")
    try:
        issuer = unverified_issuer(assertion)
        if client_id is not None and issuer != client_id:
            raise InvalidAssertionError("client_assertion iss must be the client id")
        client = bank.clients.get(issuer)
        if client is None:
            raise InvalidAssertionError("client_assertion names an unknown client")
        policy = policy_for(bank)
        claims = verify_assertion(assertion, client, policy)
    except InvalidAssertionError as exc:
        raise OAuthError("invalid_client", str(exc)) from None
    key = f"{client.client_id}\n{claims.jti}"
    seen = bank.store.get(JTI_KIND, key)
    if seen is not None and float(seen["exp"]) > policy.now:
        raise OAuthError("invalid_client", "client_assertion jti was already used")
    bank.store.put(JTI_KIND, key, {"exp": claims.exp})
    if bank.store.count(JTI_KIND) % _SWEEP_EVERY == 0:
        sweep_used_jtis(bank, policy.now)
    return client
