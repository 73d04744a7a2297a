"""Repositories of the file-payment flow (flow A) and of what every flow shares: side-effect records,
authorization attempts and per-consent tokens.

All of them work inside a transaction opened by `Store.transaction()` (see `processor.store.session`) and
are reached from it: `tx.flows`, `tx.side_effects`, `tx.auth`, `tx.tokens`.

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
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, ClassVar, TypedDict, Unpack

from processor.domain.file_states import TERMINAL_FLOW_STATES, FlowState
from processor.domain.time import utc_ms
from processor.store.crypto import Cipher, StoreKeyError
from processor.store.db import StoreError, Tx, to_datetime
from processor.store.outbox import Outbox, StatusEvent
from processor.store.values import Kind, json_text, load_json, money, sha256_hex
from processor.store.work import WORK_COLUMNS, WORK_UPDATABLE, Created, VersionConflictError, WorkRepo

MAX_IDEMPOTENCY_KEY = 40


def new_secret_token() -> str:
    """An unguessable url-safe token with 256 random bits (approval tokens, OAuth `state`)."""
    return secrets.token_urlsafe(32)


# -- flows ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flow:
    """One file-payment flow, keyed by the batch id.

    The batch payload and the per-transaction report can be large (100,000 transactions), so they are not part
    of this row: read them with `FlowRepo.payload` / `FlowRepo.report` when needed.
    """

    batch_id: str
    integration: str
    state: str
    payload_sha256: str
    file_reference: str | None
    file_hash: str | None
    number_of_transactions: int | None
    control_sum: Decimal | None
    consent_id: str | None
    file_payment_id: str | None
    approval_token: str = field(repr=False)
    authorization_deadline: datetime | None
    next_action_at: datetime | None
    attempts: int
    version: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    bank_status: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    traceparent: str | None = None  # W3C trace context of the batch's intake: later steps continue its trace
    execute_on: date | None = None  # a scheduled batch: the day its payment is made on (integration's zone)

    @property
    def key(self) -> str:
        """The flow's key (its batch id)."""
        return self.batch_id

    @property
    def terminal(self) -> bool:
        """Whether the flow has ended."""
        return self.state in TERMINAL_FLOW_STATES


class FlowFields(TypedDict, total=False):
    """Columns `FlowRepo.transition` may change besides the state (absent: unchanged; None: set NULL)."""

    next_action_at: datetime | None
    attempts: int
    bank_status: str | None
    last_error: str | None
    file_reference: str | None
    file_hash: str | None
    number_of_transactions: int | None
    control_sum: Decimal | None
    consent_id: str | None
    file_payment_id: str | None
    authorization_deadline: datetime | None
    report: Any


class FlowChanges(FlowFields, total=False):
    """Columns `FlowRepo.update` may change."""

    state: str


class FlowRepo(WorkRepo[Flow]):
    """The `flows` table."""

    table: ClassVar[str] = "flows"
    key_column: ClassVar[str] = "batch_id"
    columns: ClassVar[Mapping[str, Kind]] = {
        "batch_id": "text",
        "integration": "text",
        "payload_sha256": "text",
        "file_reference": "text",
        "file_hash": "text",
        "number_of_transactions": "int",
        "control_sum": "money",
        "consent_id": "text",
        "file_payment_id": "text",
        "approval_token": "text",
        "authorization_deadline": "ts",
        **WORK_COLUMNS,
        "traceparent": "text",
        "execute_on": "date",
    }
    write_only: ClassVar[Mapping[str, Kind]] = {"report": "json"}
    updatable: ClassVar[frozenset[str]] = WORK_UPDATABLE | {
        "file_reference",
        "file_hash",
        "number_of_transactions",
        "control_sum",
        "consent_id",
        "file_payment_id",
        "authorization_deadline",
        "report",
    }
    row_type: ClassVar[type[Any]] = Flow

    def create(
        self,
        batch_id: str,
        integration: str,
        payload: str | bytes | Mapping[str, Any],
        *,
        now: datetime,
        state: str = FlowState.RECEIVED,
        file_reference: str | None = None,
        file_hash: str | None = None,
        number_of_transactions: int | None = None,
        control_sum: Decimal | None = None,
        authorization_deadline: datetime | None = None,
        next_action_at: datetime | None = None,
        approval_token: str | None = None,
        payload_checked: bool = False,
        content_sha256: str | None = None,
        traceparent: str | None = None,
        execute_on: date | None = None,
    ) -> Created[Flow]:
        """Insert a flow unless its batch id exists. A duplicate changes nothing and comes back with
        `created=False` (and `same_document` telling whether it was the same batch).

        `content_sha256`: the hash of the batch's business content (`processor.domain.identity`), stored as
        `payload_sha256` and compared for a duplicate, so a resubmission that differs only in `requested_at` or
        `source` is the same batch; without it the payload text's hash is used.

        `payload_checked`: the payload text is known to be JSON (the caller parsed or produced it), so it is
        not parsed once more to check (for a 100,000-transfer batch that parse alone costs about 100 MiB).

        `traceparent`: the W3C trace context of the batch's intake, kept as text for the flow's later steps.
        `execute_on`: the day a scheduled batch is to be paid on (its payment is never created earlier)."""
        text = payload if payload_checked and isinstance(payload, str) else json_text(payload)
        digest = content_sha256 or sha256_hex(text)
        now = utc_ms(now)
        row = self.tx.fetchone(
            "INSERT INTO flows (batch_id, integration, state, payload, payload_sha256, file_reference, file_hash,"  # noqa: S608
            " number_of_transactions, control_sum, approval_token, authorization_deadline, next_action_at,"
            " created_at, updated_at, traceparent, execute_on)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            f" ON CONFLICT (batch_id) DO NOTHING RETURNING {self._cols()}",
            (
                batch_id,
                integration,
                str(state),
                text,
                digest,
                file_reference,
                file_hash,
                number_of_transactions,
                None if control_sum is None else money(control_sum),
                approval_token or new_secret_token(),
                authorization_deadline,
                next_action_at,
                now,
                now,
                traceparent,
                None if execute_on is None else execute_on.isoformat(),
            ),
        )
        if row is not None:
            return Created(self._decode(row), True)
        existing = self.require(batch_id)
        return Created(existing, False, existing.payload_sha256 == digest)

    def update(
        self,
        batch_id: str,
        *,
        expected_version: int,
        now: datetime,
        owner: str | None = None,
        release_lease: bool = False,
        **changes: Unpack[FlowChanges],
    ) -> Flow:
        """Compare-and-set: apply `changes` if the row still has `expected_version` (and, with `owner`, that
        owner still holds the lease); bump the version. Otherwise raise `VersionConflictError`."""
        return self._update(
            batch_id,
            expected_version=expected_version,
            now=now,
            owner=owner,
            release_lease=release_lease,
            changes=dict(changes),
        )

    def transition(
        self,
        flow: Flow,
        state: str,
        *,
        now: datetime,
        owner: str | None = None,
        event: StatusEvent | None = None,
        release_lease: bool = False,
        **changes: Unpack[FlowFields],
    ) -> Flow:
        """Move `flow` (as read, at its version) to `state` with `changes`, and append `event` to the outbox
        in the same transaction. A concurrent change raises `VersionConflictError`; a repeated or backward status
        event raises `StatusConflictError`; either way the caller's transaction rolls back as a whole."""
        updated = self._update(
            flow.batch_id,
            expected_version=flow.version,
            now=now,
            owner=owner,
            release_lease=release_lease,
            changes={**changes, "state": str(state)},
        )
        if event is not None:
            Outbox(self.tx).emit(event, flow.batch_id, now=now)
        return updated

    def get_by_consent(self, consent_id: str) -> Flow | None:
        """The flow that created this consent, or None."""
        row = self.tx.fetchone(f"SELECT {self._cols()} FROM flows WHERE consent_id = ?", (consent_id,))  # noqa: S608
        return None if row is None else self._decode(row)

    def get_by_file_payment(self, file_payment_id: str) -> Flow | None:
        """The flow of this file payment, or None."""
        row = self.tx.fetchone(f"SELECT {self._cols()} FROM flows WHERE file_payment_id = ?", (file_payment_id,))  # noqa: S608
        return None if row is None else self._decode(row)

    def payload(self, batch_id: str) -> str | None:
        """The batch payload's JSON text exactly as stored, or None for an unknown batch."""
        value = self.tx.scalar("SELECT payload FROM flows WHERE batch_id = ?", (batch_id,))
        return None if value is None else str(value)

    def payload_document(self, batch_id: str) -> Any:
        """The batch payload parsed (fractions as Decimal); None for an unknown batch."""
        text = self.payload(batch_id)
        return None if text is None else load_json(text)

    def report(self, batch_id: str) -> Any:
        """The per-transaction report stored with the flow (amounts as strings), or None."""
        value = self.tx.scalar("SELECT report FROM flows WHERE batch_id = ?", (batch_id,))
        return None if value is None else load_json(str(value))

    def check_approval(self, batch_id: str, token: str) -> Flow | None:
        """The flow if `token` is its approval token (compared in constant time), else None."""
        flow = self.get(batch_id)
        if flow is None or not hmac.compare_digest(flow.approval_token.encode(), token.encode()):
            return None
        return flow


# -- side effects -----------------------------------------------------------------------------------------------


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

    def for_scope(self, scope_id: str) -> list[SideEffect]:
        """Every record of a flow, oldest first."""
        rows = self.tx.fetchall("SELECT * FROM side_effects WHERE scope_id = ? ORDER BY created_at", (scope_id,))
        return [_effect(r) for r in rows]

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


# -- authorization attempts -------------------------------------------------------------------------------------


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

    def purge(self, *, expired_before: datetime) -> int:
        """Delete attempts that expired before a time (housekeeping)."""
        return self.tx.execute("DELETE FROM auth_attempts WHERE expires_at < ?", (utc_ms(expired_before),))


# -- tokens -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsentTokens:
    """The authorization-code tokens of one consent (decrypted)."""

    consent_id: str
    integration: str
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    scope: str | None
    expires_at: datetime
    version: int
    created_at: datetime
    updated_at: datetime

    def expires_within(self, now: datetime, seconds: float) -> bool:
        """Whether the access token is expired or will be within `seconds` (refresh it first)."""
        return (self.expires_at - utc_ms(now)).total_seconds() <= seconds


class TokenRepo:
    """The `consent_tokens` table; both tokens are encrypted with the store key."""

    def __init__(self, tx: Tx, cipher: Cipher) -> None:
        self.tx = tx
        self.cipher = cipher

    @staticmethod
    def _context(column: str, consent_id: str) -> str:
        return f"consent_tokens.{column}|{consent_id}"

    def _tokens(self, row: Mapping[str, Any]) -> ConsentTokens:
        consent_id = str(row["consent_id"])
        refresh = row["refresh_token_enc"]
        expires, created, updated = (to_datetime(row[c]) for c in ("expires_at", "created_at", "updated_at"))
        assert expires is not None and created is not None and updated is not None
        return ConsentTokens(
            consent_id=consent_id,
            integration=str(row["integration"]),
            access_token=self.cipher.decrypt(str(row["access_token_enc"]), self._context("access_token", consent_id)),
            refresh_token=None
            if refresh is None
            else self.cipher.decrypt(str(refresh), self._context("refresh_token", consent_id)),
            scope=row["scope"],
            expires_at=expires,
            version=int(row["version"]),
            created_at=created,
            updated_at=updated,
        )

    def _sealed(self, consent_id: str, access_token: str, refresh_token: str | None) -> tuple[str, str | None]:
        return (
            self.cipher.encrypt(access_token, self._context("access_token", consent_id)),
            None
            if refresh_token is None
            else self.cipher.encrypt(refresh_token, self._context("refresh_token", consent_id)),
        )

    def save(
        self,
        consent_id: str,
        *,
        integration: str,
        access_token: str,
        expires_at: datetime,
        now: datetime,
        refresh_token: str | None = None,
        scope: str | None = None,
    ) -> ConsentTokens:
        """Store the tokens of a consent, replacing any stored ones (after the code exchange)."""
        access, refresh = self._sealed(consent_id, access_token, refresh_token)
        now = utc_ms(now)
        row = self.tx.fetchone(
            "INSERT INTO consent_tokens (consent_id, integration, access_token_enc, refresh_token_enc, scope,"
            " expires_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (consent_id) DO UPDATE SET integration = excluded.integration,"
            " access_token_enc = excluded.access_token_enc, refresh_token_enc = excluded.refresh_token_enc,"
            " scope = excluded.scope, expires_at = excluded.expires_at, updated_at = excluded.updated_at,"
            " version = consent_tokens.version + 1 RETURNING *",
            (consent_id, integration, access, refresh, scope, utc_ms(expires_at), now, now),
        )
        assert row is not None
        return self._tokens(row)

    def replace(
        self,
        current: ConsentTokens,
        *,
        access_token: str,
        expires_at: datetime,
        now: datetime,
        refresh_token: str | None = None,
        scope: str | None = None,
    ) -> ConsentTokens:
        """After a refresh: replace the tokens if they are still the version read (`VersionConflictError` if another
        instance refreshed first; then use its tokens). A None refresh token keeps the stored one."""
        access, refresh = self._sealed(current.consent_id, access_token, refresh_token)
        row = self.tx.fetchone(
            "UPDATE consent_tokens SET access_token_enc = ?, refresh_token_enc = COALESCE(?, refresh_token_enc),"
            " scope = COALESCE(?, scope), expires_at = ?, updated_at = ?, version = version + 1"
            " WHERE consent_id = ? AND version = ? RETURNING *",
            (access, refresh, scope, utc_ms(expires_at), utc_ms(now), current.consent_id, current.version),
        )
        if row is None:
            raise VersionConflictError("consent_tokens", current.consent_id, current.version, None)
        return self._tokens(row)

    def get(self, consent_id: str) -> ConsentTokens | None:
        """The decrypted tokens of a consent, or None."""
        row = self.tx.fetchone("SELECT * FROM consent_tokens WHERE consent_id = ?", (consent_id,))
        return None if row is None else self._tokens(row)

    def delete(self, consent_id: str) -> bool:
        """Forget a consent's tokens (e.g. when its flow ends); whether there were any."""
        return self.tx.execute("DELETE FROM consent_tokens WHERE consent_id = ?", (consent_id,)) == 1


def require_cipher(cipher: Cipher | None) -> Cipher:
    """The cipher, or a clear error for stores opened without a key."""
    if cipher is None:
        raise StoreKeyError("this store was opened without an encryption key; secrets cannot be read or written")
    return cipher


__all__ = [
    "AuthAttempt",
    "AuthAttempts",
    "ConsentTokens",
    "ConsumeOutcome",
    "Consumed",
    "Created",
    "EffectStatus",
    "Flow",
    "FlowChanges",
    "FlowFields",
    "FlowRepo",
    "Operation",
    "SideEffect",
    "SideEffectMismatchError",
    "SideEffects",
    "TokenRepo",
    "new_idempotency_key",
    "new_secret_token",
    "require_cipher",
]
