"""Operator console answer times with many batches in the store (issue 14: under 200 ms with 10,000 batches).

Fills a fresh store (SQLite in a temporary folder, or `--store postgresql://...` into a schema of its own) with
`--batches` five-transfer batches spread over 30 days and the statuses of a month-end (most COMPLETED with their
bank report, some waiting for approval, some failed), each with its status events; serves the console over
uvicorn on loopback; signs in and times each page `--repeat` times over HTTP. Prints median and worst per page.
Nothing is asserted.

    python benchmarks/console.py [--batches 10000] [--repeat 20] [--store URL]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount

from processor.api.console.app import console_app
from processor.api.console.auth import ConsoleTable, console_auth, hash_password
from processor.domain.file_states import BatchStatus, FlowState
from processor.domain.time import iso_ms
from processor.engine.file_events import status_payload
from processor.engine.intake import prepare_batch, store_batch
from processor.store import Cipher, Store, generate_key
from schemas.topics import STATUS_TOPIC

PASSWORD = "benchmark password"
DAYS = 30
# A month-end's mix: state, share (of 100).
MIX = (
    (FlowState.COMPLETED, 80),
    (FlowState.AWAITING_AUTHORIZATION, 10),
    (FlowState.FAILED, 4),
    (FlowState.REJECTED, 3),
    (FlowState.INITIATED, 3),
)
_PAID = ("AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED")
PUBLISHED: dict[FlowState, tuple[str, ...]] = {
    FlowState.COMPLETED: (*_PAID, "COMPLETED"),
    FlowState.FAILED: (*_PAID, "FAILED"),
    FlowState.AWAITING_AUTHORIZATION: ("AUTHORIZATION_REQUIRED",),
    FlowState.REJECTED: ("AUTHORIZATION_REQUIRED", "REJECTED"),
    FlowState.INITIATED: _PAID,
}
RESULTS = [
    {
        "index": i,
        "employee_reference": f"E-{i:04d}",
        "amount": str(Decimal("1000.00") + i),
        "status": "FAILED" if i == 3 else "COMPLETED",
        "reason": "AC04 closed account" if i == 3 else None,
    }
    for i in range(5)
]


def document(batch_id: str, number: int) -> dict[str, Any]:
    """A five-transfer batch; the fourth transfer goes to a closed account."""
    return {
        "batch_id": batch_id,
        "integration": "sandbox",
        "file_reference": f"PAYROLL-{number:06d}",
        "origin_account": {"account_number": "100200300", "account_type": "MONETARY", "currency": "GTQ"},
        "transactions": [
            {
                "destination_account": {
                    "account_number": f"2001{number % 1000:03d}{i:03d}" if i != 3 else "2001009902",
                    "account_type": "SAVINGS",
                    "currency": "GTQ",
                    "email": f"e{i}@example.com",
                },
                "amount": Decimal("1000.00") + i,
                "concept": "Payroll",
                "employee_reference": f"E-{i:04d}",
            }
            for i in range(5)
        ],
        "requested_at": "2026-11-30T08:00:00.000Z",
        "source": "benchmark",
    }


def fill(store: Store, count: int, now: datetime) -> str:
    """Store `count` batches with their events; the id of a completed one."""
    states = [state for state, share in MIX for _ in range(share)]
    sample = ""
    for start in range(0, count, 500):

        def chunk(tx: Any, start: int = start) -> str:
            found = ""
            for number in range(start, min(count, start + 500)):
                batch_id = f"bench-{number:06d}-{uuid.uuid4().hex[:6]}"
                created = now - timedelta(days=DAYS * number / count)
                prepared = prepare_batch(document(batch_id, number), integrations={"sandbox"})
                flow = store_batch(tx, prepared, now=created).flow
                assert flow is not None
                state = states[number % len(states)]
                for step, status in enumerate(PUBLISHED[state]):
                    at = created + timedelta(seconds=step)
                    payload = status_payload(flow, BatchStatus(status), at)
                    tx.outbox.append_status(STATUS_TOPIC, batch_id, status, payload, now=at)
                report = {"transaction_results": RESULTS} if state == FlowState.COMPLETED else None
                if state == FlowState.COMPLETED:
                    found = batch_id
                # Through the store (not raw SQL), so each batch's money share is kept as the engine keeps it.
                tx.flows.update(batch_id, expected_version=flow.version, now=created, state=state, report=report)
            return found

        sample = store.run(chunk) or sample
    return sample


def batch_pages(sample: str, now: datetime) -> dict[str, str]:
    """The pages timed, by name: their paths under `/console`."""
    return {
        "batches (newest 50, counts)": "/",
        "batches, status COMPLETED": "/?status=COMPLETED",
        "batches, text search": "/?q=PAYROLL-0042",
        "batches, date range, page 3": f"/?from={(now - timedelta(days=10)).date()}&to={now.date()}&page=3",
        "batch (timeline, transfers)": f"/batches/{sample}",
        "batch, failed only": f"/batches/{sample}?only=failed&sort=amount",
        "month-end overview (one day)": f"/overview?day={(now - timedelta(days=1)).date()}",
        "month-end overview (30 days)": f"/overview?from={(now - timedelta(days=30)).date()}&to={now.date()}",
        "batches, search an employee": "/?q=E-0003",
        "dead letters": "/dead-letters",
    }


async def measure(url: str, store: Store, pages: dict[str, str], repeat: int) -> list[tuple[str, list[float]]]:
    """Serve the console on loopback, sign in, and time each of `pages` `repeat` times (after one warm-up)."""
    auth = console_auth(ConsoleTable(operators={"bench": hash_password(PASSWORD)}, session_key="b" * 40))
    assert auth is not None
    app = Starlette(routes=[Mount("/console", app=console_app(store, auth, public_url=url))])
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 (uvicorn offers no "started" event)
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    base = f"http://127.0.0.1:{port}/console"
    figures: list[tuple[str, list[float]]] = []
    async with httpx.AsyncClient(timeout=30) as http:
        form = await http.get(f"{base}/sign-in")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None
        signed = await http.post(f"{base}/sign-in", data={"csrf": token[1], "name": "bench", "password": PASSWORD})
        assert signed.status_code == 303, signed.text
        for name, path in pages.items():
            times: list[float] = []
            for _ in range(repeat + 1):
                started = time.perf_counter()
                answer = await http.get(base + path)
                elapsed = time.perf_counter() - started
                assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
                times.append(elapsed)
            figures.append((name, times[1:]))  # the first answer warms caches
    server.should_exit = True
    await task
    return figures


@contextmanager
def bench_store(url: str | None, name: str) -> Iterator[tuple[Store, str]]:
    """A fresh store and its URL: SQLite in a temporary folder, or a PostgreSQL schema of its own (dropped after)."""
    with tempfile.TemporaryDirectory() as folder:
        url = url or f"sqlite:///{Path(folder) / name}"
        schema = f"bench_{uuid.uuid4().hex[:8]}" if url.startswith("postgres") else None
        if schema is not None:
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute(f"CREATE SCHEMA {schema}")
        store = Store.open(url, cipher=Cipher.from_text(generate_key()), schema=schema)
        try:
            yield store, url
        finally:
            store.close()
            if schema is not None:
                with psycopg.connect(url, autocommit=True) as admin:
                    admin.execute(f"DROP SCHEMA {schema} CASCADE")


def print_figures(figures: list[tuple[str, list[float]]], repeat: int, now: datetime) -> None:
    """Median and worst answer time per page."""
    width = max(34, *(len(name) for name, _ in figures))
    print(f"{'page':{width}} {'median ms':>10} {'worst ms':>10}   ({repeat} answers each, {iso_ms(now)})")
    for name, times in figures:
        print(f"{name:{width}} {statistics.median(times) * 1000:10.1f} {max(times) * 1000:10.1f}")


def main() -> int:
    """Fill, serve, time, print."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--store", help="store URL (default: SQLite in a temporary folder)")
    args = p.parse_args()
    with bench_store(args.store, "console-bench.sqlite") as (store, url):
        now = datetime.now(UTC)
        started = time.perf_counter()
        sample = fill(store, args.batches, now)
        print(f"store: {url.split('://')[0]}, {args.batches} batches filled in {time.perf_counter() - started:.1f} s")
        figures = asyncio.run(measure("http://127.0.0.1", store, batch_pages(sample, now), args.repeat))
    print_figures(figures, args.repeat, now)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
