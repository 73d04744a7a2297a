"""Operators, their sessions and CSRF tokens.

Configuration (the `[console]` table; without operators the console is not served)::

    [console.operators.ana]
    password = "scrypt:16384:8:1:<salt>:<hash>"              # `dispersion console hash-password ana`
    role = "operator"                                         # viewer | operator | approver | admin
    [console]
    session_key_env = "DISPERSION_CONSOLE_SESSION_KEY"        # or session_key = "..."; the same on every instance
    session_hours = 8

The older form `operators = { ana = "scrypt:..." }` is still read: each such operator has the `operator` role.

Passwords are stored as scrypt hashes (salt and hash base64url), never in clear. A session is a signed cookie
(HMAC-SHA256 over the operator's name, its expiry and a random session id) so any instance with the same
`session_key` honours it; without a key each instance makes its own at start (sessions then last one process).
The CSRF token of a form is an HMAC of the session id: a page from another site cannot know it, and the server
checks it on every POST. The sign-in form, before any session, has its own id in a short-lived cookie.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from processor.domain.roles import NAME_PATTERN as _NAME
from processor.domain.roles import ROLE_NAMES, Actor, Role, role_of
from processor.domain.settings import ConfigError, Secret

SCRYPT_N, SCRYPT_R, SCRYPT_P = 16384, 8, 1
_KEYS = {"operators", "session_key", "session_hours"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * 1024 * 1024, dklen=32)


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """The stored form of a password: `scrypt:N:r:p:<salt>:<hash>`."""
    salt = salt or secrets.token_bytes(16)
    digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return f"scrypt:{SCRYPT_N}:{SCRYPT_R}:{SCRYPT_P}:{_b64(salt)}:{_b64(digest)}"


def _parse_hash(stored: str) -> tuple[int, int, int, bytes, bytes]:
    parts = stored.split(":")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise ValueError("not of the form scrypt:N:r:p:salt:hash")
    n, r, p = (int(x) for x in parts[1:4])
    if n < 2**14 or n & (n - 1) or not 1 <= r <= 32 or not 1 <= p <= 16:
        raise ValueError("scrypt parameters too weak or malformed (N a power of two >= 16384)")
    return n, r, p, _unb64(parts[4]), _unb64(parts[5])


@functools.cache
def _unknown_operator() -> str:
    """A hash to check an unknown name's password against, so that it costs one scrypt like a known name's."""
    return hash_password(secrets.token_urlsafe(16))


@dataclass(frozen=True)
class Person:
    """A configured operator: the stored password (scrypt form) and the role."""

    password: str = field(repr=False)
    role: Role = Role.OPERATOR


@dataclass(frozen=True)
class Operator:
    """A signed-in operator: the name actions are recorded with, the session and the role."""

    name: str
    session_id: str
    role: Role = Role.OPERATOR

    @property
    def actor(self) -> Actor:
        """The operator as the one who acts."""
        return Actor(self.name, self.role)

    @property
    def session_sha256(self) -> str:
        """The session's id as the store keeps it (a hash: the store never holds what a cookie carries)."""
        return hashlib.sha256(self.session_id.encode()).hexdigest()


@dataclass(frozen=True)
class ConsoleAuth:
    """The operators and the session key (see the module docstring)."""

    operators: Mapping[str, Person] = field(repr=False)
    session_key: Secret = field(repr=False)
    session_seconds: float = 8 * 3600.0
    cookie: str = "dispersion_console"

    def check_password(self, name: str, password: str) -> bool:
        """Whether `password` is the operator's; unknown names cost the same time as known ones."""
        person = self.operators.get(name)
        n, r, p, salt, digest = _parse_hash(person.password if person else _unknown_operator())
        candidate = _scrypt(password, salt, n, r, p)
        return person is not None and hmac.compare_digest(candidate, digest)

    def stamp(self, name: str) -> str:
        """A short fingerprint of the operator's configured password: a session made before a password change
        carries the old one and is refused ("" for an unknown name)."""
        person = self.operators.get(name)
        return "" if person is None else hashlib.sha256(person.password.encode()).hexdigest()[:16]

    def _mac(self, purpose: str, text: str) -> str:
        key = self.session_key.reveal().encode()
        return _b64(hmac.new(key, f"{purpose}\0{text}".encode(), hashlib.sha256).digest())

    def new_session(self, name: str, *, now: float | None = None) -> str:
        """A session cookie value for `name`."""
        expires = int((now or time.time()) + self.session_seconds)
        body = _b64(json.dumps({"n": name, "e": expires, "s": secrets.token_urlsafe(16)}).encode())
        return f"{body}.{self._mac('session', body)}"

    def session(self, value: str | None, *, now: float | None = None) -> Operator | None:
        """The operator of a session cookie, or None when it is missing, forged, expired or of a removed operator."""
        if not value or "." not in value:
            return None
        body, mac = value.rsplit(".", 1)
        if not hmac.compare_digest(mac, self._mac("session", body)):
            return None
        try:
            data: Any = json.loads(_unb64(body))
            name, expires, sid = str(data["n"]), int(data["e"]), str(data["s"])
        except (ValueError, KeyError, TypeError):
            return None
        person = self.operators.get(name)
        if expires <= (now or time.time()) or person is None:
            return None
        return Operator(name, sid, person.role)

    @staticmethod
    def new_form_id() -> str:
        """A random id for the sign-in form's CSRF token (kept in its own short-lived cookie)."""
        return secrets.token_urlsafe(24)

    def csrf_token(self, session_id: str) -> str:
        """The CSRF token of the forms of a session (or of the sign-in form's own id)."""
        return self._mac("csrf", session_id)

    def csrf_ok(self, session_id: str | None, token: object) -> bool:
        """Whether a submitted form carries its session's CSRF token."""
        if not session_id or not isinstance(token, str) or not token:
            return False
        return hmac.compare_digest(token, self.csrf_token(session_id))


def console_auth(table: Mapping[str, Any] | None, *, source: str = "<memory>") -> ConsoleAuth | None:
    """Read the (environment-resolved: `session_key_env` arrives as `session_key`) `[console]` table; None when it
    names no operator (the console is then not served)."""
    table = table or {}
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"{source}: console.{unknown[0]}: unknown key (known: {', '.join(sorted(_KEYS))})")
    operators = table.get("operators", {})
    if not isinstance(operators, Mapping):
        raise ConfigError(f"{source}: console.operators: must be a table of [console.operators.NAME] tables")
    people = {str(name): _person(name, entry, source) for name, entry in operators.items()}
    if not people:
        return None
    key = table.get("session_key")
    if key is not None and (not isinstance(key, str) or len(key) < 32):
        raise ConfigError(f"{source}: console.session_key: must be a string of at least 32 characters")
    hours = table.get("session_hours", 8)
    if isinstance(hours, bool) or not isinstance(hours, int | float) or not 0 < hours <= 24 * 7:
        raise ConfigError(f"{source}: console.session_hours: must be a number of hours in (0, 168], got {hours!r}")
    return ConsoleAuth(
        operators=people,
        session_key=Secret(key or secrets.token_urlsafe(32)),
        session_seconds=float(hours) * 3600.0,
    )


def _person(name: object, entry: object, source: str) -> Person:
    """One `[console.operators.NAME]` table (`password`, `role`), or the older `NAME = "scrypt:..."` (an operator)."""
    where = f"{source}: console.operators.{name}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: a name is 1-64 letters, digits or ._@-")
    if isinstance(entry, Mapping):
        unknown = sorted(set(entry) - {"password", "role"})
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown key (known: password, role)")
        stored, role = entry.get("password"), role_of(entry.get("role"))
        if role is None:
            raise ConfigError(f"{where}.role: must be one of {ROLE_NAMES}, got {entry.get('role')!r}")
    else:
        stored, role = entry, Role.OPERATOR
    try:
        _parse_hash(str(stored))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc} (make one with `dispersion console hash-password`)") from None
    return Person(str(stored), role)
