"""The relay's per-event work, before and after issue 22's CPU pass, side by side in one run (no broker, no store).

For each outbox event the relay parses the stored JSON payload, fits it to the topic's Avro schema
(`producers/avro_json.py`) and encodes it (fastavro, the deployment's wire format). A completed batch of 100
transfers is 100 `dispersion.transfers` events plus its status events (COMPLETED carries the 100 per-transfer
results). "Before" is `producers/avro_json.py` as it was at `--before` (read from git: the schema interpreted on
every value) and `json.loads(text, parse_float=Decimal)` (a decoder built per call); "after" is the code of this
checkout (the schema compiled once per topic, one shared decoder). The same `outbox_record` runs both, with the
two pieces swapped. Printed: CPU per event (this process), interleaved over `--rounds`.

    python benchmarks/relay_encode.py [--batches 50] [--transactions 100] [--rounds 3] [--before 57ee105]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import processor.store.outbox as outbox_module
import producers.relay as relay_module
from processor.engine.transfer_events import cloud_event_headers, document_transfers, transfer_payloads
from processor.store import OutboxEvent
from processor.store.values import dump_json
from producers import avro_json
from producers.relay import EventEncoder
from schemas.topics import STATUS_TOPIC, TRANSFERS_TOPIC

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OCCURRED = "2026-11-30T12:00:00.000Z"


def old_avro_json(revision: str) -> ModuleType:
    """`producers/avro_json.py` as it was at `revision`, imported under another name."""
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{revision}:producers/avro_json.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    folder = Path(tempfile.mkdtemp(prefix="relay-encode-"))
    path = folder / "avro_json_before.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("avro_json_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def batch_events(batch: int, count: int) -> list[OutboxEvent]:
    """The outbox events of one completed batch: its transfers and its COMPLETED status event."""
    batch_id = f"B-{batch:06d}"
    document = {
        "origin_account": {"currency": "MXN", "account_number": "012345678901234567"},
        "transactions": [
            {
                "employee_reference": f"E-{i:06d}",
                "amount": f"{1000 + i}.{i % 100:02d}",
                "destination_account": {"account_number": f"0123456789012{i:05d}", "currency": "MXN"},
            }
            for i in range(count)
        ],
    }
    results = [
        {"index": i, "employee_reference": f"E-{i:06d}", "amount": f"{1000 + i}.{i % 100:02d}", "status": "COMPLETED"}
        for i in range(count)
    ]
    transfers = document_transfers(batch_id, document)
    payloads = transfer_payloads(transfers, results, ended="COMPLETED", reason=None, occurred_at=OCCURRED)
    events = [
        OutboxEvent(
            id=batch * 1000 + index,
            event_id=str(payload["event_id"]),
            topic=TRANSFERS_TOPIC,
            key=batch_id,
            seq=index + 2,
            status=None,
            payload_text=dump_json(payload),
            headers=cloud_event_headers(str(payload["event_id"]), "COMPLETED", batch_id, index, OCCURRED),
            created_at=NOW,
            published_at=None,
        )
        for index, payload in enumerate(payloads)
    ]
    status = {
        "batch_id": batch_id,
        "occurred_at": OCCURRED,
        "control_sum": str(sum(Decimal(r["amount"]) for r in results)),
        "amount_completed": str(sum(Decimal(r["amount"]) for r in results)),
        "transaction_results": results,
    }
    completed = OutboxEvent(
        batch * 1000 + 999, f"{batch_id}-c", STATUS_TOPIC, batch_id, 1, "COMPLETED", dump_json(status), None, NOW, None
    )
    return [*events, completed]


def batch_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options of the benchmarks over `batch_events` (this one, json_checks.py, avro_encode.py): how many
    completed batches, of how many transfers, measured in how many interleaved rounds."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--transactions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    return parser


@contextmanager
def swapped(avro_json: Any, load_json: Callable[[str], Any]) -> Iterator[None]:
    """Run `outbox_record` with this module's `convert` (and its `Coercion`) and this payload parser."""
    saved = relay_module.convert, relay_module.Coercion, outbox_module.load_json
    relay_module.convert, relay_module.Coercion = avro_json.convert, avro_json.Coercion
    outbox_module.load_json = load_json
    try:
        yield
    finally:
        relay_module.convert, relay_module.Coercion, outbox_module.load_json = saved


def per_event(events: list[list[OutboxEvent]], work: Callable[[OutboxEvent], Any]) -> float:
    """CPU seconds per event of `work` over fresh copies of the events (the payload is parsed on first use)."""
    fresh = [
        OutboxEvent(e.id, e.event_id, e.topic, e.key, e.seq, e.status, e.payload_text, e.headers, e.created_at, None)
        for batch in events
        for e in batch
    ]
    start = time.process_time()
    for event in fresh:
        work(event)
    return (time.process_time() - start) / len(fresh)


def main() -> int:
    """Both variants interleaved; prints the figures."""
    parser = batch_parser(__doc__)
    parser.add_argument("--before", default="57ee105", help="git revision of the 'before' avro_json.py")
    args = parser.parse_args()
    before = old_avro_json(args.before)
    events = [batch_events(b, args.transactions) for b in range(args.batches)]
    encoder = EventEncoder()
    variants: dict[str, tuple[Any, Callable[[str], Any]]] = {
        f"before ({args.before})": (before, lambda text: json.loads(text, parse_float=Decimal)),
        "after": (avro_json, outbox_module.load_json),
    }
    total = sum(len(batch) for batch in events)
    print(f"{args.batches} completed batches: {total} outbox events ({args.transactions} transfers + COMPLETED each)")
    for avro, load in variants.values():  # warm up, and check both give the same bytes
        with swapped(avro, load):
            assert [encoder(e) for e in events[0]] == [EventEncoder()(e) for e in events[0]]
    for _ in range(args.rounds):
        for name, (avro, load) in variants.items():
            with swapped(avro, load):
                record = per_event(events, relay_module.outbox_record)
                encoded = per_event(events, encoder)
            print(
                f"{name:20s} parse + fit to the schema {record * 1e6:6.1f} us per event;"
                f" with the Avro encoding {encoded * 1e6:6.1f} us per event"
                f" = {encoded * (args.transactions + 1) * 1000:5.2f} ms per batch"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
