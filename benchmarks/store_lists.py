"""Statements over a list of values, before and after issue 22's sixth pass, side by side in one run against real
PostgreSQL.

Three statements took a list of values as that many placeholders (`IN (?, ?, ...)`, a `VALUES` row per value):
psycopg converted such a statement on every run (it caches only statements of at most 50 parameters) and the
server parsed and planned it every time (a prepared statement's text must repeat). Now:

- the relay's `Outbox.mark_published`: the events' ids as one array (`id = ANY(?)`), and each key's counters
  updated by one statement per key sent together (`executemany`: one round trip) where each was a round trip;
- the intake's sketch keys (`Lifecycle.keep_sketch`, 100 per batch of 100 transfers): one `executemany` where it
  was one `INSERT ... VALUES` of 400 placeholders;
- the completion's look-up of the employees' last paid accounts (`PaidAccounts.last`): one array where it was an
  `IN` list of 100.

And two writes of a row per transfer went as a statement per row in one pipeline (`executemany`); now one
statement with each column as an array (`Tx.insert_many`):

- the completion's 100 `dispersion.transfers` events (the INSERT of `Outbox.append_many`);
- the employees' paid accounts (`PaidAccounts.paid_many`, 100 upserts).

Each variant runs `--repeats` times per round, one transaction each, interleaved over `--rounds`; printed: this
process's CPU (the processor's side: psycopg and our code) and the wall time per run. Runs in a fresh database
created on the server and dropped at the end.

    python benchmarks/store_lists.py [--pg-url URL] [--repeats 300] [--rounds 2] [--events 26] [--keys 5]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from month_end import DEFAULT_PG_URL, fresh_store
from store_writes import PAID_SQL

from processor.store import NewEvent, Store, StoreTx
from processor.store.crypto import generate_key, load_cipher
from processor.store.outbox import KEY_PUBLISHED_SQL

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
Work = Callable[[StoreTx, Any], object]


def marks(count: int) -> str:
    """`?, ?, ...` for `count` values."""
    return ", ".join("?" for _ in range(count))


def published_before(tx: StoreTx, ids: list[object]) -> object:
    """`mark_published` as it was: an IN list, then a round trip per key."""
    rows = tx.raw.fetchall(
        f"UPDATE outbox SET published_at = ? WHERE id IN ({marks(len(ids))}) AND published_at IS NULL"
        " RETURNING topic, event_key",
        (NOW, *ids),
    )
    per_key = Counter((str(r["topic"]), str(r["event_key"])) for r in rows)
    for (topic, key), n in sorted(per_key.items()):
        tx.raw.execute(KEY_PUBLISHED_SQL, (n, n, n, n, n, n, topic, key))
    return len(rows)


def published_after(tx: StoreTx, ids: list[object]) -> object:
    """`Outbox.mark_published`."""
    return tx.outbox.mark_published([int(str(i)) for i in ids], now=NOW)


def sketch_before(tx: StoreTx, keys: list[object]) -> object:
    """`keep_sketch` as it was: one INSERT with a VALUES row per key."""
    batch = uuid.uuid4().hex
    rows = ", ".join("(?, ?, ?, ?)" for _ in keys)
    params = [value for key in keys for value in (key, batch, "bank", NOW)]
    tx.raw.execute("DELETE FROM transfer_sketches WHERE batch_id = ?", (batch,))
    return tx.raw.execute(
        f"INSERT INTO transfer_sketches (sketch_key, batch_id, integration, created_at) VALUES {rows}",
        params,
    )


def sketch_after(tx: StoreTx, keys: list[object]) -> object:
    """`Lifecycle.keep_sketch`."""
    tx.lifecycle.keep_sketch(uuid.uuid4().hex, "bank", [str(key) for key in keys], now=NOW)
    return None


def paid_before(tx: StoreTx, references: list[object]) -> object:
    """`PaidAccounts.last` as it was: an IN list."""
    return tx.raw.fetchall(
        f"SELECT * FROM paid_accounts WHERE origin_account = ? AND employee_reference IN ({marks(len(references))})",
        ("O-1", *references),
    )


def paid_after(tx: StoreTx, references: list[object]) -> object:
    """`PaidAccounts.last`."""
    return tx.paid_accounts.last("O-1", [str(reference) for reference in references])


EVENT_SQL = (
    "INSERT INTO outbox (event_id, topic, event_key, seq, status, status_rank, payload, headers, created_at)"
    " VALUES (?, ?, ?, ?, NULL, NULL, ?, ?, ?)"
)
EVENT_COLUMNS = {"event_id": "text", "topic": "text", "event_key": "text", "seq": "bigint", "payload": "text",
                 "headers": "text", "created_at": "timestamptz"}  # fmt: skip


def event_rows(store: Store) -> list[tuple[object, ...]]:
    """100 transfer-event rows of a new key (its `outbox_keys` row written first, outside the timing)."""
    key = uuid.uuid4().hex
    store.run(lambda tx: tx.raw.execute("INSERT INTO outbox_keys (topic, event_key) VALUES (?, ?)", ("bench", key)))
    payload = (
        '{"amount":"1234.56","batch_id":"%s","currency":"MXN","destination":{"masked":"****5678","scheme":"clabe"},'
        '"employee_reference":"E-%06d","index":%d,"occurred_at":"2026-11-30T12:00:00.000Z","outcome":"COMPLETED"}'
    )
    headers = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    return [(uuid.uuid4().hex, "bench", key, i + 1, payload % (key, i, i), headers, NOW) for i in range(100)]


def events_before(tx: StoreTx, rows: list[tuple[object, ...]]) -> object:
    """The events' INSERT as it was: `executemany`."""
    tx.raw.executemany(EVENT_SQL, rows)
    return None


def events_after(tx: StoreTx, rows: list[tuple[object, ...]]) -> object:
    """`Tx.insert_many`, as `Outbox.append_many` calls it."""
    tx.raw.insert_many("outbox", EVENT_COLUMNS, rows)
    return None


def accounts() -> list[tuple[str, str, str]]:
    """100 (reference, account digest, last 4) of employees, half of them paid before."""
    return [(f"E-{i:06d}", uuid.uuid4().hex * 2, f"{i:04d}") for i in range(100)]


def paid_many_before(tx: StoreTx, paid: list[tuple[str, str, str]]) -> object:
    """`PaidAccounts.paid_many` as it was: `executemany`."""
    rows = [("O-1", *row, "b", NOW) for row in paid]
    tx.raw.executemany(PAID_SQL, rows)
    return None


def paid_many_after(tx: StoreTx, paid: list[tuple[str, str, str]]) -> object:
    """`PaidAccounts.paid_many`."""
    tx.paid_accounts.paid_many("O-1", paid, batch_id="b", now=NOW)
    return None


def unpublished(store: Store, events: int, keys: int) -> list[object]:
    """Append `events` events over `keys` keys (one transaction); their ids."""

    def append(tx: StoreTx) -> list[object]:
        batch = uuid.uuid4().hex[:12]
        for number in range(keys):
            share = events // keys + (1 if number < events % keys else 0)
            tx.outbox.append_many("bench", f"{batch}-{number}", [NewEvent({"n": i}) for i in range(share)], now=NOW)
        rows = tx.raw.fetchall("SELECT id FROM outbox WHERE published_at IS NULL")
        return [int(row["id"]) for row in rows]

    return store.run(append)


def measure(store: Store, work: Work, inputs: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """(CPU s, wall s) per run of `work`, each in its own transaction; `inputs` made outside the timing."""
    cpu = wall = 0.0
    for _ in range(repeats):
        values = inputs()

        def run(tx: StoreTx, given: Any = values) -> object:
            return work(tx, given)

        started_cpu, started_wall = time.process_time(), time.perf_counter()
        store.run(run)
        cpu += time.process_time() - started_cpu
        wall += time.perf_counter() - started_wall
    return cpu / repeats, wall / repeats


def main() -> int:
    """Run each pair interleaved and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--events", type=int, default=26, help="events marked published per relay round")
    parser.add_argument("--keys", type=int, default=5, help="keys those events belong to")
    args = parser.parse_args()
    references: list[object] = [f"E-{i:06d}" for i in range(100)]
    with fresh_store("postgresql", args.pg_url, Path(".")) as url:
        store = Store.open(url, cipher=load_cipher({"DISPERSION_STORE_KEY": generate_key()}))
        try:
            store.run(
                lambda tx: tx.paid_accounts.paid_many(
                    "O-1", [(f"E-{i:06d}", f"{i:064x}", "1234") for i in range(0, 200, 2)], batch_id="b", now=NOW
                )
            )
            pairs: list[tuple[str, Work, Work, Callable[[], Any]]] = [
                (
                    f"mark_published ({args.events} events, {args.keys} keys)",
                    published_before,
                    published_after,
                    lambda: unpublished(store, args.events, args.keys),
                ),
                ("keep_sketch (100 keys)", sketch_before, sketch_after, lambda: [uuid.uuid4().hex for _ in range(100)]),
                ("paid_accounts.last (100 references)", paid_before, paid_after, lambda: references),
                ("the completion's 100 transfer events", events_before, events_after, lambda: event_rows(store)),
                ("paid_accounts.paid_many (100 employees)", paid_many_before, paid_many_after, accounts),
            ]
            for title, old, new, inputs in pairs:
                measure(store, old, inputs, 10)  # warm: connections open, statements prepared
                measure(store, new, inputs, 10)
                print(title)
                for _ in range(args.rounds):
                    for name, work in (("before", old), ("after", new)):
                        cpu, wall = measure(store, work, inputs, args.repeats)
                        print(f"  {name:7s} CPU {cpu * 1e6:6.0f} us per run, wall {wall * 1e6:6.0f} us per run")
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
