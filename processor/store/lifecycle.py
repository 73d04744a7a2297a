"""A batch id's life beyond one flow: withdrawal, new attempts, duplicate-payroll holds, intake verdicts
(migration 10). Reached as `tx.lifecycle` inside a transaction.

A new attempt reuses the `flows` row of its batch id (its primary key, and what every page and command looks up):

1. the ended attempt is copied into `batch_attempts` (state, consent, payment, approval token, why it ended);
2. what it left under the batch id is moved to `<batch id>#<attempt>`: its side-effect records (so the new
   attempt's bank calls get new idempotency keys and never reuse the old consent), its authorization attempts (an
   old redirect cannot authorise the new attempt) and its outbox events (so the new attempt's statuses start over:
   per key, a status may follow only a lower one). The outbox must have published every event of the key first
   (`AttemptBusyError` otherwise: the caller retries a moment later), and the key keeps counting its sequence;
3. the row is reset to the new content, due at once, with a new approval token and `attempt` + 1.

Pure SQL over the caller's transaction; the engine decides when (processor.engine.intake).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from processor.domain.file_states import FlowState
from processor.domain.time import utc_ms
from processor.store.crypto import new_secret_token
from processor.store.db import StoreError, Tx, to_datetime
from processor.store.flows import Flow, FlowRepo
from processor.store.money import MoneyBook
from processor.store.side_effects import EffectStatus, Operation
from processor.store.values import money


class AttemptBusyError(StoreError):
    """The batch's earlier events are not all published yet: a new attempt waits (the message is read again)."""


@dataclass(frozen=True)
class EarlierAttempt:
    """One ended attempt of a batch id, as `batch_attempts` keeps it."""

    batch_id: str
    attempt: int
    state: str
    approval_token: str
    reason: str | None
    withdrawn_by: str | None
    withdrawn_at: datetime | None
    ended_at: datetime


@dataclass(frozen=True)
class NewContent:
    """What a new attempt holds (a prepared batch, `processor.engine.intake.PreparedBatch`)."""

    integration: str
    text: str
    content_sha256: str
    state: str
    file_reference: str | None
    file_hash: str | None
    number_of_transactions: int | None
    control_sum: Decimal | None
    execute_on: date | None
    traceparent: str | None
    transfer_keys: str | None
    duplicate_of: str | None = None
    duplicate_note: str | None = None


@dataclass(frozen=True)
class Verdict:
    """What the intake made of one message (`intake_verdicts`)."""

    topic: str
    partition: int
    offset: int
    batch_id: str | None
    verdict: str
    detail: str | None
    attempt: int | None
    decided_at: datetime


class Lifecycle:
    """Attempts, withdrawals, holds and verdicts inside one transaction."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    # -- what may happen to a flow ------------------------------------------------------------------------------

    def payment_asked(self, batch_id: str) -> bool:
        """Whether the file payment (A3) was ever asked of the bank for this attempt (recorded before the call),
        unless the bank refused it (nothing created)."""
        value = self.tx.scalar(
            "SELECT 1 FROM side_effects WHERE scope_id = ? AND operation = ? AND status <> ?",
            (batch_id, Operation.CREATE_PAYMENT.value, EffectStatus.FAILED.value),
        )
        return value is not None

    def resubmittable(self, flow: Flow) -> bool:
        """A flow whose batch id may carry a new attempt: withdrawn, REJECTED, EXPIRED, INVALID, or FAILED with
        no file payment created."""
        if flow.state in (FlowState.WITHDRAWN, FlowState.REJECTED, FlowState.EXPIRED, FlowState.INVALID):
            return True
        return flow.state == FlowState.FAILED and flow.file_payment_id is None and not self.payment_asked(flow.batch_id)

    # -- new attempts -------------------------------------------------------------------------------------------

    def restart(self, flow: Flow, content: NewContent, *, status_topic: str, now: datetime) -> Flow:
        """Archive `flow`'s attempt and reset its row to `content` as attempt + 1 (see the module docstring)."""
        now = utc_ms(now)
        pending = self.tx.scalar(
            "SELECT pending FROM outbox_keys WHERE topic = ? AND event_key = ?", (status_topic, flow.batch_id)
        )
        if pending:
            raise AttemptBusyError(f"batch {flow.batch_id}: its earlier events are still being published")
        old = f"{flow.batch_id}#{flow.attempt}"
        self.tx.execute(
            "INSERT INTO batch_attempts (batch_id, attempt, state, payload_sha256, consent_id, file_payment_id,"
            " approval_token, reason, withdrawn_by, withdrawn_at, created_at, ended_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                flow.batch_id,
                flow.attempt,
                flow.state,
                flow.payload_sha256,
                flow.consent_id,
                flow.file_payment_id,
                flow.approval_token,
                flow.withdraw_reason or flow.last_error,
                flow.withdrawn_by,
                flow.withdrawn_at,
                flow.created_at,
                flow.updated_at,
            ),
        )
        self.tx.execute("UPDATE side_effects SET scope_id = ? WHERE scope_id = ?", (old, flow.batch_id))
        self.tx.execute(
            "UPDATE auth_attempts SET flow_id = ? WHERE flow_kind = 'file' AND flow_id = ?", (old, flow.batch_id)
        )
        self._move_events(status_topic, flow.batch_id, old)
        in_pieces = self.tx.sent_in_pieces(content.text)  # set after the row (a large batch, see `Tx.set_text`)
        row = self.tx.fetchone(
            "UPDATE flows SET integration = ?, state = ?, payload = ?, payload_sha256 = ?, file_reference = ?,"
            " file_hash = ?, number_of_transactions = ?, control_sum = ?, consent_id = NULL, file_payment_id = NULL,"
            " approval_token = ?, authorization_deadline = NULL, report = NULL, next_action_at = ?, attempts = 0,"
            " version = version + 1, lease_owner = NULL, lease_expires_at = NULL, bank_status = NULL,"
            " last_error = NULL, updated_at = ?, traceparent = ?, execute_on = ?, attempt = attempt + 1,"
            " withdrawn_by = NULL, withdrawn_at = NULL, withdraw_reason = NULL, transfer_keys = ?,"
            " duplicate_of = ?, duplicate_note = ?, duplicate_confirmed_by = NULL, duplicate_confirmed_at = NULL"
            " WHERE batch_id = ? AND version = ? RETURNING batch_id",
            (
                content.integration,
                content.state,
                "" if in_pieces else content.text,
                content.content_sha256,
                content.file_reference,
                content.file_hash,
                content.number_of_transactions,
                None if content.control_sum is None else money(content.control_sum),
                new_secret_token(),
                now if content.state == FlowState.RECEIVED and content.duplicate_of is None else None,
                now,
                content.traceparent,
                None if content.execute_on is None else content.execute_on.isoformat(),
                content.transfer_keys,
                content.duplicate_of,
                content.duplicate_note,
                flow.batch_id,
                flow.version,
            ),
        )
        if row is None:
            raise StoreError(f"batch {flow.batch_id} changed while a new attempt was being stored; read it again")
        if in_pieces:
            self.tx.set_text("flows", "payload", "batch_id", flow.batch_id, content.text)
        MoneyBook(self.tx).book(flow.batch_id, text=content.text)
        return FlowRepo(self.tx).require(flow.batch_id)

    def _move_events(self, topic: str, key: str, archived: str) -> None:
        """The key's events under `archived`; the key itself keeps its sequence but forgets its statuses."""
        self.tx.execute(
            "INSERT INTO outbox_keys (topic, event_key, last_seq, last_status, last_status_rank)"
            " SELECT topic, ?, last_seq, last_status, last_status_rank FROM outbox_keys"
            " WHERE topic = ? AND event_key = ?",
            (archived, topic, key),
        )
        self.tx.execute("UPDATE outbox SET event_key = ? WHERE topic = ? AND event_key = ?", (archived, topic, key))
        self.tx.execute(
            "UPDATE outbox_keys SET last_status = NULL, last_status_rank = NULL WHERE topic = ? AND event_key = ?",
            (topic, key),
        )

    def earlier(self, batch_id: str) -> list[EarlierAttempt]:
        """The ended attempts of a batch id, oldest first."""
        rows = self.tx.fetchall(
            "SELECT batch_id, attempt, state, approval_token, reason, withdrawn_by, withdrawn_at, ended_at"
            " FROM batch_attempts WHERE batch_id = ? ORDER BY attempt",
            (batch_id,),
        )
        return [_earlier(row) for row in rows]

    # -- the duplicate-payroll guard -----------------------------------------------------------------------------

    def keep_sketch(self, batch_id: str, integration: str, keys: Sequence[str], *, now: datetime) -> None:
        """Store a batch's sketch keys (`processor.domain.duplicates.sketch`), replacing an earlier attempt's."""
        self.tx.execute("DELETE FROM transfer_sketches WHERE batch_id = ?", (batch_id,))
        if not keys:
            return
        stamp = utc_ms(now)
        # A VALUES list of 400 placeholders was converted by psycopg and parsed by the server on every batch.
        self.tx.insert_many(
            "transfer_sketches",
            {"sketch_key": "text", "batch_id": "text", "integration": "text", "created_at": "timestamptz"},
            [(key, batch_id, integration, stamp) for key in keys],
        )

    def candidates(
        self, integration: str, keys: Sequence[str], *, since: datetime, exclude: str
    ) -> list[tuple[str, datetime, str, str | None]]:
        """(batch id, received at, transfer keys, the batch it retries by its retry record) of the batches of
        `integration` received since `since` that share a sketch key with `keys` and did not end refused
        (REJECTED, EXPIRED, INVALID, withdrawn)."""
        if not keys:
            return []
        which, values = self.tx.among("s.sketch_key", keys)
        ended = (FlowState.REJECTED, FlowState.EXPIRED, FlowState.INVALID, FlowState.WITHDRAWN)
        rows = self.tx.fetchall(
            "SELECT f.batch_id, f.created_at, f.transfer_keys, r.original_batch_id FROM flows f"  # noqa: S608
            " LEFT JOIN batch_retries r ON r.retry_batch_id = f.batch_id WHERE f.batch_id IN ("
            f" SELECT DISTINCT s.batch_id FROM transfer_sketches s WHERE {which}"
            " AND s.integration = ? AND s.created_at >= ? AND s.batch_id <> ?)"
            " AND f.transfer_keys IS NOT NULL AND f.state NOT IN (?, ?, ?, ?)",
            (*values, integration, utc_ms(since), exclude, *(str(state) for state in ended)),
        )
        found: list[tuple[str, datetime, str, str | None]] = []
        for row in rows:
            created = to_datetime(row["created_at"])
            assert created is not None
            original = None if row["original_batch_id"] is None else str(row["original_batch_id"])
            found.append((str(row["batch_id"]), created, str(row["transfer_keys"]), original))
        return found

    def confirm_duplicate(self, flow: Flow, *, by: str, now: datetime, due: bool = True) -> Flow:
        """A person confirmed that a held batch is to be paid: due at once (unless `due` is False: another hold,
        a changed-account review, still waits)."""
        row = self.tx.fetchone(
            "UPDATE flows SET duplicate_confirmed_by = ?, duplicate_confirmed_at = ?, next_action_at = ?,"
            " version = version + 1, updated_at = ? WHERE batch_id = ? AND version = ? RETURNING batch_id",
            (by, utc_ms(now), utc_ms(now) if due else None, utc_ms(now), flow.batch_id, flow.version),
        )
        if row is None:
            raise StoreError(f"batch {flow.batch_id} changed meanwhile; try again")
        return FlowRepo(self.tx).require(flow.batch_id)

    # -- traces ---------------------------------------------------------------------------------------------------

    def keep_trace(self, kind: str, key: str, traceparent: str | None) -> None:
        """Keep the W3C trace context of a VRP mandate's or payment's intake (`kind` "mandate" or "payment") with
        its row, so its steps continue that trace (as a file flow's do)."""
        if traceparent is None:
            return
        table, column = ("vrp_mandates", "mandate_id") if kind == "mandate" else ("vrp_payments", "payment_id")
        self.tx.execute(f"UPDATE {table} SET traceparent = ? WHERE {column} = ?", (traceparent, key))  # noqa: S608

    # -- verdicts -----------------------------------------------------------------------------------------------

    def record_verdict(self, verdict: Verdict) -> None:
        """Keep what the intake made of a message (a redelivery of it replaces the earlier verdict)."""
        self.tx.execute(
            "INSERT INTO intake_verdicts (topic, part, message_offset, batch_id, verdict, detail, attempt, decided_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (topic, part, message_offset) DO UPDATE SET"
            " batch_id = excluded.batch_id, verdict = excluded.verdict, detail = excluded.detail,"
            " attempt = excluded.attempt, decided_at = excluded.decided_at",
            (
                verdict.topic,
                verdict.partition,
                verdict.offset,
                verdict.batch_id,
                verdict.verdict,
                verdict.detail,
                verdict.attempt,
                utc_ms(verdict.decided_at),
            ),
        )

    def verdict(self, topic: str, partition: int, offset: int) -> Verdict | None:
        """The intake's verdict on the message at that place, or None while it has none."""
        row = self.tx.fetchone(
            "SELECT topic, part, message_offset, batch_id, verdict, detail, attempt, decided_at FROM intake_verdicts"
            " WHERE topic = ? AND part = ? AND message_offset = ?",
            (topic, partition, offset),
        )
        return None if row is None else _verdict(row)

    def verdicts_of(self, batch_id: str, *, kinds: tuple[str, ...] = ("conflict",), limit: int = 20) -> list[Verdict]:
        """The latest verdicts of those kinds on messages for a batch id, newest first (its console page)."""
        marks = ", ".join("?" for _ in kinds)
        rows = self.tx.fetchall(
            "SELECT topic, part, message_offset, batch_id, verdict, detail, attempt, decided_at FROM intake_verdicts"  # noqa: S608
            f" WHERE batch_id = ? AND verdict IN ({marks}) ORDER BY decided_at DESC LIMIT ?",
            (batch_id, *kinds, limit),
        )
        return [_verdict(row) for row in rows]


def _earlier(row: Mapping[str, Any]) -> EarlierAttempt:
    ended = to_datetime(row["ended_at"])
    assert ended is not None
    return EarlierAttempt(
        batch_id=str(row["batch_id"]),
        attempt=int(row["attempt"]),
        state=str(row["state"]),
        approval_token=str(row["approval_token"]),
        reason=row["reason"],
        withdrawn_by=row["withdrawn_by"],
        withdrawn_at=to_datetime(row["withdrawn_at"]),
        ended_at=ended,
    )


def _verdict(row: Mapping[str, Any]) -> Verdict:
    decided = to_datetime(row["decided_at"])
    assert decided is not None
    return Verdict(
        topic=str(row["topic"]),
        partition=int(row["part"]),
        offset=int(row["message_offset"]),
        batch_id=row["batch_id"],
        verdict=str(row["verdict"]),
        detail=row["detail"],
        attempt=None if row["attempt"] is None else int(row["attempt"]),
        decided_at=decided,
    )
