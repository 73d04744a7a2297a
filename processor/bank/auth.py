"""Client authentication material: client assertions (private_key_jwt), PKCE pairs, `state` values.

Client assertion (RFC 7523, spec "Authentication" 2): a JWT signed PS256 with the client's key; header `kid`;
claims `iss` = `sub` = client id, `aud` = the issuer, `iat` now, `exp` shortly after (60 s by default), a fresh
`jti` (UUID) every time. Signed locally with PyJWT by default; `assertion_signing = "remote"` asks the bank's
message-signature operation (E2) instead, which means sending the private key over the network.

PKCE (RFC 7636): a fresh verifier per authorization, 43-128 characters of the unreserved set
`A-Z a-z 0-9 - . _ ~`; challenge = base64url(SHA-256(verifier)) without padding; method `S256`.

`state`: 256 random bits, URL-safe; single use is the flow engine's job (it stores and consumes it).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import string
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from processor.domain.time import Clock, SystemClock

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ALGORITHM = "PS256"
PKCE_ALPHABET = string.ascii_letters + string.digits + "-._~"
PKCE_MIN, PKCE_MAX = 43, 128
STATE_BYTES = 32

# A signer turns (JWS header, claims) into a compact JWT.
Signer = Callable[[dict[str, Any], dict[str, Any]], Awaitable[str]]


def assertion_claims(client_id: str, audience: str, now: datetime, lifetime: int, jti: str) -> dict[str, Any]:
    """The claims of a client assertion issued at `now` (pure)."""
    iat = int(now.timestamp())
    return {"iss": client_id, "sub": client_id, "aud": audience, "iat": iat, "exp": iat + lifetime, "jti": jti}


def assertion_header(kid: str) -> dict[str, Any]:
    """The JWS header of a client assertion."""
    return {"alg": ALGORITHM, "kid": kid, "typ": "JWT"}


class LocalSigner:
    """Signs with the client's RSA private key in this process (PS256)."""

    def __init__(self, private_key_pem: str | bytes) -> None:
        pem = private_key_pem.encode() if isinstance(private_key_pem, str) else private_key_pem
        key = load_pem_private_key(pem, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("the signing key must be an RSA private key")
        self._key = key

    def __repr__(self) -> str:
        return f"LocalSigner(rsa-{self._key.key_size})"

    def sign_sync(self, header: dict[str, Any], claims: dict[str, Any]) -> str:
        """The compact JWT for these claims."""
        extra = {k: v for k, v in header.items() if k != "alg"}
        return jwt.encode(claims, self._key, algorithm=ALGORITHM, headers=extra)

    async def __call__(self, header: dict[str, Any], claims: dict[str, Any]) -> str:
        """Sign (the Signer interface)."""
        return self.sign_sync(header, claims)


class ClientAssertions:
    """Makes a new client assertion on each call: fresh jti, iat from the clock, short exp."""

    def __init__(
        self,
        client_id: str,
        kid: str,
        audience: str,
        signer: Signer,
        *,
        lifetime: int = 60,
        clock: Clock | None = None,
        new_jti: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self.client_id = client_id
        self.kid = kid
        self.audience = audience
        self.lifetime = lifetime
        self._signer = signer
        self._clock = clock or SystemClock()
        self._new_jti = new_jti

    async def new(self) -> str:
        """A freshly signed assertion."""
        claims = assertion_claims(self.client_id, self.audience, self._clock.now(), self.lifetime, self._new_jti())
        return await self._signer(assertion_header(self.kid), claims)


@dataclass(frozen=True)
class Pkce:
    """A PKCE pair. The verifier is a secret: it stays out of reprs."""

    verifier: str = field(repr=False)
    challenge: str
    method: str = "S256"


def s256_challenge(verifier: str) -> str:
    """base64url(SHA-256(ascii(verifier))) without padding."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def new_pkce(length: int = 64) -> Pkce:
    """A fresh verifier of `length` characters (43-128) from the unreserved set, with its S256 challenge."""
    if not PKCE_MIN <= length <= PKCE_MAX:
        raise ValueError(f"PKCE verifier length must be {PKCE_MIN}-{PKCE_MAX}, got {length}")
    verifier = _unreserved(length)
    return Pkce(verifier, s256_challenge(verifier))


def _unreserved(length: int) -> str:
    """`length` characters drawn uniformly from PKCE_ALPHABET: random bytes below the largest multiple of the
    alphabet's size are kept (rejection sampling), so one read of the OS source usually suffices, where
    `secrets.choice` reads it once per character."""
    size = len(PKCE_ALPHABET)
    limit = 256 - 256 % size
    chars: list[str] = []
    while len(chars) < length:
        chars.extend(PKCE_ALPHABET[b % size] for b in secrets.token_bytes(2 * length) if b < limit)
    return "".join(chars[:length])


def new_state() -> str:
    """An unguessable `state` (256 random bits, URL-safe)."""
    return secrets.token_urlsafe(STATE_BYTES)


def basic_credential(client_id: str, client_secret: str) -> str:
    """base64(client_id:client_secret), as the spec defines the Basic credential."""
    return base64.b64encode(f"{client_id}:{client_secret}".encode()).decode("ascii")
