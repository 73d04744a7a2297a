"""The transactional outbox: events written with the state change that causes them, relayed later.

Write side (inside the transaction that changes a flow):

    tx.outbox.append_status("dispersion.status", batch_id, "AUTHORIZED", payload, now=now)

Each (topic, key) has a row in `outbox_keys` holding the last sequence number, the highest status reached and
the relay lease. `append` locks that row (an `INSERT ... ON CONFLICT DO UPDATE`), so events of one key get
`seq` 1, 2, 3 ... in commit order even when several transactions append at once. A status event must rank
strictly above every status already emitted for its key: a repeated or backward transition raises
`StatusConflictError` (and the unique `(topic, event_key, status)` constraint backs that up), so per batch the
statuses only move forward and each is emitted once.

Relay side (its own short transactions):

    events = tx.outbox.claim(owner="relay-1", now=now, limit=500, lease_seconds=30)
    ... publish them in the order given ...
    tx.outbox.mark_published([e.id for e in published], now=now)

A relay leases whole keys, never single events: while one relay holds a key, no other relay is handed any event
of it, and within a key events come in `seq` order, so order per key holds with any number of relays. A key
whose events are all published is released at once; a relay that dies loses its keys when the lease runs out.

Handover: `claim` records on each key which relay first handed its unpublished events to a producer, and when
(`handed_by`, `handed_since`). A relay that gets a key another relay had handed (`handovers`) may find some of
those events already in Kafka (that relay died after the broker's acknowledgement, before `mark_published`):
it reads the topic from `handed_since` (producers/handover.py) and `adopt`s the key, marking what it found
published, before producing the rest. So a relay that dies publishes nothing twice.
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from processor.domain.file_states import STATUS_RANKS
from processor.domain.time import utc_ms
from processor.store.db import Row, StoreError, Tx, in_clause, to_datetime
from processor.store.values import dump_json, load_json


class StatusConflictError(StoreError):
    """A status event that would repeat or go back behind a status already emitted for its key."""

    def __init__(self, topic: str, key: str, status: str, last_status: str | None) -> None:
        kind = "already emitted" if status == last_status else f"not after {last_status}"
        super().__init__(f"{topic} {key!r}: status {status} {kind}")
        self.topic = topic
        self.key = key
        self.status = status
        self.last_status = last_status


@dataclass(frozen=True)
class StatusEvent:
    """A status event to append together with a state transition (see the repositories' `transition`)."""

    status: str
    payload: Mapping[str, Any]
    topic: str
    key: str | None = None  # defaults to the item's key (batch id, mandate id, ...)
    rank: int | None = None  # defaults to STATUS_RANKS[status]
    headers: Mapping[str, str] | None = None
    event_id: str | None = None  # defaults to a new UUID; pass the one you put in the payload to keep them equal


@dataclass(frozen=True)
class NewEvent:
    """An event without a status to append with `Outbox.append_many`."""

    payload: Mapping[str, Any]
    headers: Mapping[str, str] | None = None
    event_id: str | None = None  # defaults to a new UUID


@dataclass(frozen=True)
class Handover:
    """A leased key whose unpublished events another relay handed to its producer since `since`."""

    topic: str
    key: str
    since: datetime
    previous_owner: str


@dataclass(frozen=True)
class Adoption:
    """What `adopt` did: events found in Kafka and marked published; keys still held, whose remaining events
    this relay may now produce (a key missing here was fully published or its lease was lost)."""

    marked: int
    keys: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class OutboxEvent:
    """One stored event. `payload` is the JSON document appended (Decimals were written as strings), parsed
    from `payload_text` on first use: a large event (100,000 transaction results) is parsed only by the
    relay that publishes it, not by the transaction that appends it."""

    id: int
    event_id: str
    topic: str
    key: str
    seq: int
    status: str | None
    payload_text: str = field(repr=False)
    headers: dict[str, str] | None
    created_at: datetime
    published_at: datetime | None

    @cached_property
    def payload(self) -> Any:
        """The payload document (fractions as Decimal)."""
        return load_json(self.payload_text)


_EVENT_ROW = {
    "event_id": "text",
    "topic": "text",
    "event_key": "text",
    "seq": "bigint",
    "payload": "text",
    "headers": "text",
    "created_at": "timestamptz",
}
_EVENT_COLUMNS = "id, event_id, topic, event_key, seq, status, headers, created_at, published_at"


# A key's counters after `count` of its events were published (the count 6 times, then the key); the key is
# released when nothing is left.
KEY_PUBLISHED_SQL = (
    "UPDATE outbox_keys SET pending = pending - ?,"
    " pending_since = CASE WHEN pending - ? = 0 THEN NULL ELSE pending_since END,"
    " lease_owner = CASE WHEN pending - ? = 0 THEN NULL ELSE lease_owner END,"
    " lease_expires_at = CASE WHEN pending - ? = 0 THEN NULL ELSE lease_expires_at END,"
    " handed_by = CASE WHEN pending - ? = 0 THEN NULL ELSE handed_by END,"
    " handed_since = CASE WHEN pending - ? = 0 THEN NULL ELSE handed_since END"
    " WHERE topic = ? AND event_key = ?"
)


def _event(row: Mapping[str, Any], payload_text: str | None = None) -> OutboxEvent:
    created = to_datetime(row["created_at"])
    assert created is not None
    return OutboxEvent(
        id=int(row["id"]),
        event_id=str(row["event_id"]),
        topic=str(row["topic"]),
        key=str(row["event_key"]),
        seq=int(row["seq"]),
        status=row["status"],
        payload_text=str(row["payload"]) if payload_text is None else payload_text,
        headers=None if row["headers"] is None else load_json(row["headers"]),
        created_at=created,
        published_at=to_datetime(row["published_at"]),
    )


class Outbox:
    """Outbox operations inside one transaction."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def append(
        self,
        topic: str,
        key: str,
        payload: Mapping[str, Any],
        *,
        now: datetime,
        headers: Mapping[str, str] | None = None,
        status: str | None = None,
        rank: int | None = None,
        event_id: str | None = None,
    ) -> OutboxEvent:
        """Append an event for (topic, key) with the next sequence number. With a `status`, refuse (raise
        `StatusConflictError`) unless its rank is above every status already emitted for the key. The store's
        observer (if any) may add headers (the trace context) to those given."""
        if status is not None and rank is None:
            raise ValueError("a status event needs a rank")
        observer = self.tx.observer
        if observer is None:
            return self._append(topic, key, payload, now, headers, status, rank, event_id)
        with observer.event(topic=topic, key=key, status=status) as added:
            merged = {**added, **(headers or {})} if added else headers
            return self._append(topic, key, payload, now, merged, status, rank, event_id)

    def _append(
        self,
        topic: str,
        key: str,
        payload: Mapping[str, Any],
        now: datetime,
        headers: Mapping[str, str] | None,
        status: str | None,
        rank: int | None,
        event_id: str | None,
    ) -> OutboxEvent:
        now = utc_ms(now)
        seq = self._next_seq(topic, key, now, status, rank)
        text = dump_json(payload)
        event_id = event_id or str(uuid.uuid4())
        in_pieces = self.tx.sent_in_pieces(text)  # inserted empty, then set (a large event, see `Tx.set_text`)
        row = self.tx.fetchone(
            "INSERT INTO outbox (event_id, topic, event_key, seq, status, status_rank, payload, headers, created_at)"  # noqa: S608
            f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING {_EVENT_COLUMNS}",
            (
                event_id,
                topic,
                key,
                seq,
                status,
                rank,
                "" if in_pieces else text,
                None if headers is None else dump_json(dict(headers)),
                now,
            ),
        )
        assert row is not None
        if in_pieces:
            self.tx.set_text("outbox", "payload", "event_id", event_id, text)
        return _event(row, text)  # the payload is not read back from the database

    def append_many(self, topic: str, key: str, events: Iterable[NewEvent], *, now: datetime, chunk: int = 1000) -> int:
        """Append events without a status for one (topic, key), in order, as `append` would one by one: the key's
        row locked once, the sequence numbers taken together, the rows written by one `executemany` per `chunk`
        events (a completed batch of 100 transfers was 300 statements, each a round trip; now 3 round trips).
        `events` is read once, `chunk` at a time, so a 100,000-transfer batch's rows are not all built at once.
        How many were appended."""
        pending = iter(events)
        head_event = next(pending, None)
        if head_event is None:
            return 0
        observer = self.tx.observer
        now = utc_ms(now)
        head = self._lock_key(topic, key)
        first = int(head["last_seq"]) + 1
        rows: list[tuple[Any, ...]] = []
        count = 0
        for event in itertools.chain((head_event,), pending):
            headers = event.headers
            if observer is not None:
                with observer.event(topic=topic, key=key, status=None) as added:
                    headers = {**added, **(headers or {})} if added else headers
            text = None if headers is None else dump_json(dict(headers))
            event_id = event.event_id or str(uuid.uuid4())
            rows.append((event_id, topic, key, first + count, dump_json(event.payload), text, now))
            count += 1
            if len(rows) >= chunk:
                self._insert_events(rows)
        self._insert_events(rows)
        self._count_pending(topic, key, first + count - 1, count, now)
        return count

    def _next_seq(self, topic: str, key: str, now: datetime, status: str | None, rank: int | None) -> int:
        """Take the key's next sequence number and count the event pending, in one statement that also locks (or
        creates) the key's row: it orders concurrent appends. With a status: only when its rank is above the last
        status's (else `StatusConflictError`), which it then becomes."""
        take = (
            "INSERT INTO outbox_keys AS k (topic, event_key, last_seq, pending, pending_since, last_status,"
            " last_status_rank) VALUES (?, ?, 1, 1, ?, ?, ?) ON CONFLICT (topic, event_key) DO UPDATE SET"
            " last_seq = k.last_seq + 1, pending = k.pending + 1,"
            " pending_since = COALESCE(k.pending_since, excluded.pending_since)"
        )
        if status is None:
            head = self.tx.fetchone(take + " RETURNING last_seq", (topic, key, now, None, None))
        else:
            head = self.tx.fetchone(
                take + ", last_status = excluded.last_status, last_status_rank = excluded.last_status_rank"
                " WHERE k.last_status_rank IS NULL OR k.last_status_rank < excluded.last_status_rank"
                " RETURNING last_seq",
                (topic, key, now, status, rank),
            )
            if head is None:  # refused; the row is locked all the same, so its last status stays as read
                last = self.tx.scalar(
                    "SELECT last_status FROM outbox_keys WHERE topic = ? AND event_key = ?", (topic, key)
                )
                raise StatusConflictError(topic, key, status, last)
        assert head is not None
        return int(head["last_seq"])

    def _lock_key(self, topic: str, key: str) -> Row:
        """Lock (or create) the key's row before appending: it orders concurrent appends and guards the status
        check. The row's last sequence number and last status."""
        head = self.tx.fetchone(
            "INSERT INTO outbox_keys (topic, event_key) VALUES (?, ?)"
            " ON CONFLICT (topic, event_key) DO UPDATE SET last_seq = outbox_keys.last_seq"
            " RETURNING last_seq, last_status, last_status_rank",
            (topic, key),
        )
        assert head is not None
        return head

    def _count_pending(self, topic: str, key: str, last_seq: int, count: int, now: datetime) -> None:
        """Record `count` status-less events appended to the key, the last numbered `last_seq`."""
        self.tx.execute(
            "UPDATE outbox_keys SET last_seq = ?, pending = pending + ?, pending_since = COALESCE(pending_since, ?)"
            " WHERE topic = ? AND event_key = ?",
            (last_seq, count, now, topic, key),
        )

    def _insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        """Insert status-less events (id, topic, key, seq, payload, headers, created) and empty `rows`."""
        self.tx.insert_many("outbox", _EVENT_ROW, rows)
        rows.clear()

    def append_status(
        self,
        topic: str,
        key: str,
        status: str,
        payload: Mapping[str, Any],
        *,
        now: datetime,
        rank: int | None = None,
        headers: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> OutboxEvent:
        """Append a status event; `rank` defaults to `STATUS_RANKS[status]`."""
        if rank is None:
            if status not in STATUS_RANKS:
                raise ValueError(f"unknown status {status!r}: pass its rank")
            rank = STATUS_RANKS[status]
        return self.append(topic, key, payload, now=now, headers=headers, status=status, rank=rank, event_id=event_id)

    def emit(self, event: StatusEvent, default_key: str, *, now: datetime) -> OutboxEvent:
        """Append a `StatusEvent` (used by the repositories' `transition`)."""
        return self.append_status(
            event.topic,
            event.key or default_key,
            event.status,
            event.payload,
            now=now,
            rank=event.rank,
            headers=event.headers,
            event_id=event.event_id,
        )

    def statuses(self, topic: str, key: str) -> list[str]:
        """The statuses emitted so far for a key, in order."""
        rows = self.tx.fetchall(
            "SELECT status FROM outbox WHERE topic = ? AND event_key = ? AND status IS NOT NULL ORDER BY seq",
            (topic, key),
        )
        return [str(r["status"]) for r in rows]

    def events(self, topic: str, key: str) -> list[OutboxEvent]:
        """Every event of a key (published or not), in order."""
        rows = self.tx.fetchall("SELECT * FROM outbox WHERE topic = ? AND event_key = ? ORDER BY seq", (topic, key))
        return [_event(r) for r in rows]

    # -- relay ------------------------------------------------------------------------------------------------

    def claim(
        self, *, owner: str, now: datetime, limit: int, lease_seconds: float, known: Container[int] = ()
    ) -> list[OutboxEvent]:
        """Lease keys with unpublished events (keys this owner already holds included) and return up to `limit`
        of their unpublished events, grouped by key, each key's events in sequence order. Events whose id is in
        `known` (the relay's, still in flight) count towards `limit` but are left out: not built again."""
        if limit <= 0:
            return []
        now = utc_ms(now)
        expires = now + timedelta(seconds=lease_seconds)
        free = "pending > 0 AND (lease_expires_at IS NULL OR lease_expires_at <= ? OR lease_owner = ?)"
        if self.tx.dialect == "postgresql":
            self.tx.execute(
                "UPDATE outbox_keys AS k SET lease_owner = ?, lease_expires_at = ?"  # noqa: S608
                f" FROM (SELECT topic, event_key FROM outbox_keys WHERE {free}"
                " ORDER BY pending_since LIMIT ? FOR UPDATE SKIP LOCKED) AS due"
                " WHERE k.topic = due.topic AND k.event_key = due.event_key",
                (owner, expires, now, owner, limit),
            )
        else:
            self.tx.execute(
                "UPDATE outbox_keys SET lease_owner = ?, lease_expires_at = ? WHERE rowid IN"  # noqa: S608
                f" (SELECT rowid FROM outbox_keys WHERE {free} ORDER BY pending_since LIMIT ?)",
                (owner, expires, now, owner, limit),
            )
        # From now on this owner may hand these keys' events to its producer (keys another relay handed keep
        # that relay's name until `adopt`).
        self.tx.execute(
            "UPDATE outbox_keys SET handed_by = ?, handed_since = ?"
            " WHERE pending > 0 AND lease_owner = ? AND lease_expires_at > ? AND handed_by IS NULL",
            (owner, now, owner, now),
        )
        rows = self.tx.fetchall(
            "SELECT o.* FROM outbox AS o JOIN outbox_keys AS k ON k.topic = o.topic AND k.event_key = o.event_key"
            " WHERE k.pending > 0 AND k.lease_owner = ? AND k.lease_expires_at > ? AND o.published_at IS NULL"
            " ORDER BY k.pending_since, o.topic, o.event_key, o.seq LIMIT ?",
            (owner, now, limit),
        )
        return [_event(r) for r in rows if r["id"] not in known]

    def handovers(self, *, owner: str, now: datetime) -> list[Handover]:
        """Keys this owner holds whose unpublished events another relay (or this one, before a delivery failure)
        may have got into Kafka: check Kafka for them (producers/handover.py) and `adopt` them before producing
        any of their events. `since` is the earliest time such an event can have been produced: the later of
        when the key was first handed and when its oldest unpublished event was written."""
        rows = self.tx.fetchall(
            "SELECT k.topic, k.event_key, k.handed_by, k.handed_since,"
            " (SELECT MIN(o.created_at) FROM outbox AS o WHERE o.topic = k.topic AND o.event_key = k.event_key"
            " AND o.published_at IS NULL) AS oldest"
            " FROM outbox_keys AS k WHERE k.pending > 0 AND k.lease_owner = ? AND k.lease_expires_at > ?"
            " AND k.handed_by IS NOT NULL AND k.handed_by <> ? ORDER BY k.topic, k.event_key",
            (owner, utc_ms(now), owner),
        )
        result = []
        for row in rows:
            handed, oldest = to_datetime(row["handed_since"]), to_datetime(row["oldest"])
            assert handed is not None
            since = handed if oldest is None else max(handed, oldest)
            result.append(Handover(str(row["topic"]), str(row["event_key"]), since, str(row["handed_by"])))
        return result

    def adopt(
        self, *, owner: str, keys: Sequence[tuple[str, str]], published_event_ids: Collection[str], now: datetime
    ) -> Adoption:
        """Take over handed keys: mark their events found in Kafka published, then record this owner as the one
        handing the rest, for the keys it still holds (the others must not be produced: see `Adoption`)."""
        wanted = set(keys)
        ids: list[int] = []
        found = sorted(published_event_ids)
        for start in range(0, len(found), 500):
            chunk = found[start : start + 500]
            rows = self.tx.fetchall(
                f"SELECT id, topic, event_key FROM outbox WHERE event_id IN {in_clause(chunk)}"  # noqa: S608
                " AND published_at IS NULL",
                tuple(chunk),
            )
            ids.extend(int(r["id"]) for r in rows if (str(r["topic"]), str(r["event_key"])) in wanted)
        marked = self.mark_published(ids, now=now)
        now = utc_ms(now)
        held = []
        for topic, key in sorted(wanted):
            if self.tx.execute(
                "UPDATE outbox_keys SET handed_by = ?, handed_since = ?"
                " WHERE topic = ? AND event_key = ? AND lease_owner = ? AND pending > 0",
                (owner, now, topic, key, owner),
            ):
                held.append((topic, key))
        return Adoption(marked, tuple(held))

    def suspect(self, *, owner: str, keys: Collection[tuple[str, str]]) -> int:
        """A delivery of these keys failed in a way that may still have written the message: make them a
        handover for this owner too, so Kafka is checked before anything of them is produced again."""
        changed = 0
        for topic, key in sorted(keys):
            changed += self.tx.execute(
                "UPDATE outbox_keys SET handed_by = ? WHERE topic = ? AND event_key = ? AND lease_owner = ?"
                " AND pending > 0 AND handed_by IS NOT NULL",
                (f"{owner}#unacknowledged", topic, key, owner),
            )
        return changed

    def mark_published(self, ids: Sequence[int], *, now: datetime) -> int:
        """Mark events published (those already marked are left alone); release keys with nothing left.
        Returns how many events changed."""
        if not ids:
            return 0
        which, values = self.tx.among("id", ids)
        rows = self.tx.fetchall(
            f"UPDATE outbox SET published_at = ? WHERE {which} AND published_at IS NULL RETURNING topic, event_key",  # noqa: S608
            (utc_ms(now), *values),
        )
        per_key = Counter((str(r["topic"]), str(r["event_key"])) for r in rows)
        # One statement per key, all sent at once (one round trip on PostgreSQL), in a fixed order: the keys' rows
        # are locked in that order, which avoids lock-order deadlocks.
        self.tx.executemany(
            KEY_PUBLISHED_SQL,
            [(count, count, count, count, count, count, topic, key) for (topic, key), count in sorted(per_key.items())],
        )
        return len(rows)

    def release(self, *, owner: str) -> int:
        """Give back every key this relay holds (on shutdown); returns how many."""
        return self.tx.execute(
            "UPDATE outbox_keys SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = ?", (owner,)
        )

    def backlog(self) -> tuple[int, datetime | None]:
        """(unpublished events, creation time of the oldest one) for metrics."""
        row = self.tx.fetchone("SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM outbox WHERE published_at IS NULL")
        assert row is not None
        return int(row["n"]), to_datetime(row["oldest"])
