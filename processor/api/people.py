"""What the admin API and the console share about people's actions: how a request and an audit entry are shown
(account numbers masked: a request's stored new numbers never leave the store), and the audit entry of a replay."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from processor.domain.roles import Actor
from processor.domain.time import iso_ms
from processor.engine.requests import Where, record_action
from processor.store import StoreTx
from processor.store.people import AuditEntry
from processor.store.requests import RequestRow
from producers.replay import Replayed


def replay_audit(actor: Actor, where: Where, reason: str, now: datetime) -> Callable[[StoreTx, Replayed], None]:
    """The audit entry of a dead-letter replay, written with the record of where it landed."""

    def write(tx: StoreTx, done: Replayed) -> None:
        detail = {
            "reason": reason,
            "topic": done.letter.source_topic,
            "partition": done.partition,
            "offset": done.offset,
            "batch_id": done.letter.batch_id,
        }
        record_action(tx, "replay", actor, now, where, str(done.letter.id), detail)

    return write


def request_view(row: RequestRow) -> dict[str, Any]:
    """A request as the admin API and the console show it (accounts masked: never the stored new numbers)."""
    detail = row.detail
    return {
        "id": row.id,
        "kind": row.kind,
        "batch_id": row.batch_id,
        "state": row.state,
        "requested_by": row.requested_by,
        "requested_at": iso_ms(row.requested_at),
        "corrections": detail.get("corrections", []),
        "changed": detail.get("changed", []),
        "decided_by": row.decided_by,
        "decided_at": None if row.decided_at is None else iso_ms(row.decided_at),
        "outcome": row.outcome,
    }


def audit_view(row: AuditEntry) -> dict[str, Any]:
    """An audit entry as the admin API gives it."""
    return {
        "id": row.id,
        "at": iso_ms(row.at),
        "actor": row.actor,
        "role": row.role,
        "action": row.action,
        "subject": row.subject,
        "detail": row.detail,
        "address": row.address,
    }
