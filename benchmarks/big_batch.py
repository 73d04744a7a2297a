"""Big-batch benchmark: one 100,000-transaction payroll batch through one processor, with its peak memory.

Same harness as benchmarks/month_end.py (real broker, the sandbox bank with `--latency-ms` added per call,
`dispersion processor` as a process, a fresh PostgreSQL database or SQLite file, fresh topics): the batch is
produced to `payroll.batches`, approved like a browser would, and followed on `dispersion.status` to
`COMPLETED`. Printed: the time of each phase, the processor's peak RSS (VmHWM from /proc at the end) and the
highest VmRSS sampled in each phase, and the CPU seconds it used per phase.

Phases (wall clock; "consumed" = when this script read the status event):

    encode      build and Avro-encode the batch (client side, not the processor's)
    produce     first produce -> Kafka acknowledged the message
    to-auth     produce acknowledged -> AUTHORIZATION_REQUIRED consumed (consume, validate, store, build the
                file payload, A1 consent, A2 upload, outbox relay)
    approve     approval link opened -> the bank's redirect delivered to our callback (PAR, consent page)
    callback    redirect delivered -> callback answered 200 (code exchange)
    initiate    redirect delivered -> INITIATED consumed (A3 create file payment; CPU counted from
                AUTHORIZATION_REQUIRED, so the approval is included)
    complete    INITIATED consumed -> COMPLETED consumed (A4 polls, report-file, per-transaction results)

    python benchmarks/big_batch.py [--transactions 100000] [--store postgresql|sqlite] [--latency-ms 20]

Target (the issue): the 100,000-transaction batch processed in under 500 MB (processor RSS). The script prints
figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from month_end import (
    DROPPED_RETRIES,
    Child,
    RssSampler,
    Seen,
    StatusWatcher,
    _interrupt,
    approve,
    bank_call_means,
    batch_record,
    broker,
    code_version,
    common_arguments,
    delete_topics,
    fresh_kafka,
    fresh_store,
    group_members,
    load_averages,
    mb,
    prepare,
    produce,
    say,
    speed_reference,
    start_processor,
    start_sandbox,
    stop_all,
    write_config,
)

import schemas
from processor.devtools.processes import eventually
from processor.kafka.settings import KafkaSettings
from schemas.topics import BATCHES_TOPIC

TARGET_MB = 500


def keep(record: dict[str, Any]) -> dict[str, Any]:
    """What the status watcher keeps of an event: the link, and a tally of the per-transaction results."""
    results = record.get("transaction_results") or []
    return {
        "authorization_url": record.get("authorization_url"),
        "results": Counter(str(r["status"]) for r in results),
        "reason": record.get("reason"),
    }


async def approve_one(batch_id: str, link: str, api: str) -> tuple[float, float, float]:
    """(opened, redirect delivered, callback answered) wall times."""
    async with httpx.AsyncClient(timeout=600) as http:
        approval = await approve(http, batch_id, link, api)
    return approval.opened_at, approval.delivered_at, approval.answered_at


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--transactions", type=int, default=100_000)
    common_arguments(parser)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    directory = Path(tempfile.mkdtemp(prefix="dispersion-big-batch-"))
    print(
        f"big-batch benchmark {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"load average {load_averages()}; {speed_reference()}; {code_version()}"
    )
    children: list[Child] = []
    try:
        with broker(args.bootstrap) as bootstrap:
            bench = prepare(directory, bootstrap, 1, args.latency_ms, args.file_payment_delay)
            bench.profile = args.profile.resolve() if args.profile else None
            bench.sandbox_max_body_mb = args.sandbox_max_body_mb
            settings = fresh_kafka(bootstrap, args.partitions, args.status_max_message_mb)
            try:
                with fresh_store(args.store, args.pg_url, directory) as store:
                    try:
                        config = directory / "dispersion.toml"
                        engine = {"concurrency": args.engine_concurrency} if args.engine_concurrency else {}
                        write_config(
                            config, integration=bench.integration, store=store, public_url=bench.api_url(0),
                            kafka=settings, engine=engine,
                        )  # fmt: skip
                        sandbox = start_sandbox(bench, directory)
                        children.append(sandbox)
                        processor = start_processor(bench, 0, config, directory)
                        children.append(processor)
                        eventually(lambda: group_members(settings) == 1, what="a stable consumer group", timeout=90)
                        _measure(args, bench.api_url(0), settings, processor, sandbox)
                    finally:
                        stop_all(children)  # before the store is dropped
            finally:
                delete_topics(settings)
    finally:
        if args.keep:
            say(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


@dataclass
class _Ended:
    """What a measured run leaves for its report."""

    message_bytes: int
    marks: list[tuple[str, float, float, float]]  # phase ended, wall time, processor and sandbox CPU s
    opened: float
    delivered: float
    answered: float
    peak_kb: int | None
    bank_calls: dict[str, tuple[int, float]]
    sandbox_peak_kb: int | None
    load_end: str


def _measure(args: argparse.Namespace, api: str, settings: KafkaSettings, processor: Child, sandbox: Child) -> None:
    count: int = args.transactions
    batch_id = f"big-{int(time.time())}"
    marks: list[tuple[str, float, float, float]] = []  # phase ended, wall time, processor and sandbox CPU s

    def mark(phase: str) -> None:
        marks.append((phase, time.time(), processor.cpu_seconds(), sandbox.cpu_seconds()))

    with StatusWatcher(settings, keep) as watcher, RssSampler([processor, sandbox], interval=0.1) as sampler:
        mark("start")
        sampler.phase = "encode"
        record = batch_record(batch_id, count, 0)
        value = schemas.encode(BATCHES_TOPIC, record)
        del record
        mark("encode")
        say(f"batch {batch_id}: {count:,} transactions, {len(value) / 1e6:.1f} MB of Avro; producing")
        sampler.phase = "produce"
        produce(settings, [(batch_id, value)])
        mark("produce")
        sampler.phase = "to-auth"
        done = watcher.wait(lambda c: c["AUTHORIZATION_REQUIRED"] + c["INVALID"] + c["FAILED"] >= 1, args.timeout,
                            "AUTHORIZATION_REQUIRED")  # fmt: skip
        mark("to-auth")
        seen = watcher.seen.get(batch_id, {})
        if not done or "AUTHORIZATION_REQUIRED" not in seen:
            print(f"no AUTHORIZATION_REQUIRED: {dict(watcher.counts)} {[s.record for s in seen.values()]}")
            return
        say("AUTHORIZATION_REQUIRED; approving")
        link = str(seen["AUTHORIZATION_REQUIRED"].record["authorization_url"])
        sampler.phase = "approve+callback"
        opened, delivered, answered = asyncio.run(approve_one(batch_id, link, api))
        mark("callback")
        sampler.phase = "initiate"
        watcher.wait(lambda c: c["INITIATED"] + c["FAILED"] >= 1, args.timeout, "INITIATED")
        mark("initiate")
        say("INITIATED; waiting for COMPLETED")
        sampler.phase = "complete"
        watcher.wait(lambda c: c["COMPLETED"] + c["FAILED"] >= 1, args.timeout, "COMPLETED")
        mark("complete")
        sampler.sample()
        ended = _Ended(
            message_bytes=len(value), marks=marks, opened=opened, delivered=delivered, answered=answered,
            peak_kb=processor.status_kb("VmHWM"), bank_calls=bank_call_means(api),
            sandbox_peak_kb=sandbox.status_kb("VmHWM"), load_end=load_averages(),
        )  # fmt: skip
    _report(args, ended, watcher.seen.get(batch_id, {}), sampler, watcher)


def _report(
    args: argparse.Namespace, ended: _Ended, seen: dict[str, Seen], sampler: RssSampler, watcher: StatusWatcher
) -> None:
    count: int = args.transactions
    marks, delivered = ended.marks, ended.delivered
    at = {phase: wall for phase, wall, _, _ in marks}
    cpu = {phase: used for phase, _, used, _ in marks}
    bank_cpu = {phase: used for phase, _, _, used in marks}
    print()
    print(
        f"=== big batch: {count:,} transactions, store {args.store}, bank latency +{args.latency_ms:g} ms/call, "
        f"file payment delay {args.file_payment_delay:g} s ==="
    )
    print(f"load average (1/5/15 min) at the end: {ended.load_end}")
    if args.sandbox_max_body_mb:
        print(f"sandbox request body limit set to {args.sandbox_max_body_mb:g} MiB (64 MiB as shipped)")
    if args.status_max_message_mb:
        print(f"status topic max.message.bytes set to {args.status_max_message_mb:g} MiB (64 MiB as created)")
    print(f"Avro message: {ended.message_bytes / 1e6:.1f} MB")

    ends = {"to-auth": "produce", "initiate": "to-auth", "complete": "initiate"}

    def line(name: str, seconds: float, cpu_seconds: float | None, note: str = "") -> None:
        used = ""
        if cpu_seconds is not None:
            sandbox_cpu = bank_cpu[name] - bank_cpu[ends[name]]
            used = f"  CPU: processor {cpu_seconds:5.1f} s, sandbox {sandbox_cpu:5.1f} s"
        print(f"{name:10} {seconds:8.2f} s{used}  {note}")

    line("encode", at["encode"] - at["start"], None, "(client side)")
    line("produce", at["produce"] - at["encode"], None, "first produce -> acknowledged")
    if "AUTHORIZATION_REQUIRED" in seen:
        to_auth = seen["AUTHORIZATION_REQUIRED"].consumed_at - at["produce"]
        line("to-auth", to_auth, cpu["to-auth"] - cpu["produce"], "acknowledged -> AUTHORIZATION_REQUIRED consumed")
    line("approve", delivered - ended.opened, None, "link opened -> redirect delivered (PAR, consent page)")
    line("callback", ended.answered - delivered, None, "redirect delivered -> callback 200 (code exchange)")
    if "INITIATED" in seen:
        initiated = seen["INITIATED"]
        late = initiated.occurred_at - delivered
        note = f"redirect delivered -> INITIATED consumed (by occurred_at: {late:.2f} s)"
        line("initiate", initiated.consumed_at - delivered, cpu["initiate"] - cpu["to-auth"], note)
    if "COMPLETED" in seen and "INITIATED" in seen:
        completed, initiated = seen["COMPLETED"], seen["INITIATED"]
        late = completed.occurred_at - initiated.occurred_at
        note = f"INITIATED -> COMPLETED consumed (by occurred_at: {late:.2f} s)"
        line("complete", completed.consumed_at - initiated.consumed_at, cpu["complete"] - cpu["initiate"], note)
        print(f"results: {dict(seen['COMPLETED'].record['results'])}")
    elif "FAILED" in seen:
        print(f"FAILED: {seen['FAILED'].record['reason']}")
    first = marks[0][1]
    if "COMPLETED" in seen:
        print(f"total (encode start -> COMPLETED consumed): {seen['COMPLETED'].consumed_at - first:.2f} s")
    print(f"CPU seconds in all: processor {marks[-1][2] - marks[0][2]:.1f}, sandbox {marks[-1][3] - marks[0][3]:.1f}")
    shown = ", ".join(f"{op} {n}x {mean * 1000:.0f} ms" for op, (n, mean) in sorted(ended.bank_calls.items()))
    print(f"bank calls (count, mean, from /metrics): {shown}")
    peak, sandbox_peak = ended.peak_kb, ended.sandbox_peak_kb
    verdict = "met" if peak is not None and peak * 1024 < TARGET_MB * 1_000_000 else "NOT met"
    print(f"processor peak RSS (VmHWM): {mb(peak)}  (target < {TARGET_MB} MB: {verdict}); sandbox {mb(sandbox_peak)}")
    for phase, peaks in sampler.peak_by_phase.items():
        shown = ", ".join(f"{name} {mb(kb)}" for name, kb in peaks.items())
        print(f"  max VmRSS sampled during {phase:16}: {shown}")
    if DROPPED_RETRIES:
        print(f"approver: GETs retried on a dropped keep-alive connection: {DROPPED_RETRIES}")
    if watcher.duplicates or watcher.errors:
        print(f"status consumer: {watcher.duplicates} duplicate events, errors {watcher.errors[:3]}")
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
