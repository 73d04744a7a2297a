"""Graceful shutdown under load: two `dispersion processor` processes in one consumer group on one PostgreSQL
store, the real sandbox (file payments stay InitiationPending a while, bank calls are slowed down) and a real
broker. While batches are between consent and COMPLETED and the victim's worker holds leased flows, the victim
gets SIGTERM (docs/operations.md, "Shutdown"): it must stop taking messages, finish or hand back its in-flight
steps, commit, leave the group and exit 0; the survivor takes over its partitions and its work. Every batch must
end COMPLETED exactly once (raw events, before any deduplication), paid exactly once at the bank, with its events
in order; batches produced after the SIGTERM are consumed by the survivor."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from kafka_layer_support import committed
from processor_support import (
    BATCHES_TOPIC,
    STATUS_TOPIC,
    AlreadyAuthorizedError,
    Approver,
    Deployment,
    DeploymentFactory,
    Event,
    ProcessorProcess,
    TopicLog,
    count_rows,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    log_events,
    payroll_batch,
    unique_id,
)

from processor.devtools.processes import eventually

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(300)]

FILE_FLOW = ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
PARTITIONS = 6
FIRST_WAVE = 28  # produced at the start
SECOND_WAVE = 6  # produced just before the SIGTERM (the victim's consumer may be reading them)
THIRD_WAVE = 6  # produced once the victim has exited (the survivor alone consumes them)
TOTAL = FIRST_WAVE + SECOND_WAVE + THIRD_WAVE
GRACE = 10  # the harness starts every instance with --grace 10
# Worst case documented by the shutdown order: the consumer's join, the worker's grace, the relay's flush.
EXIT_DEADLINE = 3 * GRACE
PAYMENT_STATES = ("AUTHORIZED", "INITIATED")
SLOW_CREATE = 18.0  # seconds: far above the grace, so the victim must cancel such a step and hand it over
# Slow bank calls, so that steps are genuinely running (leases held) when the signal arrives. A file payment's
# creation is committed at the bank and answered late: after 1 s, or for about half of them after 18 s, longer
# than the grace period (the step the victim must cancel, and the one most at risk of paying twice); reading a
# pending payment takes 0.8-1.6 s (the victim is in the middle of polling steps it should finish).
FAULTS = {
    "seed": 7,
    "rules": [
        {"operation": "file-payment-consents.create", "fault": "latency", "latency_ms": 150, "jitter_ms": 200},
        {"operation": "file-payments.create", "fault": "latency", "latency_ms": 1000, "phase": "after"},
        {
            "operation": "file-payments.create",
            "fault": "latency",
            "latency_ms": (SLOW_CREATE - 1) * 1000,
            "phase": "after",
            "probability": 0.5,
        },
        {"operation": "file-payments.get", "fault": "latency", "latency_ms": 800, "jitter_ms": 800},
    ],
}


class Approvers:
    """Approvers working in parallel (one browser per thread). Each approval opens the link on one running
    instance and delivers the bank's redirect to the next one (round robin), the victim included while it is
    still up and shutting down, as a load balancer would until its health check fails. A connection refused by
    an instance that just went away is tried on another one; any other refusal is recorded and fails the test."""

    def __init__(self, deployment: Deployment, workers: int = 4) -> None:
        self.deployment = deployment
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="approver")
        self.local = threading.local()
        self.turn = itertools.count()
        self.lock = threading.Lock()
        self.delivered_by: Counter[str] = Counter()  # callbacks answered 200, per instance
        self.delivered_at: list[tuple[float, str]] = []  # (monotonic time, instance) of every 200
        self.refused: list[str] = []  # callbacks answered with anything but 200
        self.transport_retries = 0
        self.futures: dict[str, Future[None]] = {}

    def _browser(self) -> Approver:
        browser = getattr(self.local, "browser", None)
        if browser is None:
            with self.lock:
                browser = self.local.browser = self.deployment.approver()
        return browser

    def _next(self) -> ProcessorProcess:
        alive = self.deployment.alive()
        assert alive, "no instance left"
        return alive[next(self.turn) % len(alive)]

    def submit(self, batch_id: str, link: str) -> None:
        if batch_id not in self.futures:
            self.futures[batch_id] = self.pool.submit(self._approve, batch_id, link)

    def _approve(self, batch_id: str, link: str) -> None:
        browser = self._browser()
        deadline = time.monotonic() + 60
        last = "nothing tried"
        while time.monotonic() < deadline:
            opener = self._next()
            try:
                decision = browser.decide(link, via=opener.url)
            except AlreadyAuthorizedError:
                return
            except httpx.TransportError as exc:  # the instance closed its port meanwhile: another one
                last = f"approval link via {opener.name}: {exc!r}"
                with self.lock:
                    self.transport_retries += 1
                time.sleep(0.2)
                continue
            target = self._next()
            try:
                answer = browser.deliver(decision, via=target.url)
            except httpx.ConnectError as exc:  # refused before anything was sent: the code is unspent
                last = f"callback via {target.name}: {exc!r}"
                with self.lock:
                    self.transport_retries += 1
                target = self._next()
                answer = browser.deliver(decision, via=target.url)
            with self.lock:
                if answer.status_code == 200:
                    self.delivered_by[target.name] += 1
                    self.delivered_at.append((time.monotonic(), target.name))
                else:
                    self.refused.append(f"{batch_id} via {target.name}: {answer.status_code} {answer.text[-300:]}")
            return
        raise AssertionError(f"could not approve {batch_id}; last: {last}")

    def check(self) -> None:
        """Raise what a finished approval raised."""
        for future in list(self.futures.values()):
            if future.done():
                future.result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def leased_by(deployment: Deployment, instance: ProcessorProcess) -> dict[str, int]:
    """What an instance's worker and relay hold in the store now (lease owners are `worker-<instance>-…` and
    `relay-<instance>-…`): flows, of which in a payment step, polling a pending payment (INITIATED), creating a
    payment that the bank answers slowly (a create_payment call pending for 2-6 s: one of the 18 s ones, which
    will still be running when the grace period ends), and outbox keys."""
    url, worker = deployment.store_url, f"'worker-{instance.name}-%'"
    states = ", ".join(f"'{s}'" for s in PAYMENT_STATES)
    return {
        "flows_leased": count_rows(url, f"SELECT COUNT(*) FROM flows WHERE lease_owner LIKE {worker}"),
        "payment_steps_leased": count_rows(
            url, f"SELECT COUNT(*) FROM flows WHERE lease_owner LIKE {worker} AND state IN ({states})"
        ),
        "polls_leased": count_rows(
            url, f"SELECT COUNT(*) FROM flows WHERE lease_owner LIKE {worker} AND state = 'INITIATED'"
        ),
        "slow_creates_leased": count_rows(
            url,
            "SELECT COUNT(*) FROM flows f JOIN side_effects s"
            " ON s.scope_id = f.batch_id AND s.operation = 'create_payment'"
            f" WHERE f.lease_owner LIKE {worker} AND f.state = 'AUTHORIZED' AND s.status = 'PENDING'"
            " AND s.updated_at BETWEEN now() - interval '6 seconds' AND now() - interval '2 seconds'",
        ),
        "outbox_keys_leased": count_rows(
            url, f"SELECT COUNT(*) FROM outbox_keys WHERE lease_owner LIKE 'relay-{instance.name}-%'"
        ),
    }


def owned_partitions(instance: ProcessorProcess, topic: str) -> set[int]:
    """The partitions of `topic` the instance's consumer owns, replayed from its (incremental, cooperative-sticky)
    assignment log lines."""
    owned: set[int] = set()
    prefix = f"{topic}["
    for entry in log_events(instance):
        names = [p for p in entry.get("partitions", []) if isinstance(p, str) and p.startswith(prefix)]
        numbers = {int(p[len(prefix) : -1]) for p in names}
        if entry.get("event") == "partitions_assigned":
            owned |= numbers
        elif entry.get("event") in ("partitions_revoked", "partitions_lost"):
            owned -= numbers
    return owned


def in_payment(log: TopicLog, batch_ids: list[str]) -> list[str]:
    """Batches authorised and not yet COMPLETED, as the status topic shows them."""
    authorized, completed = log.keys_with("AUTHORIZED"), log.keys_with("COMPLETED")
    return [b for b in batch_ids if b in authorized and b not in completed]


@dataclass
class SigtermRun:
    """The state of one run: the deployment, the batches produced, the approvers and what was seen on the way."""

    deployment: Deployment
    statuses: TopicLog
    producer: Any
    approvers: Approvers
    batches_topic: str
    started: float = field(default_factory=time.monotonic)
    batch_ids: list[str] = field(default_factory=list)
    at_signal: dict[str, Any] = field(default_factory=dict)
    chosen: list[ProcessorProcess] = field(default_factory=list)
    second: list[str] = field(default_factory=list)
    third: list[str] = field(default_factory=list)
    victim_owned: set[int] = field(default_factory=set)
    signalled: float = 0.0
    exit_seconds: float = 0.0
    elapsed: float = 0.0
    left_behind: dict[str, int] = field(default_factory=dict)
    resumed: int = 0

    @property
    def victim(self) -> ProcessorProcess:
        return self.chosen[0]

    @property
    def survivor(self) -> ProcessorProcess:
        return next(p for p in self.deployment.processors.values() if p is not self.victim)

    def produce(self, count: int, tag: str) -> list[str]:
        two = [("200100300", "100.10"), ("200100301", "200.20")]
        ids = [unique_id(f"{tag}{i:02d}") for i in range(count)]
        for batch_id in ids:
            self.producer.send(BATCHES_TOPIC, batch_id, payroll_batch(batch_id, two), flush=False)
        self.producer.flush()
        self.batch_ids.extend(ids)
        return ids

    def each(self, events: list[Event]) -> None:
        for event in events:
            if event.status == "AUTHORIZATION_REQUIRED":
                self.approvers.submit(event.key, str(event.record["authorization_url"]))
        self.approvers.check()

    def victim_busy(self, log: TopicLog) -> bool:
        """The moment to strike, and at whom: several batches between AUTHORIZED and COMPLETED, and an instance
        that consumes `payroll.batches` (the sticky assignor often gives all of its partitions to one member and
        only VRP partitions to the other) whose worker is in the middle of payment steps: polling a pending
        payment and waiting for a slow payment creation."""
        if len(in_payment(log, self.batch_ids)) < 4:
            return False
        for instance in self.deployment.processors.values():
            if not owned_partitions(instance, self.batches_topic):
                continue
            held = leased_by(self.deployment, instance)
            if held["slow_creates_leased"] >= 1 and held["polls_leased"] >= 1:
                self.at_signal.update(held)
                self.chosen.append(instance)
                return True
        return False


def start_two_instances(kafka_bootstrap: str, deployment_factory: DeploymentFactory) -> SigtermRun:
    """Two dynamic members on a slowed-down sandbox, both ready; nothing produced yet."""
    deployment = deployment_factory(
        kafka_bootstrap,
        instances=2,
        partitions=PARTITIONS,
        # A stop for good (a scale-down): only a dynamic member leaves the group on close, so its partitions move
        # at once; a static one keeps them for session.timeout.ms, waiting for its restart (test_static_membership).
        kafka={"static_membership": False},
        sandbox_args=("--file-payment-delay", "3", "--vrp-delay", "0.5"),
    )
    deployment.admin.put(f"{deployment.sandbox.base_url}/__sandbox/faults", json=FAULTS).raise_for_status()
    for index in range(2):
        deployment.start(index, wait=False)
    for instance in deployment.processors.values():
        instance.wait_ready()
    return SigtermRun(
        deployment=deployment,
        statuses=deployment.topic_log(STATUS_TOPIC),
        producer=deployment.producer(),
        approvers=Approvers(deployment),
        batches_topic=deployment.topics[BATCHES_TOPIC],
    )


def strike_and_drain(run: SigtermRun) -> None:
    """Both instances pay until the victim genuinely holds work; SIGTERM; the victim exits on its own; the survivor
    takes every partition and consumes a third wave; every batch completes."""
    statuses, each = run.statuses, run.each
    # 1. Both instances consume and pay; wait until the victim genuinely holds work.
    statuses.wait_until(run.victim_busy, timeout=60, what="a consumer in the middle of payment steps", each=each)
    victim, survivor = run.victim, run.survivor
    run.second = run.produce(SECOND_WAVE, "T2-")
    run.at_signal["in_payment"] = len(in_payment(statuses, run.batch_ids))
    run.at_signal["completed"] = len(statuses.keys_with("COMPLETED"))
    run.victim_owned = owned_partitions(victim, run.batches_topic)
    run.signalled = time.monotonic()
    victim.process.terminate()  # SIGTERM

    # 2. The victim drains and exits on its own (approvals and payments go on meanwhile).
    statuses.wait_until(
        lambda _log: not victim.alive, timeout=EXIT_DEADLINE, what="the victim's exit after SIGTERM", each=each
    )
    run.exit_seconds = time.monotonic() - run.signalled
    run.left_behind = leased_by(run.deployment, victim)

    # 3. The survivor owns every partition and consumes what is produced from now on.
    def owns_all() -> bool:
        if owned_partitions(survivor, run.batches_topic) == set(range(PARTITIONS)):
            return True
        statuses.poll(0.3)
        each([])
        return False

    eventually(owns_all, what=f"the survivor owning all {PARTITIONS} partitions", timeout=30, interval=0)
    run.third = run.produce(THIRD_WAVE, "T3-")

    def all_completed(log: TopicLog) -> bool:
        return set(run.batch_ids) <= log.keys_with("COMPLETED")

    statuses.wait_until(all_completed, timeout=120, what=f"{TOTAL} batches COMPLETED", each=each)
    run.approvers.check()


def check_the_victim_stopped_gracefully(run: SigtermRun) -> list[dict[str, Any]]:
    """Exit 0, a graceful stop in its log, nothing of the store still leased to it; every callback answered 200."""
    victim = run.victim
    assert victim.process.returncode == 0, run.deployment.logs()
    victim_log = log_events(victim)
    names = [e.get("event") for e in victim_log]
    assert "processor_stopping" in names and "processor_stopped" in names, victim.log()[-3000:]
    assert "processor_stopped_after_failure" not in names
    assert "consumer_stopped" in names and "outbox_relay_stopped" in names, victim.log()[-3000:]
    assert set(run.left_behind.values()) == {0}, run.left_behind
    errors = [e for e in victim_log if e.get("level") in ("error", "critical")]
    assert errors == [], errors[:5]

    # Every callback answered 200: a redirect delivered to the victim while it shut down was not lost.
    assert run.approvers.refused == [], run.approvers.refused
    assert len(run.approvers.futures) == TOTAL
    return victim_log


def check_every_batch_once_in_order(run: SigtermRun) -> None:
    """Exactly one event per status in the raw log (no redelivery at all), in order; one consent and one file
    payment per batch at the bank."""
    statuses, batch_ids = run.statuses, run.batch_ids
    assert len(batch_ids) == len(set(batch_ids)) == TOTAL
    raw = {b: [e.status for e in statuses.by_key(b)] for b in batch_ids}
    wrong = {b: seq for b, seq in raw.items() if seq != FILE_FLOW}
    assert wrong == {}, f"{len(wrong)} batches with other raw event sequences: {wrong}"
    completed_raw = Counter(e.key for e in statuses.events if e.status == "COMPLETED")
    assert all(completed_raw[b] == 1 for b in batch_ids), completed_raw
    assert statuses.raw_duplicates() == 0
    unknown = {e.key for e in statuses.events} - set(batch_ids)
    assert unknown == set(), unknown
    for batch_id in batch_ids:  # one consent throughout, and the payment named once initiated
        events = statuses.by_key(batch_id)
        assert len({e.record["consent_id"] for e in events}) == 1, batch_id
        assert events[-1].record["file_payment_id"] == events[-2].record["file_payment_id"] is not None

    # The bank: one consent and one file payment per batch.
    counts = run.deployment.bank_counts()
    assert (counts["file_consent"], counts["file_payment"]) == (TOTAL, TOTAL), counts


def check_store_group_and_survivor(run: SigtermRun) -> None:
    """Everything paid, published, consumed and committed; the survivor consumed the third wave and stops cleanly."""
    url, survivor = run.deployment.store_url, run.survivor
    assert count_rows(url, "SELECT COUNT(*) FROM flows") == TOTAL
    assert count_rows(url, "SELECT COUNT(*) FROM flows WHERE state = 'COMPLETED'") == TOTAL
    assert count_rows(url, "SELECT COUNT(*) FROM outbox WHERE published_at IS NULL") == 0
    creates = "SELECT COUNT(*) FROM side_effects WHERE operation = 'create_payment'"
    assert count_rows(url, f"{creates} AND status = 'DONE'") == TOTAL
    # The victim's slow payment creations were cancelled at the end of the grace period and resumed elsewhere
    # with the same idempotency key (attempts > 1), which found the payment the bank had made instead of paying
    # again (the bank's count above).
    run.resumed = count_rows(url, f"{creates} AND attempts > 1")
    assert run.resumed >= run.at_signal["slow_creates_leased"] >= 1, (run.resumed, run.at_signal)
    assert "resuming a call whose outcome is unknown" in survivor.log()
    deployment = run.deployment
    offsets = committed(deployment.bootstrap, deployment.group_id, run.batches_topic, partitions=PARTITIONS)
    assert sum(offsets.values()) == TOTAL, offsets

    # The survivor consumed the third wave (it is the only member left) and stops cleanly too.
    assert survivor.alive
    assert all(run.statuses.find(b, "AUTHORIZATION_REQUIRED") is not None for b in run.third)
    assert survivor.terminate() == 0, survivor.log()[-3000:]


def report(run: SigtermRun, victim_log: list[dict[str, Any]], record_property: Callable[[str, object], None]) -> None:
    """The run's figures as test properties and on stdout."""
    approvers, victim = run.approvers, run.victim
    figures = {
        "elapsed_s": round(run.elapsed, 1),
        "victim_exit_s": round(run.exit_seconds, 1),
        "held_by_victim_at_sigterm": run.at_signal,
        "victim": victim.name,
        "victim_partitions_at_sigterm": sorted(run.victim_owned),
        "victim_messages_handled": next(
            (e.get("handled") for e in victim_log if e.get("event") == "consumer_stopped"), None
        ),
        "second_wave": len(run.second),
        "creates_resumed": run.resumed,
        "callbacks_per_instance": dict(approvers.delivered_by),
        "victim_callbacks_after_sigterm": sum(
            1 for t, n in approvers.delivered_at if n == victim.name and t > run.signalled
        ),
        "transport_retries": approvers.transport_retries,
    }
    for name, value in figures.items():
        record_property(name, value)
    print(f"\nsigterm: {figures}")


def test_a_sigterm_under_load_hands_every_batch_over_and_pays_each_exactly_once(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory, record_property: Callable[[str, object], None]
) -> None:
    run = start_two_instances(kafka_bootstrap, deployment_factory)
    run.produce(FIRST_WAVE, "T1-")
    try:
        strike_and_drain(run)
    finally:
        run.approvers.close()
    run.statuses.poll(2.0)  # a late duplicate would show up now
    run.elapsed = time.monotonic() - run.started

    victim_log = check_the_victim_stopped_gracefully(run)
    check_every_batch_once_in_order(run)
    check_store_group_and_survivor(run)
    report(run, victim_log, record_property)
