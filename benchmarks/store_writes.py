"""The completion's store writes and a worker's claim round, before and after issue 22, side by side in one run
against real PostgreSQL.

A completed batch of M transfers appends M `dispersion.transfers` events to the outbox and records where each
employee was paid (`paid_accounts`). Before: one `Outbox.append` per event (3 statements, 3 round trips each)
and one upsert per employee. After: `Outbox.append_many` (3 round trips in all, the rows in one `executemany`)
and `PaidAccounts.paid_many` (one `executemany`). Each variant writes `--batches` batches, one transaction per
batch, interleaved over `--rounds`; printed: this process's CPU (the processor's side: psycopg, our code) and the
wall time per batch.

The "before" of the completion appends with today's `Outbox.append` (2 statements per event since the status
append below; 3 before).

A batch's status events (`Outbox.append_status`, 4 per batch, each in the transaction of its state change):
before, the key's row locked by an upsert, then updated (sequence, pending count, last status), then the event
inserted; after, one upsert takes the sequence number, counts the event and checks and records the status (the
row locked all the same), then the insert. `--batches` batches x 4 statuses, one transaction per status.

A worker's claim round leases due work of each kind (file flows, VRP mandates, VRP payments; at month end only
file flows are due). Before: one transaction per kind, each handed to a worker thread (`asyncio.to_thread`).
After: one transaction for all kinds (`Worker._claim_due`). Measured with nothing due (`--claim-rounds` rounds):
CPU and wall time per round. Runs in a fresh database created on the server and dropped at the end.

    python benchmarks/store_writes.py [--pg-url URL] [--batches 50] [--transactions 100] [--rounds 2]
        [--claim-rounds 500]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from month_end import DEFAULT_PG_URL, fresh_store

from processor.domain.kinds import Kind
from processor.domain.steps import handled_states
from processor.store import NewEvent, Store, StoreTx
from processor.store.crypto import generate_key, load_cipher
from processor.store.values import dump_json

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PAID_SQL = (
    "INSERT INTO paid_accounts (origin_account, employee_reference, account_sha256, account_last4, batch_id,"
    " paid_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (origin_account, employee_reference) DO UPDATE SET"
    " account_sha256 = excluded.account_sha256, account_last4 = excluded.account_last4,"
    " batch_id = excluded.batch_id, paid_at = excluded.paid_at WHERE paid_accounts.paid_at <= excluded.paid_at"
)


def events(batch: str, count: int) -> list[NewEvent]:
    """Transfer-event-like payloads (about the size of the real ones)."""
    return [
        NewEvent(
            {"event_id": f"{batch}-{i}", "batch_id": batch, "index": i, "outcome": "COMPLETED",
             "amount": "1234.56", "currency": "MXN", "employee_reference": f"E-{i:06d}",
             "destination": {"scheme": "clabe", "masked": "****5678"}, "occurred_at": "2026-11-30T12:00:00.000Z"},
            {"ce_id": f"{batch}-{i}", "ce_type": "dispersion.transfer.completed", "content-type": "application/json"},
            f"{batch}-{i}",
        )
        for i in range(count)
    ]  # fmt: skip


def paid_rows(count: int) -> list[tuple[str, str, str]]:
    """(reference, account digest, last 4) per transfer."""
    return [(f"E-{i:06d}", f"{i:064x}", f"{i % 10000:04d}") for i in range(count)]


def before(tx: StoreTx, batch: str, count: int) -> None:
    """One statement group per event and per employee, as before issue 22."""
    for event in events(batch, count):
        tx.outbox.append("dispersion.transfers", batch, event.payload, now=NOW, headers=event.headers,
                         event_id=event.event_id)  # fmt: skip
    for reference, digest, last4 in paid_rows(count):
        tx.raw.execute(PAID_SQL, ("O-1", reference, digest, last4, batch, NOW))


def after(tx: StoreTx, batch: str, count: int) -> None:
    """`append_many` and `paid_many`."""
    tx.outbox.append_many("dispersion.transfers", batch, events(batch, count), now=NOW)
    tx.paid_accounts.paid_many("O-1", paid_rows(count), batch_id=batch, now=NOW)


def measure(store: Store, write: Callable[[StoreTx, str, int], None], batches: int, count: int) -> tuple[float, float]:
    """(CPU s, wall s) per batch."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(batches):
        batch = uuid.uuid4().hex[:12]
        store.run(lambda tx, b=batch: write(tx, b, count))
    return (time.process_time() - cpu) / batches, (time.perf_counter() - wall) / batches


STATUSES = ("AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED")
LOCK_SQL = (
    "INSERT INTO outbox_keys (topic, event_key) VALUES (?, ?) ON CONFLICT (topic, event_key)"
    " DO UPDATE SET last_seq = outbox_keys.last_seq RETURNING last_seq, last_status, last_status_rank"
)
STATUS_SQL = (
    "UPDATE outbox_keys SET last_seq = ?, pending = pending + 1, pending_since = COALESCE(pending_since, ?),"
    " last_status = ?, last_status_rank = ? WHERE topic = ? AND event_key = ?"
)
EVENT_SQL = (
    "INSERT INTO outbox (event_id, topic, event_key, seq, status, status_rank, payload, headers, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?)"
)


def status_before(tx: StoreTx, batch: str, rank: int) -> None:
    """A status event appended as before: lock, update, insert."""
    head = tx.raw.fetchone(LOCK_SQL, ("dispersion.status", batch))
    assert head is not None and (head["last_status_rank"] is None or rank > int(head["last_status_rank"]))
    seq = int(head["last_seq"]) + 1
    tx.raw.execute(STATUS_SQL, (seq, NOW, STATUSES[rank], rank, "dispersion.status", batch))
    payload = dump_json({"batch_id": batch, "status": STATUSES[rank], "control_sum": "123.45"})
    tx.raw.execute(EVENT_SQL, (str(uuid.uuid4()), "dispersion.status", batch, seq, STATUSES[rank], rank, payload, NOW))


def status_after(tx: StoreTx, batch: str, rank: int) -> None:
    """`Outbox.append_status`."""
    payload = {"batch_id": batch, "status": STATUSES[rank], "control_sum": "123.45"}
    tx.outbox.append_status("dispersion.status", batch, STATUSES[rank], payload, now=NOW, rank=rank)


def statuses(store: Store, append: Callable[[StoreTx, str, int], None], batches: int) -> tuple[float, float]:
    """(CPU s, wall s) per status event, one transaction each."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(batches):
        batch = uuid.uuid4().hex[:12]
        for rank in range(len(STATUSES)):
            store.run(lambda tx, b=batch, r=rank: append(tx, b, r))
    count = batches * len(STATUSES)
    return (time.process_time() - cpu) / count, (time.perf_counter() - wall) / count


def claim_kind(tx: StoreTx, kind: Kind) -> int:
    """One kind's claim of due work, as `LeasedFlow.claim_in` makes it; how many were leased."""
    repo = {Kind.FILE: tx.flows, Kind.MANDATE: tx.mandates, Kind.VRP_PAYMENT: tx.vrp_payments}[kind]
    states = list(handled_states(kind.table))
    return len(repo.claim_due(now=datetime.now(UTC), owner="bench", limit=32, lease_seconds=120, states=states))


async def claim_rounds(store: Store, rounds: int, *, merged: bool) -> tuple[float, float]:
    """(CPU s, wall s) per claim round over the three kinds: a transaction each, or one for all."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        if merged:
            await store.arun(lambda tx: sum(claim_kind(tx, kind) for kind in Kind))
        else:
            for kind in Kind:
                await store.arun(lambda tx, k=kind: claim_kind(tx, k))
    return (time.process_time() - cpu) / rounds, (time.perf_counter() - wall) / rounds


def main() -> int:
    """Run both variants interleaved and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--transactions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--claim-rounds", type=int, default=500)
    args = parser.parse_args()
    with fresh_store("postgresql", args.pg_url, Path(".")) as url:
        store = Store.open(url, cipher=load_cipher({"DISPERSION_STORE_KEY": generate_key()}))
        try:
            measure(store, after, 3, args.transactions)  # warm: connections open, statements prepared
            measure(store, before, 3, args.transactions)
            print(f"{args.batches} completed batches of {args.transactions} transfers, one transaction each")
            for _ in range(args.rounds):
                for name, write in (("before (per row)", before), ("after (executemany)", after)):
                    cpu, wall = measure(store, write, args.batches, args.transactions)
                    print(f"{name:20s} CPU {cpu * 1000:6.1f} ms per batch, wall {wall * 1000:6.1f} ms per batch")
            statuses(store, status_before, 3)  # warm
            statuses(store, status_after, 3)
            print(f"{args.batches} batches x {len(STATUSES)} status events, one transaction each")
            for _ in range(args.rounds):
                for name, append in (("before (lock, update)", status_before), ("after (one upsert)", status_after)):
                    cpu, wall = statuses(store, append, args.batches)
                    print(f"{name:22s} CPU {cpu * 1e6:6.0f} us per event, wall {wall * 1e6:6.0f} us per event")
            asyncio.run(claim_rounds(store, 20, merged=True))  # warm
            print(f"{args.claim_rounds} worker claim rounds over the {len(Kind)} kinds of work, nothing due")
            for _ in range(args.rounds):
                for name, merged in (("before (a tx per kind)", False), ("after (one tx)", True)):
                    cpu, wall = asyncio.run(claim_rounds(store, args.claim_rounds, merged=merged))
                    print(f"{name:22s} CPU {cpu * 1e6:6.0f} us per round, wall {wall * 1e6:6.0f} us per round")
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
