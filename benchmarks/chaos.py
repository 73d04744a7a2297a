"""Chaos run: N payroll batches through 2-3 real processors while processors are SIGKILLed, the broker restarts and
the bank misbehaves; then every outcome is checked against the bank.

Same harness as benchmarks/month_end.py: a local Kafka broker (`processor.devtools.kafka_local.LocalKafka`, owned
by this script so it can be restarted), the sandbox bank (`dispersion sandbox --admin --db FILE`), `--instances`
`dispersion processor` processes (instance names `bench-1`...) on one fresh PostgreSQL database, fresh topics.

1. The bank's fault plan (docs/sandbox-faults.md, drawn from `--seed`): every call 1-3x `--latency-ms` slower;
   on any operation, `--fault-rate` split evenly over 500, 503 with Retry-After, 429 with Retry-After and dropped
   connections; `commit_then_fail` on a `--commit-fail-rate` share of the creating calls (A1 consent, A2 upload,
   A3 file payment): created at the bank, answered 500.
2. N batches are produced at once; each AUTHORIZATION_REQUIRED is decided by an approver thread, a browser behind
   a load balancer (link and redirect to any live instance, again after a failure): `--reject-share` of the
   batches (chosen by the seed) are rejected, the rest approved.
3. While the status events arrive: `--kills` SIGKILLs of a live processor (the victim and the moment, as a count
   of status events read, chosen by the seed; at least one instance stays up), each restarted under its instance
   name after 0.5-3 s; one broker restart (stop, 2-5 s down, start on the same port and data) halfway.
4. When every batch is terminal (or `--timeout`), the processors are stopped and the bank's state (its SQLite
   file, read only) is compared with what `dispersion.status` said:

   - duplicate bank resources: file consents beyond one per batch plus file payments beyond one per batch
     (batches matched by the FileReference of the consent's Initiation). A consent the processor's store records
     as replaced (an authorised consent whose tokens a killed code exchange lost: the engine's designed recovery
     makes a new one behind the same link, docs/engine.md) and under which nothing was paid is counted apart, as
     "consents replaced by design";
   - misreported outcomes: FAILED/REJECTED/EXPIRED while the bank holds a payment for the batch; COMPLETED
     without a payment at the bank, naming another payment, or with the sum the bank settles (its failure rule,
     sandbox/settlement.py) different from the batch's control sum; a status published twice (two event ids) or
     after one of higher rank (`processor.domain.file_states.STATUS_RANKS`).

   Both must be 0; the exit status is 1 otherwise (each case is listed). Figures go to standard output, progress
   to standard error. Everything started (processes, broker, database, files) is stopped by pid and removed at
   the end, also on Ctrl-C or SIGTERM.

    python benchmarks/chaos.py [--batches 100] [--instances 3] [--seed 1] [--kills K] [--reject-share 0.15]
                               [--fault-rate 0.04] [--commit-fail-rate 0.1] [--timeout 600]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from month_end import (
    DEFAULT_PG_URL,
    Bench,
    Child,
    StatusWatcher,
    _interrupt,
    batch_record,
    fresh_kafka,
    fresh_store,
    group_members,
    load_averages,
    prepare,
    produce,
    rebase,
    say,
    start_processor,
    start_sandbox,
    stop_all,
    write_config,
)

import schemas
from processor.devtools.approver import BROWSER_HEADERS, ApprovalError, decide
from processor.devtools.kafka_local import KafkaLocalError, LocalKafka
from processor.devtools.processes import eventually
from processor.domain.file_states import STATUS_RANKS
from processor.kafka.clients import librdkafka_logger, new_consumer
from processor.kafka.settings import KafkaSettings
from processor.store import Operation
from schemas.topics import BATCHES_TOPIC, STATUS_TOPIC

CREATING = ["file-payment-consents.create", "file-payment-consents.upload", "file-payments.create"]
# Short waits and leases, so a killed instance's flows are taken over within seconds (the e2e tests' timings).
CHAOS_ENGINE: dict[str, float | int] = {
    "idle_interval": 0.2,
    "poll_first": 0.5,
    "poll_max": 2.0,
    "retry_first": 0.5,
    "retry_max": 4.0,
    "lease_seconds": 8,
    "duplicate_wait": 2.0,
    "exchange_recovery_after": 3,
    "concurrency": 16,
}
RANKS = {str(status): rank for status, rank in STATUS_RANKS.items()}
TERMINAL = frozenset(status for status, rank in RANKS.items() if rank == max(RANKS.values()))
NO_BROKER_EXIT = 3  # the local broker could not be started (no Java or Maven): nothing was run


def fault_plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The sandbox's rules for this run (the plan's seed is `--seed`)."""
    share = args.fault_rate / 4
    rules: list[dict[str, Any]] = [
        {"operation": "*", "fault": "latency", "latency_ms": args.latency_ms, "jitter_ms": 2 * args.latency_ms},
        {"operations": CREATING, "fault": "commit_then_fail", "probability": args.commit_fail_rate},
        {"operation": "*", "fault": "error", "status": 500, "probability": share},
        {"operation": "*", "fault": "error", "status": 503, "retry_after": 1, "probability": share},
        {"operation": "*", "fault": "rate_limit", "retry_after": 1, "probability": share},
        {"operation": "*", "fault": "drop", "probability": share},
    ]
    return [rule for rule in rules if rule.get("probability", 1) > 0 and rule.get("latency_ms", 1) > 0]


# --- the processors, with kills and restarts -------------------------------------------------------------------


@dataclass
class Fleet:
    """The processor instances by index; `children` is everything to stop at the end (dead ones too)."""

    bench: Bench
    config: Path
    directory: Path
    children: list[Child]
    processors: dict[int, Child] = field(default_factory=dict)
    kills: list[str] = field(default_factory=list)
    exits: list[str] = field(
        default_factory=list
    )  # instances that stopped by themselves (restarted, as a supervisor would)
    restarts: int = 0
    _turn: Iterator[int] = field(default_factory=itertools.count)

    def start(self, index: int) -> None:
        """Start instance `index` as `bench-<index+1>` (a restart keeps the name) and wait for its ready line. Only
        from the main thread: the child is tied to the thread that starts it (PR_SET_PDEATHSIG)."""
        log = self.directory / f"processor-{index + 1}.log"
        if log.exists():  # keep a killed instance's log
            log.rename(self.directory / f"processor-{index + 1}.killed-{len(self.kills)}.log")
        child = start_processor(self.bench, index, self.config, self.directory)
        self.children.append(child)
        self.processors[index] = child

    def alive(self) -> list[int]:
        """Indexes of the running instances."""
        return [i for i, child in sorted(self.processors.items()) if child.process.poll() is None]

    def kill(self, index: int, at_events: int) -> None:
        """SIGKILL instance `index`: no shutdown, no commit, no release."""
        child = self.processors[index]
        child.process.kill()
        child.process.wait(10)
        self.kills.append(f"bench-{index + 1} at {at_events} events")
        say(f"SIGKILL bench-{index + 1} (pid {child.pid}) at {at_events} status events")

    def url(self) -> str:
        """A live instance's base URL, round robin (what a load balancer would pick)."""
        alive = self.alive() or sorted(self.processors)
        return self.bench.api_url(alive[next(self._turn) % len(alive)])


# --- the approver ---------------------------------------------------------------------------------------------


@dataclass
class Approvals:
    """Decides batches in threads, through whichever instances are up, as a person with a browser would: a
    redirect that got no answer (instance killed) or a 5xx is delivered again (reload), to another instance; a 4xx
    (its page says to open the approval link again) starts over from the link."""

    fleet: Fleet
    watcher: StatusWatcher
    workers: int
    per_batch_timeout: float
    stop: threading.Event = field(default_factory=threading.Event)
    futures: dict[str, Future[str]] = field(default_factory=dict)
    retries: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="approver")

    def submit(self, batch_id: str, link: str, decision: str) -> None:
        """Decide `batch_id` once (later calls for it do nothing)."""
        if batch_id not in self.futures:
            self.futures[batch_id] = self.pool.submit(self._settle, batch_id, link, decision)

    def _decided(self, batch_id: str) -> bool:
        with self.watcher.changed:
            return any(status != "AUTHORIZATION_REQUIRED" for status in self.watcher.seen.get(batch_id, {}))

    def _retry(self, why: str) -> None:
        with self.lock:
            self.retries[why] += 1
        self.stop.wait(0.5)

    def _settle(self, batch_id: str, link: str, decision: str) -> str:
        deadline = time.monotonic() + self.per_batch_timeout
        with httpx.Client(timeout=10) as http:
            while not self.stop.is_set() and time.monotonic() < deadline:
                if self._decided(batch_id):
                    return "decided"
                try:
                    page = decide(rebase(link, self.fleet.url()), decision=decision, client=http)
                except ApprovalError:
                    self._retry("link or consent page")
                    continue
                for _ in range(6):
                    try:
                        answer = http.get(rebase(page.redirect, self.fleet.url()), headers=BROWSER_HEADERS)
                    except httpx.TransportError:
                        self._retry("redirect: transport")
                        continue
                    if answer.status_code == 200:
                        return "delivered"
                    self._retry(f"redirect: HTTP {answer.status_code}")
                    if answer.status_code < 500:  # the page says: open the approval link again
                        break
        return "abandoned"

    def outcomes(self) -> Counter[str]:
        """How the decisions ended (delivered, decided by an earlier delivery, abandoned, not finished)."""
        return Counter(f.result() if f.done() and not f.exception() else "not finished" for f in self.futures.values())

    def close(self) -> None:
        self.stop.set()
        self.pool.shutdown(wait=True, cancel_futures=True)


# --- the bank's side ----------------------------------------------------------------------------------------------


@dataclass
class Holdings:
    """What the bank holds for one batch."""

    consents: list[str] = field(default_factory=list)
    payments: list[str] = field(default_factory=list)
    paid_consents: set[str] = field(default_factory=set)  # consents a file payment was made under
    paid: Decimal = Decimal(0)  # the sum the bank settles, over all its payments
    partial: list[str] = field(default_factory=list)  # payments that do not settle every transfer


def bank_holdings(db: Path, references: dict[str, str]) -> tuple[dict[str, Holdings], int]:
    """Per batch id (found by FileReference in `references`), from the sandbox's SQLite file, read only; and how
    many file consents matched no batch."""
    held = {batch_id: Holdings() for batch_id in references.values()}
    unmatched = 0
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = connection.execute("SELECT kind, id, doc FROM docs WHERE kind IN ('file_consent', 'file_payment')")
        docs = [(kind, key, json.loads(text, parse_float=Decimal)) for kind, key, text in rows.fetchall()]
    finally:
        connection.close()
    batch_of_consent: dict[str, str] = {}
    initiation_of: dict[str, dict[str, Any]] = {}
    for kind, key, doc in docs:
        if kind == "file_consent":
            initiation = doc["data"]["Initiation"]
            batch_id = references.get(str(initiation.get("FileReference")))
            if batch_id is None:
                unmatched += 1
                continue
            batch_of_consent[key] = batch_id
            initiation_of[key] = initiation
            held[batch_id].consents.append(key)
    for kind, key, doc in docs:
        if kind == "file_payment" and doc["consent_id"] in batch_of_consent:
            holdings = held[batch_of_consent[doc["consent_id"]]]
            holdings.payments.append(key)
            holdings.paid_consents.add(str(doc["consent_id"]))
            transactions = initiation_of[doc["consent_id"]]["SupplementaryData"]["data"]["transaction"]
            # The batches pay only accounts the bank's failure rule (docs/sandbox-files.md) lets through, so the
            # bank settles every transfer of the file: `settled` is its count of settling transfers.
            if doc["settled"] == len(transactions):
                holdings.paid += sum(
                    (Decimal(t["transferInfo"]["transactionAmount"]) for t in transactions), Decimal(0)
                )
            else:
                holdings.partial.append(f"{key} settles {doc['settled']} of {len(transactions)}")
    return held, unmatched


def duplicates(held: dict[str, Holdings], replaced: dict[str, str]) -> tuple[int, int, int]:
    """(consents beyond one per batch, file payments beyond one per batch, consents replaced by design). A consent
    the processor recorded as replaced (its side effects moved to `{batch_id}/replaced/{consent_id}`: authorised at
    the bank, its tokens lost with an exchange a kill interrupted, docs/engine.md) under which nothing was paid is
    the engine's designed recovery, not a duplicate; any other consent or payment beyond one is."""
    extra_consents = extra_payments = by_design = 0
    for batch_id, holdings in held.items():
        abandoned = [c for c in holdings.consents if replaced.get(c) == batch_id and c not in holdings.paid_consents]
        by_design += len(abandoned)
        extra_consents += max(0, len(holdings.consents) - len(abandoned) - 1)
        extra_payments += max(0, len(holdings.payments) - 1)
    return extra_consents, extra_payments, by_design


def misreports(order: Sequence[str], completed_payment: str | None, held: Holdings, control_sum: Decimal) -> list[str]:
    """What is wrong with one batch's published statuses, given what the bank holds (empty: nothing)."""
    wrong: list[str] = []
    repeated = sorted(status for status, n in Counter(order).items() if n > 1)
    if repeated:
        wrong.append(f"published twice: {', '.join(repeated)}")
    ranks = [RANKS.get(status, 0) for status in order]
    if any(later <= earlier for earlier, later in itertools.pairwise(ranks)):
        wrong.append("out of order")
    terminal = next((status for status in reversed(order) if status in TERMINAL), None)
    if terminal in ("FAILED", "REJECTED", "EXPIRED") and held.payments:
        wrong.append(f"{terminal} while the bank holds payment {', '.join(held.payments)}")
    if terminal == "COMPLETED":
        if not held.payments:
            wrong.append("COMPLETED with no payment at the bank")
        elif completed_payment not in held.payments:
            wrong.append(f"COMPLETED names {completed_payment}, the bank holds {', '.join(held.payments)}")
        if held.partial:
            wrong.append(f"COMPLETED, the bank does not settle every transfer: {', '.join(held.partial)}")
        elif held.paid != control_sum:
            wrong.append(f"COMPLETED, the bank settles {held.paid} of control sum {control_sum}")
    return wrong


def log_errors(directory: Path) -> Counter[str]:
    """Error lines of every processor log (killed instances' too) by event, librdkafka's connection lines aside
    (the broker restart makes them on purpose)."""
    found: Counter[str] = Counter()
    for path in directory.glob("processor-*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            event = str(entry.get("event", ""))
            if entry.get("level") in ("error", "critical") and "[thrd:" not in event:
                found[event[:80]] += 1
    return found


def read_statuses(settings: KafkaSettings, timeout: float = 60.0) -> StatusLog:
    """Every record of the run's status topic, from the beginning of each partition to its end now, per batch id
    in log order, each event id once (a second copy of an event is a redelivery, counted in `resent`)."""
    topic = settings.topic(STATUS_TOPIC)
    consumer = new_consumer(settings.config(**{"group.id": f"{settings.group_id}-judge", "enable.auto.commit": False}))
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=timeout).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        log, seen = StatusLog(), set()
        deadline = time.monotonic() + timeout
        positions = dict.fromkeys(partitions, 0)
        while any(positions[p] < ends[p] for p in partitions) and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1.0):
                if message.error() is not None or message.value() is None:
                    continue
                positions[message.partition() or 0] = (message.offset() or 0) + 1
                record = schemas.decode(STATUS_TOPIC, message.value() or b"")
                if record["event_id"] in seen:
                    log.resent += 1
                    continue
                seen.add(record["event_id"])
                log.setdefault(str(record["batch_id"]), []).append(record)
        return log
    finally:
        consumer.close()


class StatusLog(dict[str, list[dict[str, Any]]]):
    """Status records per batch id, plus how many redelivered copies were skipped."""

    resent: int = 0


# --- the run ----------------------------------------------------------------------------------------------------


@dataclass
class Plan:
    """What the seed decided: the decisions, the kill moments, the broker restart moment (in status events read)."""

    decisions: dict[str, str]
    kill_at: list[int]
    broker_at: int

    @classmethod
    def draw(cls, rng: random.Random, batch_ids: Sequence[str], kills: int, reject_share: float) -> Plan:
        decisions = {b: "reject" if rng.random() < reject_share else "approve" for b in batch_ids}
        expected = sum(2 if d == "reject" else 4 for d in decisions.values())  # status events if all goes well
        window = range(max(1, expected // 10), max(2, expected * 9 // 10))
        kill_at = sorted(rng.choices(window, k=kills))
        return cls(decisions, kill_at, expected // 2)


def chaos(args: argparse.Namespace, kafka: LocalKafka, directory: Path) -> int:
    """One chaos run on `kafka`; prints the figures, returns the exit status."""
    rng = random.Random(args.seed)
    bench = prepare(directory, kafka.bootstrap, args.instances, 0, args.file_payment_delay,
                    rules=fault_plan(args), seed=args.seed)  # fmt: skip
    bank_db = directory / "bank.sqlite3"
    bench.sandbox_args = ("--admin", "--db", str(bank_db))
    settings = fresh_kafka(kafka.bootstrap, args.partitions)
    batch_ids = [f"chaos-s{args.seed}-{i:04d}" for i in range(args.batches)]
    records = {b: batch_record(b, args.transactions, i) for i, b in enumerate(batch_ids)}
    references = {str(r["file_reference"]): b for b, r in records.items()}
    control = {b: sum((t["amount"] for t in r["transactions"]), Decimal(0)) for b, r in records.items()}
    plan = Plan.draw(rng, batch_ids, args.kills, args.reject_share)
    children: list[Child] = []
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(fresh_store("postgresql", args.pg_url, directory))
        config = directory / "dispersion.toml"
        write_config(config, integration=bench.integration, store=store, public_url=bench.api_url(0),
                     kafka=settings, engine=CHAOS_ENGINE)  # fmt: skip
        stack.callback(stop_all, children)  # before the database is dropped
        sandbox = start_sandbox(bench, directory)
        children.append(sandbox)
        fleet = Fleet(bench, config, directory, children)
        for index in range(args.instances):  # one at a time: the first one creates the store's tables
            fleet.start(index)
        eventually(
            lambda: group_members(settings) == args.instances, what=f"a stable group of {args.instances}", timeout=90
        )
        keep = {"authorization_url", "file_payment_id"}
        watcher = stack.enter_context(StatusWatcher(settings, keep=lambda r: {k: r.get(k) for k in keep}))
        approvals = Approvals(fleet, watcher, args.approvers, args.per_batch_timeout)
        stack.callback(approvals.close)
        say(f"producing {args.batches} batches; kills at {plan.kill_at} events, broker restart at {plan.broker_at}")
        started, started_wall = time.monotonic(), time.time()
        produce(settings, [(b, schemas.encode(BATCHES_TOPIC, records[b])) for b in batch_ids])
        broker_down = _drive(args, rng, plan, fleet, watcher, approvals, kafka, started)
        elapsed = time.monotonic() - started
        approvals.close()
        for index in fleet.alive():
            fleet.processors[index].stop()
        time.sleep(2.0)  # late status events, if any, arrive now
        after = _aftermath(settings, store, watcher, batch_ids, started_wall, bench.sandbox_url)
        held, unmatched = bank_holdings(bank_db, references)
    log, orders, payment_of, ended = after.log, after.orders, after.payment_of, after.ended
    wrong = {b: misreports(orders[b], payment_of[b], held[b], control[b]) for b in batch_ids}
    wrong = {b: w for b, w in wrong.items() if w}
    extra_consents, extra_payments, by_design = duplicates(held, after.replaced)
    terminal = Counter(next((s for s in reversed(o) if s in TERMINAL), "not terminal") for o in orders.values())

    print(f"\n=== chaos run: seed {args.seed}, {args.instances} processors, {args.batches} batches x "
          f"{args.transactions} transactions ===")  # fmt: skip
    print(f"batches in:                  {args.batches} ({Counter(plan.decisions.values())['reject']} to reject)")
    done = sum(n for s, n in terminal.items() if s != "not terminal")
    shown = ", ".join(f"{s} {n}" for s, n in sorted(terminal.items()))
    print(f"batches terminal:            {done} ({shown})")
    print(f"duplicate bank resources:    {extra_consents + extra_payments} (consents beyond one per batch "
          f"{extra_consents}, file payments beyond one per batch {extra_payments})")  # fmt: skip
    print(f"consents replaced by design: {by_design} (authorised, tokens lost with a killed exchange, never paid)")
    print(f"misreported outcomes:        {len(wrong)}")
    print(f"time taken:                  {elapsed:.1f} s (produce -> last batch terminal or --timeout)")
    slowest = sorted(ended, key=lambda b: -ended[b])[:3]
    print(f"slowest batches:             {', '.join(f'{b} {ended[b]:.1f} s {orders[b]}' for b in slowest)}")
    print(f"processor SIGKILLs:          {len(fleet.kills)} ({'; '.join(fleet.kills) or 'none'}), "
          f"restarts {fleet.restarts}")  # fmt: skip
    print(f"broker restart:              {broker_down}")
    print(f"processors exited by themselves: {len(fleet.exits)} ({'; '.join(fleet.exits) or 'none'})")
    errors = log_errors(directory)
    print(f"processor log errors:        {sum(errors.values())} {dict(errors.most_common(5))}")
    print(f"bank: {', '.join(f'{k} {v}' for k, v in after.counts.items() if v)}; consents of no batch {unmatched}")
    print(f"store: flows {dict(sorted(after.flows.items()))}; outbox events not published {after.unpublished}")
    print(f"status topic: {sum(len(v) for v in log.values())} events (redeliveries of an event id: {log.resent})")
    print(f"bank faults fired:           {', '.join(f'{k} {v}' for k, v in after.faults.items())}")
    print(f"approvals:                   {dict(approvals.outcomes())}; retries {dict(approvals.retries)}")
    print(f"load average:                {load_averages()}")
    _print_problems(wrong, held, orders, plan, after.replaced)
    sys.stdout.flush()
    return 0 if not wrong and extra_consents + extra_payments == 0 else 1


@dataclass
class Aftermath:
    """What a chaos run left behind, read once the processors are stopped."""

    log: StatusLog  # the whole status topic, read anew: the judgement does not rest on the live reader
    orders: dict[str, list[str]]  # the statuses of each batch in log order
    payment_of: dict[str, str | None]  # the file payment id its COMPLETED named
    flows: Counter[str]  # the store's flows by state
    unpublished: int  # outbox events not published (-1: not counted)
    ended: dict[str, float]  # seconds from the first produce to each terminal batch's last terminal status
    counts: dict[str, Any]  # the sandbox bank's counts of calls and resources
    faults: Counter[str]  # the bank faults that fired, by kind
    replaced: dict[str, str]  # consents the processor recorded as replaced: consent id -> batch id


def _aftermath(
    settings: KafkaSettings,
    store: str,
    watcher: StatusWatcher,
    batch_ids: Sequence[str],
    started_wall: float,
    sandbox_url: str,
) -> Aftermath:
    log = read_statuses(settings)
    orders = {b: [str(r["status"]) for r in log.get(b, [])] for b in batch_ids}
    payment_of = {b: next((str(r.get("file_payment_id")) for r in log.get(b, []) if r["status"] == "COMPLETED"),
                          None) for b in batch_ids}  # fmt: skip
    with psycopg.connect(store) as conn:
        flows = Counter({str(k): int(n) for k, n in conn.execute("SELECT state, COUNT(*) FROM flows GROUP BY 1")})
        row = conn.execute("SELECT COUNT(*) FROM outbox WHERE published_at IS NULL").fetchone()
        unpublished = int(row[0]) if row else -1
        scopes = conn.execute(
            "SELECT scope_id FROM side_effects WHERE operation = %s AND scope_id LIKE %s",
            (Operation.CREATE_CONSENT.value, "%/replaced/%"),
        ).fetchall()
    replaced = {scope.rsplit("/replaced/", 1)[1]: scope.split("/replaced/", 1)[0] for (scope,) in scopes}
    with watcher.changed:
        ended = {
            b: max(seen.consumed_at for status, seen in watcher.seen[b].items() if status in TERMINAL) - started_wall
            for b in batch_ids
            if any(status in TERMINAL for status in watcher.seen.get(b, {}))
        }
    counts = httpx.get(f"{sandbox_url}/__sandbox/counts", timeout=10).json()
    fired = httpx.get(f"{sandbox_url}/__sandbox/faults", timeout=10).json()
    faults = Counter[str]()
    for rule in fired.get("rules", []):
        faults[f"{rule.get('fault')} {rule.get('status', '')}".strip()] += int(rule.get("fired", 0))
    return Aftermath(log, orders, payment_of, flows, unpublished, ended, counts, faults, replaced)


def _print_problems(
    wrong: dict[str, list[str]],
    held: dict[str, Holdings],
    orders: dict[str, list[str]],
    plan: Plan,
    replaced: dict[str, str],
) -> None:
    for batch_id, problems in sorted(wrong.items()):
        print(f"MISREPORTED {batch_id}: {'; '.join(problems)}; statuses {orders[batch_id]}")
    for batch_id, h in sorted(held.items()):
        if len(h.consents) > 1 or len(h.payments) > 1:
            kind = "DUPLICATE" if sum(duplicates({batch_id: h}, replaced)[:2]) else "REPLACED"
            print(f"{kind} {batch_id}: consents {h.consents}, payments {h.payments}; statuses {orders[batch_id]}; "
                  f"recorded replaced {sorted(c for c in h.consents if replaced.get(c) == batch_id)}")  # fmt: skip
    for batch_id in (b for b, o in orders.items() if not any(s in TERMINAL for s in o)):
        print(f"NOT TERMINAL {batch_id}: statuses {orders[batch_id]}, decision {plan.decisions[batch_id]}, "
              f"bank consents {held[batch_id].consents}, payments {held[batch_id].payments}")  # fmt: skip


def _drive(
    args: argparse.Namespace,
    rng: random.Random,
    plan: Plan,
    fleet: Fleet,
    watcher: StatusWatcher,
    approvals: Approvals,
    kafka: LocalKafka,
    started: float,
) -> str:
    """Approve, kill, restart and restart the broker until every batch is terminal or time is up; how the broker
    restart went."""
    kill_at = list(plan.kill_at)
    restarts: dict[int, float] = {}  # instance index -> when to start it again
    broker = "not reached"
    broker_back_at: float | None = None  # while the broker is down: when to start it again
    stopped = 0.0
    while time.monotonic() - started < args.timeout:
        with watcher.changed:
            events = sum(watcher.counts.values())
            links = {b: s["AUTHORIZATION_REQUIRED"].record["authorization_url"] for b, s in watcher.seen.items()
                     if "AUTHORIZATION_REQUIRED" in s}  # fmt: skip
            finished = sum(1 for s in watcher.seen.values() if any(t in s for t in TERMINAL))
        for batch_id, link in links.items():
            if batch_id in plan.decisions:
                approvals.submit(batch_id, str(link), plan.decisions[batch_id])
        if finished >= len(plan.decisions) and not restarts and broker_back_at is None:
            break
        for index, child in sorted(fleet.processors.items()):
            code = child.process.poll()
            if code is not None and index not in restarts:
                fleet.exits.append(f"bench-{index + 1} exit {code} at {events} events")
                say(f"bench-{index + 1} (pid {child.pid}) exited by itself ({code}); restarting it")
                restarts[index] = time.monotonic() + 1.0
        alive = fleet.alive()
        if kill_at and events >= kill_at[0] and len(alive) >= 2:
            kill_at.pop(0)
            victim = rng.choice(alive)
            fleet.kill(victim, events)
            restarts[victim] = time.monotonic() + rng.uniform(0.5, 3.0)
        if broker == "not reached" and (events >= plan.broker_at or finished * 2 >= len(plan.decisions)):
            say(f"stopping the broker at {events} status events")
            stopped = time.monotonic()
            kafka.stop()
            broker_back_at = stopped + rng.uniform(2.0, 5.0)
            broker = f"at {events} status events"
        if broker_back_at is not None and time.monotonic() >= broker_back_at:
            broker_back_at = None
            kafka.start()  # blocks until the broker answers; processors and approvers keep working meanwhile
            broker += f", down {time.monotonic() - stopped:.1f} s"
            say(f"broker back: {broker}")
        for index, due in sorted(restarts.items()):
            if time.monotonic() >= due:
                del restarts[index]
                fleet.start(index)
                fleet.restarts += 1
                say(f"restarted bench-{index + 1} (pid {fleet.processors[index].pid})")
        time.sleep(0.2)
    else:
        say(f"--timeout {args.timeout:.0f} s reached")
        if broker_back_at is not None:
            kafka.start()
            broker += f", down {time.monotonic() - stopped:.1f} s (until --timeout)"
    return broker


def main(argv: list[str] | None = None) -> int:
    """Run the chaos run and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--transactions", type=int, default=3, help="transfers per batch")
    parser.add_argument("--instances", type=int, choices=(2, 3), default=3, help="processor processes")
    parser.add_argument("--seed", type=int, default=1, help="decides faults, rejections, kill moments and victims")
    parser.add_argument("--kills", type=int, help="processor SIGKILLs (default: one per 10 batches, at least 2)")
    parser.add_argument("--reject-share", type=float, default=0.15, help="share of batches the approver rejects")
    parser.add_argument("--fault-rate", type=float, default=0.04, help="bank calls answered 500/503/429 or dropped")
    parser.add_argument("--commit-fail-rate", type=float, default=0.1,
                        help="creating calls (A1, A2, A3) committed at the bank, then answered 500")  # fmt: skip
    parser.add_argument("--latency-ms", type=float, default=10.0, help="added per bank call (plus 0-2x as jitter)")
    parser.add_argument("--file-payment-delay", type=float, default=1.0, help="sandbox: seconds InitiationPending")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--approvers", type=int, default=4, help="approvals in flight at once")
    parser.add_argument("--per-batch-timeout", type=float, default=120.0, help="seconds an approver keeps trying")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds from produce until the run stops")
    parser.add_argument("--pg-url", default=os.environ.get("DISPERSION_BENCH_PG_URL", DEFAULT_PG_URL),
                        help="PostgreSQL server (a database is created and dropped on it)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the working folder (logs, bank file)")
    args = parser.parse_args(argv)
    if args.kills is None:
        args.kills = max(2, args.batches // 10)
    if args.batches < 1 or args.kills < 0 or not 0 <= args.reject_share <= 1 or not 1 <= args.transactions <= 900:
        # batch_record's account numbers end in 9901-9903 (the bank's failing accounts) only from the 901st transfer
        parser.error("--batches and --transactions (1-900) at least 1, --kills at least 0, --reject-share in 0..1")
    signal.signal(signal.SIGTERM, _interrupt)
    # The status reader's librdkafka lines ("Connect ... failed") while the broker is down on purpose.
    librdkafka_logger("bench-status").setLevel(logging.CRITICAL)
    directory = Path(tempfile.mkdtemp(prefix="dispersion-chaos-"))
    print(f"chaos run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load average "
          f"{load_averages()}; options {' '.join(sys.argv[1:] if argv is None else argv) or '(defaults)'}")  # fmt: skip
    kafka = LocalKafka(directory / "kafka", say=say)
    try:
        try:
            kafka.start()  # from the main thread: the broker dies with this process
        except KafkaLocalError as exc:
            print(f"no local Kafka broker: {exc}", file=sys.stderr)
            return NO_BROKER_EXIT
        return chaos(args, kafka, directory)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: everything started is stopped on the way out
        say(f"interrupted ({exc or 'Ctrl-C'}); stopping what was started")
        return 130
    finally:
        kafka.stop()
        if args.keep:
            say(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
