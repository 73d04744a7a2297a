"""What the store keeps about people (issue 19): the append-only audit trail (`tx.audit`), console sessions
(`tx.sessions`) and failed sign-ins (`tx.sign_in_failures`).

The audit trail is only ever inserted into: the database itself refuses UPDATE and DELETE on it (triggers of
migration 11), and an action's row is written in the same transaction as the action, so neither exists without
the other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from processor.domain.time import utc_ms
from processor.store.db import Row, Tx, to_datetime


@dataclass(frozen=True)
class AuditEntry:
    """One recorded action: when, who (the authenticated name) with which role, what, on what, and its details
    (account numbers masked), and the address it came from when known."""

    id: int
    at: datetime
    actor: str
    role: str | None
    action: str
    subject: str | None
    detail: Mapping[str, Any]
    address: str | None


def _entry(row: Row) -> AuditEntry:
    at = to_datetime(row["at"])
    assert at is not None
    return AuditEntry(
        int(row["id"]),
        at,
        str(row["actor"]),
        row["role"],
        str(row["action"]),
        row["subject"],
        json.loads(row["detail"]),
        row["address"],
    )


class AuditTrail:
    """The `audit_trail` table: append and read, nothing else."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def record(
        self,
        action: str,
        *,
        actor: str,
        role: str | None,
        now: datetime,
        subject: str | None = None,
        detail: Mapping[str, Any] | None = None,
        address: str | None = None,
    ) -> int:
        """Append one entry; its id."""
        value = self.tx.scalar(
            "INSERT INTO audit_trail (at, actor, role, action, subject, detail, address)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                utc_ms(now),
                actor,
                role,
                action,
                subject,
                json.dumps(dict(detail or {}), ensure_ascii=False, sort_keys=True),
                address,
            ),
        )
        return int(value)

    def since(self, moment: datetime, *, after_id: int = 0, limit: int = 500) -> list[AuditEntry]:
        """Entries at or after `moment` (and after id `after_id`), oldest first."""
        rows = self.tx.fetchall(
            "SELECT * FROM audit_trail WHERE at >= ? AND id > ? ORDER BY id LIMIT ?",
            (utc_ms(moment), after_id, limit),
        )
        return [_entry(row) for row in rows]


class ConsoleSessions:
    """The `console_sessions` table: a session is valid while its row exists, is not ended, has not expired and
    its password stamp is the operator's current one."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def start(self, session_sha256: str, operator: str, stamp: str, *, now: datetime, expires: datetime) -> None:
        """Record a new session."""
        self.tx.execute(
            "INSERT INTO console_sessions (session_sha256, operator, password_stamp, created_at, expires_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (session_sha256, operator, stamp, utc_ms(now), utc_ms(expires)),
        )

    def active(self, session_sha256: str, operator: str, stamp: str, *, now: datetime) -> bool:
        """Whether the session is still valid for `operator` with the password stamp `stamp`."""
        row = self.tx.fetchone(
            "SELECT operator, password_stamp, expires_at, ended_at FROM console_sessions WHERE session_sha256 = ?",
            (session_sha256,),
        )
        if row is None or row["ended_at"] is not None or row["operator"] != operator:
            return False
        expires = to_datetime(row["expires_at"])
        return row["password_stamp"] == stamp and expires is not None and expires > utc_ms(now)

    def end(self, session_sha256: str, *, now: datetime) -> bool:
        """End a session (sign-out); whether it was active."""
        changed = self.tx.execute(
            "UPDATE console_sessions SET ended_at = ? WHERE session_sha256 = ? AND ended_at IS NULL",
            (utc_ms(now), session_sha256),
        )
        return changed > 0

    def forget_expired(self, *, now: datetime) -> int:
        """Delete sessions that expired a day ago or more; how many."""
        return self.tx.execute("DELETE FROM console_sessions WHERE expires_at < ?", (utc_ms(now - timedelta(days=1)),))


@dataclass(frozen=True)
class Lock:
    """Whether a subject (`operator:NAME`, `address:IP`) may try to sign in now, and its count of failures."""

    failures: int
    locked_until: datetime | None


class SignInFailures:
    """The `sign_in_failures` table: consecutive failed sign-ins per subject and the lock they earned."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def get(self, subject: str) -> Lock:
        """The subject's failures and lock (none: zero and None)."""
        row = self.tx.fetchone("SELECT failures, locked_until FROM sign_in_failures WHERE subject = ?", (subject,))
        if row is None:
            return Lock(0, None)
        return Lock(int(row["failures"]), to_datetime(row["locked_until"]))

    def failed(self, subject: str, *, now: datetime, locked_until: datetime | None) -> None:
        """Count one more failure and set the lock (None: not locked)."""
        values = (subject, utc_ms(now), None if locked_until is None else utc_ms(locked_until))
        self.tx.execute(
            "INSERT INTO sign_in_failures (subject, failures, last_failure_at, locked_until) VALUES (?, 1, ?, ?)"
            " ON CONFLICT (subject) DO UPDATE SET failures = sign_in_failures.failures + 1,"
            " last_failure_at = excluded.last_failure_at, locked_until = excluded.locked_until",
            values,
        )

    def clear(self, subject: str) -> None:
        """Forget the subject's failures (a successful sign-in)."""
        self.tx.execute("DELETE FROM sign_in_failures WHERE subject = ?", (subject,))
