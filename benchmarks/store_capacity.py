"""How fast the shared PostgreSQL serves the statements every instance runs per batch, alone and under concurrency.

Against a fresh database on the server (created and dropped here), `--workers` processes (each its own connection,
as instances' pools would be) run one workload for `--seconds` each, then the next:

- `claim`: the worker's lease cycle on `flows`: one transaction `claim_due(limit=1)` (UPDATE ... FOR UPDATE SKIP
  LOCKED over the due flows), one transaction releasing it (`release`), over `--flows` due flows;
- `append`: one transaction per status event, `Outbox.append_status` (the outbox key row locked by an upsert,
  its counters updated, the event inserted: what every state move adds), each on its own key;
- `relay`: the relay's cycle over the events `append` left: `claim(limit=100)` (lease keys, mark them handed,
  read their events), then `mark_published` of those events (and each key's counters).

Printed per workload and number of processes: cycles/s, statements/s, and the CPU seconds of the server
processes serving these connections per 1000 cycles (from /proc).
Nothing is asserted.

    python benchmarks/store_capacity.py [--pg-url URL] [--workers 1 4 16] [--seconds 5] [--flows 5000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from month_end import DEFAULT_PG_URL, fresh_store, process_cpu_seconds

from processor.store import Store
from processor.store.crypto import generate_key, load_cipher

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
STATUS = "dispersion.status"
PAYLOAD = {
    "batch_id": "x",
    "status": "AUTHORIZATION_REQUIRED",
    "authorization_url": "https://x/" + "a" * 200,
    "occurred_at": "2026-11-30T12:00:00.000Z",
    "control_sum": "123456.78",
    "number_of_transactions": 100,
}


def backend_cpu(url: str) -> dict[int, float]:
    """CPU seconds (user + system) of each server process connected to the database of `url`, by pid."""
    with psycopg.connect(url, autocommit=True) as conn:
        query = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        pids = [row[0] for row in conn.execute(query)]
    used = {}
    for pid in pids:
        seconds = process_cpu_seconds(pid)
        if seconds is not None:  # a backend gone since the query is left out
            used[pid] = seconds
    return used


Cycle = Callable[[Store, str, int], int]  # (store, worker name, cycle number) -> statements run


def _worker(url: str, name: str, cycle: Cycle, slot: int, counts: Any, stop: Any) -> None:
    store = Store.open(url, cipher=load_cipher({"DISPERSION_STORE_KEY": generate_key()}), migrate_schema=False,
                       pool_size=1)  # fmt: skip
    try:
        while not stop.is_set():
            counts[2 * slot + 1] += cycle(store, name, counts[2 * slot])
            counts[2 * slot] += 1
    finally:
        store.close()


def run_workers(url: str, label: str, workers: int, seconds: float, cycle: Cycle) -> tuple[int, int, float, float]:
    """Run `cycle` in `workers` processes (each its own connection, as instances are) and measure `seconds` of it
    once all are connected: (cycles, statements, wall s, server CPU s)."""
    counts = multiprocessing.Array("q", 2 * workers, lock=False)  # per worker: cycles, statements (one writer)
    stop = multiprocessing.Event()
    processes = [
        multiprocessing.Process(target=_worker, args=(url, f"{label}-{i}", cycle, i, counts, stop))
        for i in range(workers)
    ]
    for process in processes:
        process.start()
    deadline = time.monotonic() + 30
    while len(backend_cpu(url)) < workers and time.monotonic() < deadline:
        time.sleep(0.1)
    before, counted, started = backend_cpu(url), list(counts), time.perf_counter()
    time.sleep(seconds)
    after, ended, wall = backend_cpu(url), list(counts), time.perf_counter() - started
    stop.set()
    for process in processes:
        process.join()
    cpu = sum(after[pid] - before[pid] for pid in before if pid in after)
    return sum(ended[0::2]) - sum(counted[0::2]), sum(ended[1::2]) - sum(counted[1::2]), wall, cpu


NOW = T0 + timedelta(minutes=1)


def claim(store: Store, name: str, n: int) -> int:
    """The worker's lease cycle: claim one due flow, release it."""
    got = store.run(lambda tx: tx.flows.claim_due(now=NOW, owner=name, limit=1, lease_seconds=60))
    for flow in got:
        store.run(lambda tx, key=flow.batch_id: tx.flows.release(key, owner=name))
    return 1 + len(got)


def append(store: Store, name: str, n: int) -> int:
    """One status event on its own key."""
    store.run(lambda tx: tx.outbox.append_status(STATUS, f"{name}-{n}", "AUTHORIZATION_REQUIRED", PAYLOAD, now=NOW))
    return 3


def relay(store: Store, name: str, n: int) -> int:
    """The relay's cycle: claim up to 100 events, mark them published."""
    events = store.run(lambda tx: tx.outbox.claim(owner=name, now=NOW, limit=100, lease_seconds=30))
    if not events:
        return 3
    store.run(lambda tx: tx.outbox.mark_published([e.id for e in events], now=NOW))
    return 4 + len({(e.topic, e.key) for e in events})


def main() -> int:
    """Fill the database, run the workloads and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--flows", type=int, default=5000)
    args = parser.parse_args()
    print(f"store capacity {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    with fresh_store("postgresql", args.pg_url, Path(".")) as url:
        store = Store.open(url, cipher=load_cipher({"DISPERSION_STORE_KEY": generate_key()}),
                           pool_size=1)  # fmt: skip
        try:
            for start in range(0, args.flows, 500):
                store.run(lambda tx, s=start: [
                    tx.flows.create(f"f-{i:07d}", "bank", {"n": i}, now=T0, next_action_at=T0)
                    for i in range(s, min(s + 500, args.flows))
                ])  # fmt: skip
            for name, cycle in (("claim", claim), ("append", append), ("relay", relay)):
                for workers in args.workers:
                    cycles, statements, wall, cpu = run_workers(url, f"{name}{workers}", workers, args.seconds, cycle)
                    per = cpu / cycles * 1000 if cycles else float("nan")
                    print(f"{name:7s} {workers:3d} processes: {cycles / wall:8.0f} cycles/s, {statements / wall:8.0f}"
                          f" statements/s, server CPU {per:6.2f} s per 1000 cycles", flush=True)  # fmt: skip
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
