"""Console Mandates pages and the VRP admin reads with many mandates in the store (issue 24).

Fills a fresh store (SQLite in a temporary folder, or `--store postgresql://...` into a schema of its own) with
`--mandates` authorised mandates (a monthly and a daily limit each), each with `--payments` payments over the last
30 days (completed, a few refused) and their `vrp.status` events; serves the console over uvicorn on loopback
(`benchmarks/console.py`'s harness); signs in and times each page `--repeat` times over HTTP. Every listed mandate
computes its client-side ledger (its payments read, summed per period), so the list is the page to watch. Prints
median and worst per page. Nothing is asserted.

    python benchmarks/mandates.py [--mandates 2000] [--payments 10] [--repeat 20] [--store URL]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from console import bench_store, measure, print_figures

from processor.domain.time import iso_ms
from processor.domain.vrp_requests import CONSENT_CREATED_KEY, status_record
from processor.store import Store
from schemas.topics import VRP_STATUS_TOPIC

DAYS = 30
CREDITOR = {"scheme_name": "UK.OBIE.SortCodeAccountNumber", "identification": "08080021325698", "name": "Savings pot"}


def mandate_document(mandate_id: str, now: datetime) -> dict[str, Any]:
    """A `vrp.mandates` request (JSON form): 500.00 a payment, 5000.00 a calendar month, 800.00 a consent day."""
    return {
        "mandate_id": mandate_id,
        "integration": "sandbox",
        "currency": "GBP",
        "creditor_account": dict(CREDITOR),
        "max_individual_amount": "500.00",
        "periodic_limits": [
            {"amount": "5000.00", "period_type": "Month", "period_alignment": "Calendar"},
            {"amount": "800.00", "period_type": "Day", "period_alignment": "Consent"},
        ],
        "valid_from": (now - timedelta(days=DAYS + 1)).isoformat(),
        "valid_to": (now + timedelta(days=365)).isoformat(),
        "reference": "SWEEP-BENCH",
        "description": None,
        "requested_at": iso_ms(now),
        "source": "benchmark",
    }


def fill(store: Store, count: int, payments: int, now: datetime) -> str:
    """Store `count` authorised mandates with `payments` payments and their events each; one mandate's id."""
    sample = ""
    for start in range(0, count, 200):

        def chunk(tx: Any, start: int = start) -> str:
            last = ""
            for number in range(start, min(count, start + 200)):
                mandate_id = f"bench-m-{number:06d}-{uuid.uuid4().hex[:6]}"
                created = now - timedelta(days=DAYS + 1, seconds=number)
                tx.mandates.create(
                    mandate_id,
                    "sandbox",
                    mandate_document(mandate_id, now),
                    limits={CONSENT_CREATED_KEY: iso_ms(created)},
                    now=created,
                    currency="GBP",
                    state="AUTHORIZED",
                )
                for status in ("AUTHORIZATION_REQUIRED", "AUTHORIZED"):
                    record = status_record(mandate_id=mandate_id, status=status, occurred_at=created)
                    tx.outbox.append(VRP_STATUS_TOPIC, mandate_id, record, now=created, event_id=record["event_id"])
                for i in range(payments):
                    at = now - timedelta(days=DAYS * i / max(payments, 1), minutes=number % 60)
                    state = "REFUSED" if i % 7 == 6 else "COMPLETED"
                    payment_id = f"{mandate_id}-p{i}"
                    instruction = {"payment_id": payment_id, "mandate_id": mandate_id, "amount": "120.00"}
                    tx.vrp_payments.create(
                        payment_id,
                        mandate_id,
                        amount=Decimal("120.00"),
                        currency="GBP",
                        instruction=instruction,
                        now=at,
                        state=state,
                    )
                last = mandate_id
            return last

        sample = store.run(chunk) or sample
    return sample


def main() -> int:
    """Fill, serve, time, print."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mandates", type=int, default=2_000)
    p.add_argument("--payments", type=int, default=10)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--store", help="store URL (default: SQLite in a temporary folder)")
    args = p.parse_args()
    with bench_store(args.store, "mandates-bench.sqlite") as (store, url):
        now = datetime.now(UTC)
        started = time.perf_counter()
        sample = fill(store, args.mandates, args.payments, now)
        filled = time.perf_counter() - started
        size = f"{args.mandates} mandates x {args.payments} payments"
        print(f"store: {url.split('://')[0]}, {size} in {filled:.1f} s")
        pages = {
            "mandates (newest 50, ledgers)": "/mandates",
            "mandates, status AUTHORIZED": "/mandates?status=AUTHORIZED",
            "mandates, text search": f"/mandates?q={sample[-6:]}",
            "mandates, page 10": "/mandates?page=10",
            "mandate (ledger, payments, timeline)": f"/mandates/{sample}",
        }
        figures = asyncio.run(measure("http://127.0.0.1", store, pages, args.repeat))
    print_figures(figures, args.repeat, now)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
