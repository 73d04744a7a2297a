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
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from processor.domain.roles import Actor, PersonName, Role
from processor.domain.settings import Secret, Table, problem

SCRYPT_N, SCRYPT_R, SCRYPT_P = 16384, 8, 1


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


class Person(Table):
    """`[console.operators.NAME]`: one operator's stored password and role."""

    password: str = Field(repr=False)
    """scrypt:N:r:p:salt:hash, as `dispersion console hash-password NAME` prints it (never the password itself)."""
    role: Role = Field(default=Role.OPERATOR, strict=False)
    """viewer, operator, approver or admin."""

    @model_validator(mode="after")
    def _scrypt_form(self) -> Person:
        try:
            _parse_hash(self.password)
        except ValueError as exc:
            raise problem(f"{exc} (make one with `dispersion console hash-password`)") from None
        return self


class ConsoleTable(Table):
    """`[console]`: the console's operators and sessions; without operators the console is not served."""

    operators: dict[PersonName, Person] = {}
    """One [console.operators.NAME] table per operator; the older NAME = "scrypt:..." is an operator."""
    session_key: Annotated[Secret, Field(min_length=32)] | None = None
    """Signs the session cookies, the same on every instance (better: session_key_env); none: one per process."""
    session_hours: float = Field(default=8.0, gt=0, le=168)
    """How long a session lasts."""

    @field_validator("operators", mode="before")
    @classmethod
    def _older_form(cls, operators: Any) -> Any:
        if not isinstance(operators, Mapping):
            return operators
        return {name: {"password": entry} if isinstance(entry, str) else entry for name, entry in operators.items()}


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


def console_auth(table: ConsoleTable) -> ConsoleAuth | None:
    """The console's sign-in from its (checked) `[console]` table; None when it names no operator (the console is
    then not served). Without a `session_key` each process makes its own."""
    if not table.operators:
        return None
    key = table.session_key or Secret(secrets.token_urlsafe(32))
    return ConsoleAuth(operators=table.operators, session_key=key, session_seconds=table.session_hours * 3600.0)
