"""The `auth_attempts` table: one row per pushed authorization request, holding its `state` (single use) and
its PKCE verifier (encrypted with the store key); reached as `tx.auth`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from processor.domain.time import utc_ms
from processor.store.crypto import Cipher, new_secret_token
from processor.store.db import Tx, to_datetime


class ConsumeOutcome(StrEnum):
    """Why `AuthAttempts.consume` did or did not hand out an attempt."""

    OK = "ok"
    UNKNOWN = "unknown"
    USED = "used"
    EXPIRED = "expired"


@dataclass(frozen=True)
class AuthAttempt:
    """One pushed authorization request: its `state` and (decrypted) PKCE verifier."""

    state: str = field(repr=False)
    flow_kind: str
    flow_id: str
    consent_id: str
    integration: str
    code_verifier: str = field(repr=False)
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None


@dataclass(frozen=True)
class Consumed:
    """The result of `consume`: the attempt only when `outcome` is OK (or, for USED/EXPIRED, the stored one)."""

    outcome: ConsumeOutcome
    attempt: AuthAttempt | None

    @property
    def ok(self) -> bool:
        """Whether the state was valid and is now used up by this call."""
        return self.outcome is ConsumeOutcome.OK


MIN_STATE_LENGTH = 22  # url-safe base64 of 16 bytes: 128 bits


class AuthAttempts:
    """The `auth_attempts` table. The PKCE verifier is encrypted with the store key."""

    def __init__(self, tx: Tx, cipher: Cipher) -> None:
        self.tx = tx
        self.cipher = cipher

    @staticmethod
    def _context(state: str) -> str:
        return f"auth_attempts.code_verifier|{state}"

    def _attempt(self, row: Mapping[str, Any]) -> AuthAttempt:
        created, expires = to_datetime(row["created_at"]), to_datetime(row["expires_at"])
        assert created is not None and expires is not None
        return AuthAttempt(
            state=str(row["state"]),
            flow_kind=str(row["flow_kind"]),
            flow_id=str(row["flow_id"]),
            consent_id=str(row["consent_id"]),
            integration=str(row["integration"]),
            code_verifier=self.cipher.decrypt(str(row["code_verifier_enc"]), self._context(str(row["state"]))),
            created_at=created,
            expires_at=expires,
            used_at=to_datetime(row["used_at"]),
        )

    def create(
        self,
        *,
        flow_kind: str,
        flow_id: str,
        consent_id: str,
        integration: str,
        code_verifier: str,
        now: datetime,
        expires_at: datetime,
        state: str | None = None,
    ) -> AuthAttempt:
        """Store a new attempt; `state` defaults to 256 fresh random bits. A state given must carry 128 bits
        or more (22+ url-safe characters); reusing one is an `ConstraintError`."""
        state = state or new_secret_token()
        if len(state) < MIN_STATE_LENGTH:
            raise ValueError("state must carry at least 128 random bits")
        if flow_kind not in ("file", "vrp"):
            raise ValueError("flow_kind is 'file' or 'vrp'")
        row = self.tx.fetchone(
            "INSERT INTO auth_attempts (state, flow_kind, flow_id, consent_id, integration, code_verifier_enc,"
            " created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
            (
                state,
                flow_kind,
                flow_id,
                consent_id,
                integration,
                self.cipher.encrypt(code_verifier, self._context(state)),
                utc_ms(now),
                utc_ms(expires_at),
            ),
        )
        assert row is not None
        return self._attempt(row)

    def get(self, state: str) -> AuthAttempt | None:
        """The attempt for a state (used or not), or None."""
        row = self.tx.fetchone("SELECT * FROM auth_attempts WHERE state = ?", (state,))
        return None if row is None else self._attempt(row)

    def consume(self, state: str, *, now: datetime) -> Consumed:
        """Use a state up: succeeds once, atomically, for a known, unused, unexpired state. Only an OK
        outcome may lead to a token exchange."""
        now = utc_ms(now)
        row = self.tx.fetchone(
            "UPDATE auth_attempts SET used_at = ? WHERE state = ? AND used_at IS NULL AND expires_at > ? RETURNING *",
            (now, state, now),
        )
        if row is not None:
            return Consumed(ConsumeOutcome.OK, self._attempt(row))
        found = self.get(state)
        if found is None:
            return Consumed(ConsumeOutcome.UNKNOWN, None)
        if found.used_at is not None:
            return Consumed(ConsumeOutcome.USED, found)
        return Consumed(ConsumeOutcome.EXPIRED, found)

    def for_flow(self, flow_kind: str, flow_id: str) -> list[AuthAttempt]:
        """Every attempt of a flow, oldest first."""
        rows = self.tx.fetchall(
            "SELECT * FROM auth_attempts WHERE flow_kind = ? AND flow_id = ? ORDER BY created_at",
            (flow_kind, flow_id),
        )
        return [self._attempt(r) for r in rows]
