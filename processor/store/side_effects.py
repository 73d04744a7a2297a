"""The `side_effects` table: the record of every resource-creating bank call of any flow, reached as
`tx.side_effects` inside a transaction opened by `Store.transaction()` (see `processor.store.session`).

Never paying twice, step by step (the engine's part is in the comments):

    with store.transaction() as tx:                       # 1. record the intent, commit
        effect = tx.side_effects.begin(batch_id, Operation.CREATE_CONSENT, now=now)
    if effect.status is not DONE:
        ... call the bank with effect.idempotency_key ...  # 2. the call (the same key on every retry)
        with store.transaction() as tx:                   # 3. record the outcome with the state change
            tx.side_effects.complete(batch_id, Operation.CREATE_CONSENT, consent_id, now=now)
            tx.flows.transition(flow, FlowState.CONSENT_CREATED, now=now, consent_id=consent_id)

A crash between 1 and 3 leaves the record PENDING: on resume `begin` returns it with `resumed=True` and
`previous_status="PENDING"`, which tells the engine the bank may already hold the resource, so it resolves the
outcome (re-sending with the same idempotency key, or reading the resource) instead of creating a second one.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from processor.domain.time import utc_ms
from processor.store.db import StoreError, Tx, to_datetime

MAX_IDEMPOTENCY_KEY = 40


class Operation(StrEnum):
    """The resource-creating bank calls, each recorded before and after."""

    CREATE_CONSENT = "create_consent"
    UPLOAD = "upload"
    CREATE_PAYMENT = "create_payment"
    CREATE_VRP_CONSENT = "create_vrp_consent"
    CREATE_VRP = "create_vrp"


class EffectStatus(StrEnum):
    """PENDING: recorded, outcome unknown yet. DONE: the bank created `resource_id`. FAILED: the bank refused
    (`reason`); nothing was created. AMBIGUOUS: the call may or may not have taken effect (timeout, reset,
    5xx): resolve by reading, never by a blind new call."""

    PENDING = "PENDING"
    DONE = "DONE"
    FAILED = "FAILED"
    AMBIGUOUS = "AMBIGUOUS"


@dataclass(frozen=True)
class SideEffect:
    """The record of one resource-creating call of a flow (scope: batch id, mandate id or VRP payment id)."""

    scope_id: str
    operation: str
    idempotency_key: str
    status: EffectStatus
    request_sha256: str | None
    request_body: bytes | None = field(repr=False)
    resource_id: str | None
    reason: str | None
    attempts: int
    created_at: datetime
    updated_at: datetime
    previous_status: EffectStatus | None = None  # set by `begin`: None when it created the record

    @property
    def resumed(self) -> bool:
        """`begin` found an earlier attempt that did not finish cleanly (PENDING or AMBIGUOUS): the bank may
        already hold the resource, so resolve before creating anything."""
        return self.previous_status in (EffectStatus.PENDING, EffectStatus.AMBIGUOUS)

    @property
    def done(self) -> bool:
        """The resource exists (`resource_id`); the call must not be made again."""
        return self.status is EffectStatus.DONE


class SideEffectMismatchError(StoreError):
    """An outcome that contradicts the record (e.g. a second, different resource id for a DONE call)."""


def new_idempotency_key(operation: str) -> str:
    """A fresh key: a short operation tag and 128 random bits in hex (at most 40 characters)."""
    tag = "".join(part[0] for part in operation.split("_"))[:6]
    key = f"{tag}-{secrets.token_hex(16)}"
    assert len(key) <= MAX_IDEMPOTENCY_KEY
    return key


def _effect(row: Mapping[str, Any], previous: EffectStatus | None = None) -> SideEffect:
    created, updated = to_datetime(row["created_at"]), to_datetime(row["updated_at"])
    assert created is not None and updated is not None
    return SideEffect(
        scope_id=str(row["scope_id"]),
        operation=str(row["operation"]),
        idempotency_key=str(row["idempotency_key"]),
        status=EffectStatus(row["status"]),
        request_sha256=row["request_sha256"],
        request_body=None if row["request_body"] is None else str(row["request_body"]).encode("utf-8"),
        resource_id=row["resource_id"],
        reason=row["reason"],
        attempts=int(row["attempts"]),
        created_at=created,
        updated_at=updated,
        previous_status=previous,
    )


class SideEffects:
    """The `side_effects` table: one row per (scope, operation), holding the idempotency key for every retry."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def begin(
        self,
        scope_id: str,
        operation: Operation | str,
        *,
        now: datetime,
        request_sha256: str | None = None,
        request_body: bytes | None = None,
        idempotency_key: str | None = None,
    ) -> SideEffect:
        """Record that a call is about to be made; commit before making it.

        First time: a PENDING row with a new idempotency key (`previous_status=None`), holding the request's
        hash and, when given, its exact bytes (`request_sha256` is then their hash). Again after a crash, an
        AMBIGUOUS or a FAILED outcome: the same row and key, back to PENDING, `attempts` + 1, with
        `previous_status` saying what was found; the request recorded the first time is kept (and returned), so
        the call is repeated with what it first sent. A DONE record is returned unchanged: do not call again.
        """
        op = Operation(operation).value
        key = idempotency_key or new_idempotency_key(op)
        if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
            raise ValueError(f"idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
        if request_body is not None:
            request_sha256 = hashlib.sha256(request_body).hexdigest()
        body = None if request_body is None else request_body.decode("utf-8")
        now = utc_ms(now)
        row = self.tx.fetchone(
            "INSERT INTO side_effects (scope_id, operation, idempotency_key, status, request_sha256, request_body,"
            " created_at, updated_at) VALUES (?, ?, ?, 'PENDING', ?, ?, ?, ?) ON CONFLICT (scope_id, operation)"
            " DO NOTHING RETURNING *",
            (scope_id, op, key, request_sha256, body, now, now),
        )
        if row is not None:
            return _effect(row)
        lock = " FOR UPDATE" if self.tx.dialect == "postgresql" else ""
        found = self.tx.fetchone(
            f"SELECT * FROM side_effects WHERE scope_id = ? AND operation = ?{lock}",  # noqa: S608
            (scope_id, op),
        )
        assert found is not None
        previous = EffectStatus(found["status"])
        if previous is EffectStatus.DONE:
            return _effect(found, previous)
        # A record made before any request was known (none recorded) takes this one; a recorded one stays.
        again = self.tx.fetchone(
            "UPDATE side_effects SET status = 'PENDING', attempts = attempts + 1, updated_at = ?,"
            " request_body = CASE WHEN request_sha256 IS NULL THEN ? ELSE request_body END,"
            " request_sha256 = COALESCE(request_sha256, ?) WHERE scope_id = ? AND operation = ? RETURNING *",
            (now, body, request_sha256, scope_id, op),
        )
        assert again is not None
        return _effect(again, previous)

    def get(self, scope_id: str, operation: Operation | str) -> SideEffect | None:
        """The record, or None when the call was never begun."""
        row = self.tx.fetchone(
            "SELECT * FROM side_effects WHERE scope_id = ? AND operation = ?", (scope_id, Operation(operation).value)
        )
        return None if row is None else _effect(row)

    def _finish(
        self,
        scope_id: str,
        operation: Operation | str,
        status: EffectStatus,
        resource_id: str | None,
        reason: str | None,
        now: datetime,
    ) -> SideEffect:
        op = Operation(operation).value
        current = self.get(scope_id, op)
        if current is None:
            raise SideEffectMismatchError(f"{op} of {scope_id!r} was never begun")
        if current.status is EffectStatus.DONE:
            if status is EffectStatus.DONE and resource_id == current.resource_id:
                return current  # a repeated completion with the same result is harmless
            raise SideEffectMismatchError(
                f"{op} of {scope_id!r} already DONE with another resource; refusing to record {status}"
            )
        row = self.tx.fetchone(
            "UPDATE side_effects SET status = ?, resource_id = COALESCE(?, resource_id), reason = ?, updated_at = ?"
            " WHERE scope_id = ? AND operation = ? AND status <> 'DONE' RETURNING *",
            (status.value, resource_id, reason, utc_ms(now), scope_id, op),
        )
        if row is None:  # lost a race with a completion by someone else
            raise SideEffectMismatchError(f"{op} of {scope_id!r} changed while recording {status}")
        return _effect(row)

    def complete(self, scope_id: str, operation: Operation | str, resource_id: str, *, now: datetime) -> SideEffect:
        """The call succeeded and created `resource_id`."""
        return self._finish(scope_id, operation, EffectStatus.DONE, resource_id, None, now)

    def fail(self, scope_id: str, operation: Operation | str, reason: str, *, now: datetime) -> SideEffect:
        """The bank refused the call for sure (a semantic 4xx): nothing was created."""
        return self._finish(scope_id, operation, EffectStatus.FAILED, None, reason, now)

    def mark_ambiguous(self, scope_id: str, operation: Operation | str, reason: str, *, now: datetime) -> SideEffect:
        """The outcome is unknown (timeout, reset, 5xx): resolve it before any new attempt."""
        return self._finish(scope_id, operation, EffectStatus.AMBIGUOUS, None, reason, now)

    def retire(self, scope_id: str, operations: tuple[Operation, ...], *, resource_id: str) -> str:
        """Move the records of `operations` out of the scope, to `{scope_id}/replaced/{resource_id}` (kept for the
        audit trail; returned), so the flow can begin those calls afresh with new idempotency keys. Only for a
        resource the flow abandons (a consent authorised at the bank whose tokens never reached us)."""
        into = f"{scope_id}/replaced/{resource_id}"
        if operations:
            marks = ", ".join("?" for _ in operations)
            self.tx.execute(
                f"UPDATE side_effects SET scope_id = ? WHERE scope_id = ? AND operation IN ({marks})",  # noqa: S608
                (into, scope_id, *(Operation(op).value for op in operations)),
            )
        return into

    def unresolved(self, *, before: datetime, limit: int = 100) -> list[SideEffect]:
        """PENDING or AMBIGUOUS records last touched before a time: calls whose outcome is still unknown,
        e.g. because the process died between recording and completing them."""
        rows = self.tx.fetchall(
            "SELECT * FROM side_effects WHERE status IN ('PENDING', 'AMBIGUOUS') AND updated_at < ?"
            " ORDER BY updated_at LIMIT ?",
            (utc_ms(before), limit),
        )
        return [_effect(r) for r in rows]
