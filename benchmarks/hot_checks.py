"""The per-statement and per-value work changed in issue 22's seventh pass, before and after side by side in one run.

- The large-value check over a relay round's rows (70 rows of 14 values; `Tx` closes a connection that sent or read
  a value over 4 MiB): before, a generator calling a function per value (`_large`, kept below); after,
  `processor.store.db._any_large`, a loop per row.
- `insert_many`'s conversion of one column (100 texts): before, `_pg_param` per value; after,
  `processor.store.db._pg_column`, which looks at each kind of value in the column once.
- Whether a statement returned rows, on a real PostgreSQL cursor of 14 columns: before, psycopg's
  `cursor.description` (a column object per column each time); after, the result's status, as `Tx._run` reads it.
- A transfer event's Kafka headers in the relay (the 7 CloudEvents headers of `cloud_event_headers`): before, each
  value encoded to bytes in a generator; after, handed to the producer as text (confluent-kafka writes it as UTF-8).

Printed: this process's CPU per call, interleaved over `--rounds`. Nothing is asserted.

    python benchmarks/hot_checks.py [--pg-url URL] [--rounds 3] [--calls 20000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from month_end import DEFAULT_PG_URL

from processor.engine.transfer_events import cloud_event_headers
from processor.store.db import _TUPLES_OK, LARGE_VALUE, _any_large, _pg_column, _pg_param

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _large(value: object) -> bool:
    """The check per value as it was in `processor/store/db.py` before the seventh pass."""
    return isinstance(value, str | bytes) and len(value) > LARGE_VALUE


def relay_rows() -> list[dict[str, object]]:
    """70 outbox rows as the relay's claim reads them (14 columns, the payload about 380 characters)."""
    return [
        {
            "id": n,
            "event_id": f"5aa17b32-1451-5176-856a-{n:012d}",
            "topic": "dispersion.transfers",
            "event_key": "B-000001",
            "seq": n + 2,
            "status": None,
            "status_rank": None,
            "payload": "x" * 380,
            "headers": '{"ce_id": "5aa17b32"}',
            "created_at": NOW,
            "published_at": None,
            "lease_owner": "relay-1",
            "handed_by": None,
            "attempts": 0,
        }
        for n in range(70)
    ]


def cases(cursor: psycopg.Cursor[Any]) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    """(what, before, after) for each piece."""
    rows = relay_rows()
    column = [f"E-{n:06d}" for n in range(100)]
    headers = cloud_event_headers(
        "5aa17b32-1451-5176-856a-e1f1d8cf8de4", "COMPLETED", "B-1", 7, "2026-11-30T12:00:00.000Z"
    )

    def headers_before() -> object:
        out: list[tuple[str, str | bytes | None]] = [("event_id", b"5aa17b32"), ("seq", b"9")]
        out.extend((name, text.encode()) for name, text in headers.items())
        return out

    def headers_after() -> object:
        out: list[tuple[str, str | bytes | None]] = [("event_id", b"5aa17b32"), ("seq", b"9")]
        out.extend(headers.items())
        return out

    def returned_rows_after() -> object:
        result = cursor.pgresult
        return result is not None and result.status == _TUPLES_OK

    return [
        (
            "large-value check, 70 rows x 14 values",
            lambda: any(_large(v) for row in rows for v in row.values()),
            lambda: any(_any_large(row.values()) for row in rows),
        ),
        ("insert_many column, 100 texts", lambda: [_pg_param(v) for v in column], lambda: _pg_column(column)),
        ("rows returned?, 14 columns", lambda: cursor.description is not None, returned_rows_after),
        ("relay headers, 7 + 2", headers_before, headers_after),
    ]


def per_call(work: Callable[[], object], calls: int) -> float:
    """CPU seconds per call of `work`."""
    start = time.process_time()
    for _ in range(calls):
        work()
    return (time.process_time() - start) / calls


def main() -> int:
    """Each pair interleaved; prints the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    with psycopg.connect(args.pg_url, autocommit=True) as conn:
        cursor = conn.execute("SELECT " + ", ".join(f"{n} AS c{n}" for n in range(14)))
        pairs = cases(cursor)
        for _ in range(args.rounds):
            for what, before, after in pairs:
                old, new = per_call(before, args.calls), per_call(after, args.calls)
                print(f"{what:40s} before {old * 1e6:7.2f} us   after {new * 1e6:7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
