"""Encryption at rest for the store's secret columns (PKCE verifiers, access and refresh tokens).

AES-256-GCM with a random 96-bit nonce per value. Each ciphertext is bound to where it lives through the
associated data (for example `consent_tokens.refresh_token|<consent_id>`), so a value copied into another
row or column fails to decrypt instead of being used there.

Stored form (ASCII text, fits a TEXT column on both engines):

    v1.<key id: 8 hex chars>.<base64url(nonce || ciphertext || tag)>

Keys are 32 random bytes written as url-safe base64 (the same text form as a Fernet key, so
`generate_key()` or any Fernet key generator makes one). The primary key comes from `DISPERSION_STORE_KEY`;
older keys still needed for reading go, comma-separated, in `DISPERSION_STORE_OLD_KEYS` (rotation: put the new
key first, keep the old one among the old keys until every row was rewritten). Without a key the store
refuses to start unless a development key is explicitly allowed (`allow_dev_key=True` or
`DISPERSION_STORE_ALLOW_DEV_KEY=1`): that key is public, so it protects nothing and is for local runs only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from collections.abc import Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from processor.store.db import StoreError

ENV_KEY = "DISPERSION_STORE_KEY"
ENV_OLD_KEYS = "DISPERSION_STORE_OLD_KEYS"
ENV_ALLOW_DEV_KEY = "DISPERSION_STORE_ALLOW_DEV_KEY"
VERSION = "v1"
NONCE_BYTES = 12

# Public on purpose: only ever used when a caller opts in to an insecure development setup.
DEV_KEY_TEXT = base64.urlsafe_b64encode(hashlib.sha256(b"dispersion development store key").digest()).decode()


class StoreKeyError(StoreError):
    """The encryption key is missing or malformed, or a stored value cannot be decrypted with the known keys."""


def generate_key() -> str:
    """A new random key in the text form `DISPERSION_STORE_KEY` expects."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def parse_key(text: str) -> bytes:
    """Decode a key's text form (url-safe base64 of 32 bytes, padding optional)."""
    cleaned = text.strip()
    try:
        raw = base64.urlsafe_b64decode(cleaned + "=" * (-len(cleaned) % 4))
    except (binascii.Error, ValueError):
        raise StoreKeyError("store key is not url-safe base64") from None
    if len(raw) != 32:
        raise StoreKeyError(f"store key must decode to 32 bytes, not {len(raw)}")
    return raw


def key_id(key: bytes) -> str:
    """A short public fingerprint naming a key inside ciphertexts (never enough to recover it)."""
    return hashlib.sha256(b"dispersion-store-key-id" + key).hexdigest()[:8]


class Cipher:
    """Encrypts with the first key; decrypts with whichever known key a ciphertext names."""

    def __init__(self, keys: Sequence[bytes], *, insecure_dev_key: bool = False) -> None:
        if not keys:
            raise StoreKeyError("at least one store key is needed")
        self._primary = key_id(keys[0])
        self._keys = {key_id(k): AESGCM(k) for k in keys}
        self.insecure_dev_key = insecure_dev_key

    def __repr__(self) -> str:
        return f"Cipher(primary={self._primary}, keys={len(self._keys)}, dev={self.insecure_dev_key})"

    @classmethod
    def from_text(cls, primary: str, old: Sequence[str] = ()) -> Cipher:
        """Build from key texts: the primary key first, then keys only used to read older values."""
        return cls([parse_key(primary), *(parse_key(t) for t in old if t.strip())])

    def encrypt(self, plaintext: str, context: str) -> str:
        """Encrypt `plaintext`, bound to `context` (where the value is stored)."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = self._keys[self._primary].encrypt(nonce, plaintext.encode(), _aad(context))
        return f"{VERSION}.{self._primary}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def decrypt(self, stored: str, context: str) -> str:
        """Decrypt a value written by `encrypt` with the same `context`; any mismatch is `StoreKeyError`."""
        version, _, rest = stored.partition(".")
        kid, _, body = rest.partition(".")
        if version != VERSION or not body:
            raise StoreKeyError("stored secret has an unknown format")
        aead = self._keys.get(kid)
        if aead is None:
            raise StoreKeyError(f"stored secret was encrypted with key {kid}, which is not configured")
        try:
            raw = base64.urlsafe_b64decode(body)
            return aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(context)).decode()
        except (InvalidTag, binascii.Error, ValueError):
            raise StoreKeyError("stored secret failed authentication (wrong key, context or tampered)") from None


def new_secret_token() -> str:
    """An unguessable url-safe token with 256 random bits (approval tokens, OAuth `state`)."""
    return secrets.token_urlsafe(32)


def require_cipher(cipher: Cipher | None) -> Cipher:
    """The cipher, or a clear error for stores opened without a key."""
    if cipher is None:
        raise StoreKeyError("this store was opened without an encryption key; secrets cannot be read or written")
    return cipher


def _aad(context: str) -> bytes:
    return f"dispersion-store|{VERSION}|{context}".encode()


def load_cipher(environ: Mapping[str, str] | None = None, *, allow_dev_key: bool = False) -> Cipher:
    """The cipher configured by the environment (see the module docstring).

    Raises `StoreKeyError` when `DISPERSION_STORE_KEY` is absent, unless `allow_dev_key` is True or
    `DISPERSION_STORE_ALLOW_DEV_KEY=1`, in which case the public development key is used.
    """
    env = os.environ if environ is None else environ
    primary = env.get(ENV_KEY, "").strip()
    old = [t for t in env.get(ENV_OLD_KEYS, "").split(",") if t.strip()]
    if primary:
        return Cipher.from_text(primary, old)
    if allow_dev_key or env.get(ENV_ALLOW_DEV_KEY, "") == "1":
        cipher = Cipher([parse_key(DEV_KEY_TEXT), *(parse_key(t) for t in old)], insecure_dev_key=True)
        return cipher
    raise StoreKeyError(
        f"{ENV_KEY} is not set: the store encrypts tokens and PKCE verifiers and needs a key. Generate one with "
        '`python -c "from processor.store import generate_key; print(generate_key())"` and keep it in your '
        f"secret manager; for a local development run only, set {ENV_ALLOW_DEV_KEY}=1."
    )
