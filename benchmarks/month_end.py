"""Month-end benchmark: N payroll batches through real processor instances, a real broker and the sandbox bank.

For each instance count asked for (`--instances 1 2`, one after the other), on fresh topics, a fresh consumer
group and a fresh store (a new PostgreSQL database by default, or a SQLite file with `--store sqlite`):

1. starts the sandbox bank (`dispersion sandbox`, in-memory) with a fault plan adding `--latency-ms` (20 ms) to
   every bank operation, and the processor instances (`dispersion processor`, one process each, own HTTP port);
2. produces N `payroll.batches` events (M transactions each) and follows `dispersion.status` with its own
   consumer until the N-th `AUTHORIZATION_REQUIRED`: batches/s = N / (N-th AUTHORIZATION_REQUIRED consumed -
   first produce);
3. approves every batch like a browser (approval link -> the bank's consent page -> Approve -> the bank's
   redirect delivered to our callback API), `--approvers` at a time, batch i on instance i mod n (link and
   redirect both), and measures redirect delivered (the start of the callback request) -> `INITIATED`, both
   by the time the benchmark consumed the event and by the event's `occurred_at` (same machine clock);
4. waits for every `COMPLETED` (or `FAILED`) and prints the time, peak RSS (VmHWM) and CPU seconds of every
   process, the processors' mean bank call time per operation and their garbage collections (from `/metrics`).

Then everything it started is stopped (by pid) and removed: processes, topics, database, temporary files; the
broker too when the benchmark started it (`dispersion dev kafka`'s LocalKafka; `--bootstrap` or
`KAFKA_BOOTSTRAP_SERVERS` use an existing one).

    python benchmarks/month_end.py [--batches 1000] [--transactions 100] [--instances 1 2]
                                   [--store postgresql|sqlite] [--latency-ms 20] [--approvers 16]

Smoke run (well under a minute): `python benchmarks/month_end.py --batches 50 --transactions 10`.
Target (the issue): at least 50 batches/s submit -> AUTHORIZATION_REQUIRED with one instance. The script prints
figures; it asserts nothing on time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from confluent_kafka import KafkaError, Message

import schemas
from processor.devtools import processes
from processor.devtools.approver import ApprovalError, decision_post
from processor.devtools.kafka_local import LocalKafka
from processor.kafka.clients import librdkafka_logger, new_admin, new_consumer, new_producer, producer_config
from processor.kafka.settings import KafkaSettings
from processor.kafka.topics import ensure_topics, project_topics
from schemas.topics import ALL_TOPICS, BATCHES_TOPIC, STATUS_TOPIC

DEFAULT_PG_URL = "postgresql://dispersion:dispersion@127.0.0.1:5432/dispersion_test"
INTEGRATION = "sandbox"
CLI = [sys.executable, "-m", "processor.cli"]


def say(message: str) -> None:
    """Progress on standard error (figures go to standard output)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_averages() -> str:
    """`uptime`'s load averages."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def speed_reference_seconds() -> float:
    """Seconds one core takes for a fixed pure-Python loop now: figures from different days or machines are
    comparable only next to it (the same code measured 27 and 47 batches/s on two days of this machine)."""
    started = time.process_time()
    sum(range(30_000_000))
    return time.process_time() - started


SPEED_REFERENCE: list[float] = []  # the value printed at the start of this benchmark run


def speed_reference() -> str:
    """The speed reference measured now, as printed (and kept in `SPEED_REFERENCE` for the normalised figures)."""
    seconds = speed_reference_seconds()
    SPEED_REFERENCE[:] = [seconds]
    return f"speed reference (sum of range(3e7), one core, CPU time) {seconds:.3f} s"


# --- processes ------------------------------------------------------------------------------------------------


@dataclass
class Child(processes.Child):
    """A process the benchmark started (processor.devtools.processes), with what the benchmark reads of it."""

    peak_rss_sampled: int = 0  # kB, from periodic VmRSS samples

    def status_kb(self, key: str) -> int | None:
        """A `kB` line of /proc/PID/status (VmHWM, VmRSS), None once the process is gone."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        except (OSError, ValueError):
            return None
        return None

    def cpu_seconds(self) -> float:
        """User + system CPU seconds so far (0 once gone)."""
        return process_cpu_seconds(self.pid) or 0.0


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has spent so far, from /proc (None once it is gone, or without /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CODE_ROOT = Path(__file__).resolve().parents[1]


def _own_code(env: dict[str, str] | None) -> dict[str, str]:
    """`env` (else this process's) with this checkout first on PYTHONPATH: a child runs in a scratch directory, where
    `python -m processor.cli` would otherwise import the installed package (an editable install points at one
    checkout), so a benchmark run from another commit's export measured that checkout's processor instead."""
    chosen = dict(os.environ if env is None else env)
    chosen["PYTHONPATH"] = os.pathsep.join([str(CODE_ROOT), *filter(None, [chosen.get("PYTHONPATH")])])
    return chosen


def code_version() -> str:
    """The checkout the children run: its directory and, in a git work tree, its commit."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(CODE_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = "not a git work tree"
    return f"code {CODE_ROOT} ({rev})"


def stop_all(children: list[Child]) -> None:
    """Stop the children, last started first (processors before the sandbox), and forget them."""
    while children:
        children.pop().stop(timeout=40.0)


def spawn(
    name: str, argv: list[str], directory: Path, env: dict[str, str] | None = None, sock: socket.socket | None = None
) -> Child:
    """Start a child process, standard output and error to `directory/name.log`; with `sock`, it serves on that
    listening socket (`--listen-fd`), which is closed here (the child holds it). The child runs the code of the
    checkout this script is in (`code_root`)."""
    fds = () if sock is None else (sock.fileno(),)
    extra = [] if sock is None else ["--listen-fd", str(sock.fileno())]
    started = processes.spawn(
        name, [*argv, *extra], directory / f"{name}.log", env=_own_code(env), cwd=directory, pass_fds=fds
    )
    if sock is not None:
        sock.close()
    return Child(started.name, started.process, started.log_path)


class RssSampler:
    """Samples VmRSS of some children every `interval` seconds; `peak_by_phase[phase][name]` in kB."""

    def __init__(self, children: Sequence[Child], interval: float = 0.25) -> None:
        self.children = list(children)
        self.interval = interval
        self.phase = "start"
        self.peak_by_phase: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def sample(self) -> None:
        """Take one sample now."""
        for child in self.children:
            rss = child.status_kb("VmRSS") or 0
            child.peak_rss_sampled = max(child.peak_rss_sampled, rss)
            phase = self.peak_by_phase.setdefault(self.phase, {})
            phase[child.name] = max(phase.get(child.name, 0), rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


# --- store, topics, configuration ------------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_store(kind: str, pg_url: str, directory: Path) -> Iterator[str]:
    """A store URL for one run: a new PostgreSQL database (dropped afterwards) or a new SQLite file."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / f'bench-{uuid.uuid4().hex[:8]}.sqlite'}"  # four slashes: absolute path
        return
    name = f"dispersion_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(pg_url)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def toml_value(value: object) -> str:
    """A TOML scalar (strings as JSON strings, which TOML basic strings accept)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def write_config(
    path: Path,
    *,
    integration: dict[str, Any],
    store: str,
    public_url: str,
    kafka: KafkaSettings,
    engine: dict[str, Any],
) -> None:
    """The processor's configuration file for one run."""
    lines = ["[processor]", f"store = {toml_value(store)}", f"public_url = {toml_value(public_url)}", ""]
    lines += ["[kafka]", f"bootstrap_servers = {toml_value(kafka.bootstrap)}"]
    lines += [f"group_id = {toml_value(kafka.group_id)}", "", "[kafka.topics]"]
    lines += [f"{toml_value(logical)} = {toml_value(physical)}" for logical, physical in kafka.topics.items()]
    if engine:
        lines += ["", "[engine]", *(f"{key} = {toml_value(value)}" for key, value in engine.items())]
    lines += ["", f"[integrations.{INTEGRATION}]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in integration.items()]
    path.write_text("\n".join(lines) + "\n")


def fresh_kafka(bootstrap: str, partitions: int, status_max_message_mb: float | None = None) -> KafkaSettings:
    """Topics with a unique prefix (created now, as `dispersion topics` would) and a unique consumer group.
    `status_max_message_mb` replaces `max.message.bytes` of the status topic (`dispersion topics` creates it
    with 64 MiB, enough for a COMPLETED event carrying 100,000 transaction results)."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(
        bootstrap=bootstrap,
        group_id=f"{prefix}-processor",
        topics={logical: f"{prefix}.{logical}" for logical in ALL_TOPICS},
    )
    specs = project_topics(settings, partitions=partitions)
    if status_max_message_mb:
        limit = {"max.message.bytes": str(int(status_max_message_mb * 1024 * 1024))}
        specs = [
            dataclasses.replace(spec, config={**spec.config, **limit})
            if spec.name == settings.topic(STATUS_TOPIC)
            else spec
            for spec in specs
        ]
    ensure_topics(settings.config(), specs)
    return settings


def delete_topics(settings: KafkaSettings) -> None:
    """Remove the run's topics (best effort)."""
    admin = new_admin(settings.config(logger=librdkafka_logger("bench-admin")))
    for future in admin.delete_topics(list(settings.topics.values()), request_timeout=30).values():
        with contextlib.suppress(Exception):
            future.result(30)


def group_members(settings: KafkaSettings) -> int:
    """Members of the processors' consumer group once it is stable (0 before)."""
    admin = new_admin(settings.config(logger=librdkafka_logger("bench-admin")))
    try:
        description = admin.describe_consumer_groups([settings.group_id])[settings.group_id].result(10)
    except Exception:
        return 0
    return len(description.members) if str(description.state).endswith("STABLE") else 0


# --- the sandbox and the processors -----------------------------------------------------------------------------


@dataclass
class Bench:
    """What every run shares: the working folder, the broker, the sandbox client and the ports."""

    directory: Path
    bootstrap: str
    api_ports: list[int]
    sandbox_port: int
    integration: dict[str, Any]
    latency_ms: float
    file_payment_delay: float
    profile: Path | None = None  # write each processor's cProfile stats here
    sandbox_max_body_mb: float | None = None  # None: the sandbox's own request size limit
    sandbox_args: tuple[str, ...] = ()  # more `dispersion sandbox` options (chaos.py: --admin, --db)
    # The ports, held since they were chosen until a child serves on them (a restart binds its port again).
    held: dict[int, socket.socket] = field(default_factory=dict)

    def socket_for(self, port: int) -> socket.socket:
        """The listening socket to hand to the child that serves on `port`."""
        return self.held.pop(port, None) or processes.listening_socket(port=port)

    @property
    def sandbox_url(self) -> str:
        return f"http://127.0.0.1:{self.sandbox_port}"

    def api_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.api_ports[index]}"


def prepare(
    directory: Path,
    bootstrap: str,
    instances: int,
    latency_ms: float,
    file_payment_delay: float,
    *,
    rules: Sequence[dict[str, Any]] = (),
    seed: int = 1,
) -> Bench:
    """`dispersion sandbox init` (keys, client, configuration) with the redirect URI on instance 0's port; the fault
    plan adds `latency_ms` to every call, then `rules` (docs/sandbox-faults.md), drawn from `seed`."""
    held = [processes.listening_socket() for _ in range(instances + 1)]
    sandbox_port, *api_ports = [processes.port_of(sock) for sock in held]
    sandbox_dir = directory / "bank-client"
    redirect_uri = f"http://127.0.0.1:{api_ports[0]}/callback"
    subprocess.run(
        [*CLI, "sandbox", "init", str(sandbox_dir), "--sandbox-url", f"http://127.0.0.1:{sandbox_port}",
         "--redirect-uri", redirect_uri],
        check=True, capture_output=True,
    )  # fmt: skip
    config = tomllib.loads((sandbox_dir / "dispersion.toml").read_text())
    integration = dict(config["integrations"][INTEGRATION])
    integration["redirect_uri"] = redirect_uri
    extra_rules, rules = rules, []
    if latency_ms > 0:
        rules.append({"operation": "*", "fault": "latency", "latency_ms": latency_ms, "comment": "month-end bench"})
    rules = [*rules, *extra_rules]
    (sandbox_dir / "faults.json").write_text(json.dumps({"seed": seed, "rules": rules}))
    bench = Bench(directory, bootstrap, api_ports, sandbox_port, integration, latency_ms, file_payment_delay)
    bench.held = {processes.port_of(sock): sock for sock in held}
    return bench


def start_sandbox(bench: Bench, directory: Path) -> Child:
    """The sandbox bank (in-memory) with the latency plan; waits until it answers."""
    sandbox_dir = bench.directory / "bank-client"
    command = [*CLI, "sandbox"]
    if bench.sandbox_max_body_mb:
        command += ["--max-body-mb", str(int(bench.sandbox_max_body_mb))]
    command += bench.sandbox_args
    child = spawn(
        "sandbox",
        [*command, "--clients", str(sandbox_dir / "clients.json"), "--faults", str(sandbox_dir / "faults.json"),
         "--file-payment-delay", str(bench.file_payment_delay), "--log-level", "warning"],
        directory,
        sock=bench.socket_for(bench.sandbox_port),
    )  # fmt: skip

    url = f"{bench.sandbox_url}/openapi.json"
    processes.eventually(lambda: processes.answers(url), what="sandbox answer", timeout=60, child=child)
    return child


def start_processor(bench: Bench, index: int, config: Path, directory: Path) -> Child:
    """One `dispersion processor` on its own port; waits for its ready line. With `bench.profile`, it runs under
    cProfile (main thread only: the event loop with the worker and the HTTP server) and writes its stats there."""
    env = {**os.environ, "DISPERSION_STORE_ALLOW_DEV_KEY": "1"}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # the configuration names the broker
    cli = CLI
    if bench.profile is not None:
        stats = bench.profile / f"{directory.name}-processor-{index + 1}.prof"
        cli = [sys.executable, "-m", "cProfile", "-o", str(stats), "-m", "processor.cli"]
    child = spawn(
        f"processor-{index + 1}",
        [*cli, "processor", "--config", str(config), "--instance", f"bench-{index + 1}", "--log-format", "json",
         "--log-level", "warning"],
        directory,
        env,
        sock=bench.socket_for(bench.api_ports[index]),
    )  # fmt: skip
    processes.eventually(
        lambda: "processor ready:" in child.output(), what=f"{child.name} ready", timeout=120, child=child
    )
    return child


# --- status events ------------------------------------------------------------------------------------------------


@dataclass
class Seen:
    """One status event of one batch: when it happened (occurred_at) and when the benchmark consumed it."""

    occurred_at: float
    consumed_at: float
    record: dict[str, Any]


class StatusWatcher:
    """Consumes the run's status topic in a thread; `seen[batch_id][status]` (first delivery of each event)."""

    def __init__(self, settings: KafkaSettings, keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.topic = settings.topic(STATUS_TOPIC)
        self.consumer = new_consumer(
            settings.config(
                logger=librdkafka_logger("bench-status"),
                **{
                    "group.id": f"{settings.group_id}-watcher",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "fetch.max.bytes": 128 * 1024 * 1024,
                    "max.partition.fetch.bytes": 128 * 1024 * 1024,
                    "receive.message.max.bytes": 200 * 1024 * 1024,
                },
            )
        )
        self.keep = keep or (lambda record: {"authorization_url": record.get("authorization_url")})
        self.seen: dict[str, dict[str, Seen]] = {}
        self.counts: Counter[str] = Counter()
        self.event_ids: set[str] = set()
        self.duplicates = 0
        self.errors: list[str] = []
        self.assigned = threading.Event()
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-watcher", daemon=True)

    def __enter__(self) -> StatusWatcher:
        self._thread.start()
        if not self.assigned.wait(60):
            raise TimeoutError("the status consumer got no partitions within 60 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)
        self.consumer.close()

    def _run(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=lambda consumer, partitions: self.assigned.set())
        while not self._stop.is_set():
            message = self.consumer.poll(0.2)
            if message is not None:
                self._handle(message)

    def _handle(self, message: Message) -> None:
        consumed = time.time()
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                self.errors.append(str(error))
            return
        value = message.value()
        if value is None:
            return
        record = schemas.decode(STATUS_TOPIC, value)
        with self.changed:
            if record["event_id"] in self.event_ids:
                self.duplicates += 1
                return
            self.event_ids.add(record["event_id"])
            occurred = record["occurred_at"]
            seen = Seen(occurred.timestamp(), consumed, self.keep(record))
            self.seen.setdefault(record["batch_id"], {})[record["status"]] = seen
            self.counts[record["status"]] += 1
            self.changed.notify_all()

    def wait(self, done: Callable[[Counter[str]], bool], timeout: float, what: str) -> bool:
        """Block until `done(counts)`; False (and a note) on timeout."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not done(self.counts):
                left = deadline - time.monotonic()
                if left <= 0:
                    say(f"timed out waiting for {what}: {dict(self.counts)}")
                    return False
                self.changed.wait(min(left, 1.0))
        return True

    def last(self, status: str) -> float:
        """Consumption time of the last event with that status."""
        with self.changed:
            return max(s[status].consumed_at for s in self.seen.values() if status in s)


# --- batches ------------------------------------------------------------------------------------------------------


CONCEPTS = ("Pago de planilla noviembre 2026", "Bonificación incentivo decreto 37-2001", "Aguinaldo 2026")


def batch_record(batch_id: str, transactions: int, seed: int) -> dict[str, Any]:
    """A `payroll.batches` record (schemas/payroll_batches.v1.avsc) with realistic fields."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    return {
        "batch_id": batch_id,
        "integration": INTEGRATION,
        "file_reference": f"PAYROLL-{batch_id}"[-40:],
        "origin_account": {"account_number": "0100123456", "account_type": "MONETARY", "currency": "GTQ"},
        "transactions": [
            {
                "destination_account": {
                    "account_number": f"{3_000_000_000 + seed * 1000 + index:013d}",
                    "account_type": "SAVINGS" if index % 10 else "MONETARY",
                    "currency": "GTQ",
                    "email": f"employee.{index}@example.com.gt",
                },
                "amount": Decimal(rng.randint(100, 2_500_000)) / 100,
                "concept": f"{CONCEPTS[index % 3]} #{index}",
                "employee_reference": f"E-{index:06d}",
            }
            for index in range(transactions)
        ],
        "requested_at": now.replace(microsecond=now.microsecond // 1000 * 1000),
        "source": "benchmark",
    }


def produce(settings: KafkaSettings, values: Sequence[tuple[str, bytes]]) -> tuple[float, float]:
    """Produce pre-encoded batches; (wall time of the first produce, seconds until all were acknowledged)."""
    producer = new_producer(producer_config(settings, "bench-submit", **{"compression.type": "lz4", "linger.ms": 5}))
    failures: list[str] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(str(error))

    topic = settings.topic(BATCHES_TOPIC)
    started = time.time()
    for key, value in values:
        while True:
            try:
                producer.produce(topic, value=value, key=key.encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    if left or failures:
        raise RuntimeError(f"Kafka did not take every batch: {left} unacknowledged, errors {failures[:3]}")
    return started, time.time() - started


# --- the approver -------------------------------------------------------------------------------------------------


def rebase(url: str, base: str) -> str:
    """`url` with the scheme and host:port of `base` (to send a link or redirect to a chosen instance)."""
    target = urlsplit(base)
    return urlunsplit(urlsplit(url)._replace(scheme=target.scheme, netloc=target.netloc))


@dataclass
class Approval:
    """Timings of one approval (wall clock, seconds)."""

    batch_id: str
    opened_at: float
    delivered_at: float  # the browser starts delivering the bank's redirect to our callback API
    answered_at: float  # our callback API answered (200)


async def get_again_if_dropped(http: httpx.AsyncClient, url: str, *, follow_redirects: bool = False) -> httpx.Response:
    """GET as a browser does: a kept-alive connection the server closed just as it was reused (uvicorn's 5 s
    keep-alive timeout) is retried on a new one, up to twice. Retries are counted in `DROPPED_RETRIES`."""
    for attempt in range(3):
        try:
            return await http.get(url, follow_redirects=follow_redirects)
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            DROPPED_RETRIES.append(f"{urlsplit(url).path}: {exc!r}")
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


DROPPED_RETRIES: list[str] = []


async def approve(http: httpx.AsyncClient, batch_id: str, link: str, api: str) -> Approval:
    """Approve one batch as a browser would, talking to the instance at `api`."""
    opened = time.time()
    page = await get_again_if_dropped(http, rebase(link, api), follow_redirects=True)
    if page.status_code != 200:
        raise RuntimeError(f"{batch_id}: consent page answered {page.status_code}: {page.text[:200]}")
    try:
        target, data = decision_post(str(page.url), page.text, "approve")
    except ApprovalError as exc:
        raise RuntimeError(f"{batch_id}: {exc}") from exc
    decided = await http.post(target, data=data, follow_redirects=False)
    if decided.status_code not in (302, 303):
        raise RuntimeError(f"{batch_id}: decision answered {decided.status_code}: {decided.text[:200]}")
    redirect = rebase(decided.headers["location"], api)
    delivered = time.time()
    answer = await get_again_if_dropped(http, redirect)
    if answer.status_code != 200:
        raise RuntimeError(f"{batch_id}: callback answered {answer.status_code}: {answer.text[:200]}")
    return Approval(batch_id, opened, delivered, time.time())


async def approve_all(links: Sequence[tuple[str, str]], apis: Sequence[str], concurrency: int) -> list[Approval]:
    """Approve every (batch id, link), at most `concurrency` at once, batch i on instance i mod n."""
    limit = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:

        async def one(index: int, batch_id: str, link: str) -> Approval:
            async with limit:
                return await approve(http, batch_id, link, apis[index % len(apis)])

        return list(await asyncio.gather(*(one(i, b, link) for i, (b, link) in enumerate(links))))


# --- figures ------------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.4999)))
    return ordered[rank - 1]


def metrics_text(api: str) -> str:
    """An instance's /metrics, empty when it cannot be read."""
    try:
        return httpx.get(f"{api}/metrics", timeout=30).text
    except httpx.HTTPError:
        return ""


def bank_call_means(api: str) -> dict[str, tuple[int, float]]:
    """From an instance's /metrics: operation -> (calls, mean seconds) of dispersion_bank_call_seconds."""
    text = metrics_text(api)
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    pattern = re.compile(r"^dispersion_bank_call_seconds_(sum|count)\{([^}]*)\} ([0-9.e+-]+)$")
    for line in text.splitlines():
        match = pattern.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        target = sums if match.group(1) == "sum" else counts
        operation = labels.get("operation", "?")
        target[operation] = target.get(operation, 0.0) + float(match.group(3))
    return {op: (int(counts[op]), sums.get(op, 0.0) / counts[op]) for op in counts if counts[op]}


_COLLECTOR_LINE = re.compile(
    r"^(python_gc_collections_total|dispersion_gc_collections_total|dispersion_gc_cpu_seconds_total)"
    r'\{generation="(\d)"\} ([0-9.e+-]+)$'
)


def collector_figures(api: str) -> dict[str, list[float]]:
    """From an instance's /metrics: metric -> value by generation of the cyclic garbage collector's counters
    (`python_gc_collections_total` since the process started; `dispersion_gc_*` since `tune_gc`, where present)."""
    found: dict[str, list[float]] = {}
    for line in metrics_text(api).splitlines():
        match = _COLLECTOR_LINE.match(line)
        if match is not None:
            found.setdefault(match.group(1), [0.0, 0.0, 0.0])[int(match.group(2))] = float(match.group(3))
    return found


def print_collectors(collectors: Sequence[dict[str, list[float]]]) -> None:
    """One line per instance: its collections per generation and, once tuned, the collector's CPU."""
    for index, found in enumerate(collectors):
        started = found.get("python_gc_collections_total")
        served = found.get("dispersion_gc_collections_total")
        cpu = found.get("dispersion_gc_cpu_seconds_total")
        parts = []
        if started:
            young, middle, full = started
            parts.append(f"since start-up {young:.0f} young, {middle:.0f} middle, {full:.0f} full collections")
        if served and cpu:
            young, middle, full = served
            parts.append(f"since serving {young:.0f} / {middle:.0f} / {full:.0f}, {sum(cpu):.2f} CPU-s")
        print(f"garbage collector, instance {index + 1}: {'; '.join(parts) or 'no figures'}")


def bank_call_mean(metrics: Sequence[dict[str, tuple[int, float]]]) -> tuple[int, float]:
    """(calls, mean seconds) of every bank call of every instance together."""
    calls = sum(count for means in metrics for count, _ in means.values())
    total = sum(count * mean for means in metrics for count, mean in means.values())
    return calls, (total / calls if calls else 0.0)


def print_normalised(
    batches: int,
    cpu: dict[str, list[float]],
    processors: Sequence[str],
    sandbox: str,
    reference: float,
    metrics: Sequence[dict[str, tuple[int, float]]],
    latency_ms: float,
) -> None:
    """The issue-22 figures: processor CPU-seconds per 1000 batches divided by the speed reference (so runs on a
    faster or busier hour compare), processor CPU over the sandbox's for the same exchanges, and the mean bank
    call as the processor saw it against the latency the sandbox adds (`cpu[name]` = CPU marks at the phases'
    ends, as `_measure` takes them)."""
    phases = {"submit": (0, 1), "approve+complete": (1, 2), "whole run": (0, 2)}
    per_batch, ratio = [], []
    for phase, (start, end) in phases.items():
        ours = sum(cpu[name][end] - cpu[name][start] for name in processors)
        bank = cpu[sandbox][end] - cpu[sandbox][start]
        per_batch.append(f"{phase} {ours / batches * 1000 / reference:6.1f}")
        ratio.append(f"{phase} {ours / bank if bank else float('nan'):5.2f}")
    print(f"speed reference during the run (mean of before and after, CPU time): {reference:.3f} s")
    print(f"processor CPU-s per 1000 batches / speed reference: {', '.join(per_batch)}  (target <= 40)")
    print(f"processor CPU / sandbox CPU:                        {', '.join(ratio)}  (target <= 1.0)")
    calls, mean = bank_call_mean(metrics)
    if calls and latency_ms > 0:
        print(f"mean bank call inside the processor: {mean * 1000:.1f} ms over {calls} calls = "
              f"{mean * 1000 / latency_ms:.2f} x the configured +{latency_ms:g} ms  (target <= 2.0)")  # fmt: skip


STORE_COUNTERS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted", "tup_returned")


def store_activity(store: str) -> dict[str, int]:
    """The run database's counters from `pg_stat_database` (empty for SQLite)."""
    if not store.startswith("postgresql"):
        return {}
    with psycopg.connect(store, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            f"SELECT {', '.join(STORE_COUNTERS)} FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return dict(zip(STORE_COUNTERS, map(int, row or ()), strict=False))


def print_store_activity(store: str, before: dict[str, int], batches: int) -> None:
    """Transactions and rows written per batch over the run (PostgreSQL's statistics, flushed within a second
    or so of each transaction: the last batches' may be missing)."""
    if not before:
        return
    time.sleep(2)  # let the backends flush their statistics
    after = store_activity(store)
    per = {key: (after[key] - before[key]) / batches for key in STORE_COUNTERS}
    with psycopg.connect(store, autocommit=True) as conn:
        outbox = conn.execute(
            "SELECT topic, COUNT(*), SUM(LENGTH(payload)) FROM outbox GROUP BY topic ORDER BY topic"
        ).fetchall()
    shown = ", ".join(f"{topic} {count / batches:.1f} events, {size / batches:,.0f} B" for topic, count, size in outbox)
    print(f"outbox per batch (JSON payloads; Avro on the wire is smaller): {shown}")
    print(
        f"store per batch (pg_stat_database, all instances): {per['xact_commit']:.1f} transactions committed, "
        f"{per['xact_rollback']:.2f} rolled back; rows inserted {per['tup_inserted']:.1f}, updated "
        f"{per['tup_updated']:.1f}, deleted {per['tup_deleted']:.1f}, returned {per['tup_returned']:.0f}"
    )


def mb(kb: int | None) -> str:
    """kB (KiB, as /proc reports) as MiB for the printout."""
    return "?" if kb is None else f"{kb / 1024:.0f} MiB"


@dataclass
class RunOptions:
    """Sizes and knobs of one run."""

    batches: int
    transactions: int
    approvers: int
    timeout: float
    store: str
    pg_url: str
    partitions: int
    engine: dict[str, Any] = field(default_factory=dict)
    status_max_message_mb: float | None = None


def run(bench: Bench, instances: int, options: RunOptions) -> None:
    """One month-end run with `instances` processors; prints its figures."""
    directory = Path(tempfile.mkdtemp(prefix=f"run{instances}-", dir=bench.directory))
    say(f"run with {instances} instance(s): fresh topics, {options.store} store")
    settings = fresh_kafka(bench.bootstrap, options.partitions, options.status_max_message_mb)
    children: list[Child] = []
    try:
        with contextlib.ExitStack() as stack:
            store = stack.enter_context(fresh_store(options.store, options.pg_url, directory))
            config = directory / "dispersion.toml"
            write_config(
                config, integration=bench.integration, store=store, public_url=bench.api_url(0),
                kafka=settings, engine=options.engine,
            )  # fmt: skip
            stack.callback(stop_all, children)  # runs before the store is dropped
            sandbox = start_sandbox(bench, directory)
            children.append(sandbox)
            processors: list[Child] = []
            for index in range(instances):  # one at a time: the first one creates the store's tables
                processors.append(start_processor(bench, index, config, directory))
                children.append(processors[-1])
            processes.eventually(
                lambda: group_members(settings) == instances, what=f"a stable group of {instances}", timeout=90
            )
            say(f"sandbox pid {sandbox.pid}, processors {[p.pid for p in processors]}; consumer group stable")
            activity = store_activity(store)
            _measure(bench, instances, options, settings, sandbox, processors)
            print_store_activity(store, activity, options.batches)
    finally:
        delete_topics(settings)


@dataclass
class Figures:
    """What one measured month-end leaves for its report (wall-clock times and seconds)."""

    encode_seconds: float
    first_produce: float
    produce_seconds: float
    submitted_in_time: bool
    authorization_required: int
    submit_seconds: float
    approvals: list[Approval]
    approvals_started: float
    approvals_done: float
    all_completed: float
    loads: tuple[str, str, str]  # load averages before, after the submit, at the end
    peaks: dict[str, int | None]  # VmHWM in kB by child name
    metrics: list[dict[str, tuple[int, float]]]  # bank call means by instance
    cpu: dict[str, list[float]]  # CPU seconds by child name: at the start, after the submit, at the end
    reference_before: float
    collectors: list[dict[str, list[float]]]  # the garbage collector's counters by instance


def _measure(
    bench: Bench, instances: int, options: RunOptions, settings: KafkaSettings, sandbox: Child, processors: list[Child]
) -> None:
    n = options.batches
    run_id = uuid.uuid4().hex[:6]
    say(f"encoding {n} batches of {options.transactions} transactions")
    encode_started = time.perf_counter()
    values = [
        (
            f"me-{run_id}-{i:05d}",
            schemas.encode(BATCHES_TOPIC, batch_record(f"me-{run_id}-{i:05d}", options.transactions, i)),
        )
        for i in range(n)
    ]
    encode_seconds = time.perf_counter() - encode_started
    everyone = [*processors, sandbox]
    reference_before = speed_reference_seconds()
    cpu: dict[str, list[float]] = {c.name: [c.cpu_seconds()] for c in everyone}

    def cpu_mark() -> None:
        for c in everyone:
            cpu[c.name].append(c.cpu_seconds())

    with StatusWatcher(settings) as watcher, RssSampler(everyone) as sampler:
        sampler.phase = "submit"
        load_before = load_averages()
        say("producing")
        first_produce, produce_seconds = produce(settings, values)
        ok = watcher.wait(lambda c: c["AUTHORIZATION_REQUIRED"] + c["INVALID"] + c["FAILED"] >= n, options.timeout,
                          "AUTHORIZATION_REQUIRED")  # fmt: skip
        cpu_mark()
        authorization_required = watcher.counts["AUTHORIZATION_REQUIRED"]
        submit_seconds = watcher.last("AUTHORIZATION_REQUIRED") - first_produce if authorization_required else 0.0
        load_after_submit = load_averages()
        say(f"{authorization_required} AUTHORIZATION_REQUIRED in {submit_seconds:.1f} s; approving")

        links = [
            (batch_id, str(seen["AUTHORIZATION_REQUIRED"].record["authorization_url"]))
            for batch_id, seen in sorted(watcher.seen.items())
            if "AUTHORIZATION_REQUIRED" in seen
        ]
        sampler.phase = "approve+complete"
        approvals_started = time.time()
        apis = [bench.api_url(i) for i in range(instances)]
        approvals = asyncio.run(approve_all(links, apis, options.approvers))
        approvals_done = time.time()
        say(f"{len(approvals)} approved in {approvals_done - approvals_started:.1f} s; waiting for COMPLETED")
        expected = len(links)
        watcher.wait(lambda c: c["INITIATED"] >= expected, options.timeout, "INITIATED")
        watcher.wait(lambda c: c["COMPLETED"] + c["FAILED"] + c["REJECTED"] >= expected, options.timeout, "COMPLETED")
        cpu_mark()
        all_completed = watcher.last("COMPLETED") if watcher.counts["COMPLETED"] else float("nan")
        sampler.sample()
        load_end = load_averages()
        peaks = {c.name: c.status_kb("VmHWM") for c in everyone}
        metrics = [bank_call_means(api) for api in apis]
        collectors = [collector_figures(api) for api in apis]

    figures = Figures(
        encode_seconds, first_produce, produce_seconds, ok, authorization_required, submit_seconds, approvals,
        approvals_started, approvals_done, all_completed, (load_before, load_after_submit, load_end), peaks, metrics,
        cpu, reference_before, collectors,
    )  # fmt: skip
    _report(bench, instances, options, figures, watcher, sandbox, processors)


def _report(
    bench: Bench,
    instances: int,
    options: RunOptions,
    figures: Figures,
    watcher: StatusWatcher,
    sandbox: Child,
    processors: list[Child],
) -> None:
    n, f, approvals, everyone = options.batches, figures, figures.approvals, [*processors, sandbox]
    by_consumption = [watcher.seen[a.batch_id]["INITIATED"].consumed_at - a.delivered_at
                      for a in approvals if "INITIATED" in watcher.seen.get(a.batch_id, {})]  # fmt: skip
    by_occurred = [watcher.seen[a.batch_id]["INITIATED"].occurred_at - a.delivered_at
                   for a in approvals if "INITIATED" in watcher.seen.get(a.batch_id, {})]  # fmt: skip
    callback = [a.answered_at - a.delivered_at for a in approvals]
    whole = [a.answered_at - a.opened_at for a in approvals]

    print()
    print(f"=== month-end: {instances} instance(s), {n} batches x {options.transactions} transactions, "
          f"store {options.store}, bank latency +{bench.latency_ms:g} ms/call ===")  # fmt: skip
    load_before, load_after_submit, load_end = f.loads
    print(f"load average (1/5/15 min): before {load_before}; after submit {load_after_submit}; end {load_end}")
    print(f"encode {n} batches (client side, untimed below):   {f.encode_seconds:8.2f} s")
    print(f"produce all (first produce -> all acked):          {f.produce_seconds:8.2f} s")
    authorization_required, submit_seconds = f.authorization_required, f.submit_seconds
    approvals_started, approvals_done = f.approvals_started, f.approvals_done
    timed_out = "" if f.submitted_in_time else ", TIMED OUT"
    rate = authorization_required / submit_seconds if submit_seconds else 0.0
    print(f"submit -> N-th AUTHORIZATION_REQUIRED consumed:    {submit_seconds:8.2f} s  "
          f"{rate:7.1f} batches/s  ({authorization_required}/{n}{timed_out})")  # fmt: skip
    others = {k: v for k, v in watcher.counts.items() if k in ("INVALID", "FAILED") and v}
    if others:
        print(f"  other outcomes: {others}")
    print(
        f"approvals ({options.approvers} at a time, link -> callback 200): {approvals_done - approvals_started:8.2f} s"
        f"  per approval p50 {percentile(whole, 50) * 1000:.0f} ms, p99 {percentile(whole, 99) * 1000:.0f} ms"
    )
    print(
        f"callback request (redirect delivered -> 200):      p50 {percentile(callback, 50) * 1000:7.0f} ms"
        f"  p99 {percentile(callback, 99) * 1000:7.0f} ms"
    )
    if by_consumption:
        print(
            f"redirect delivered -> INITIATED, event consumed:   p50 {percentile(by_consumption, 50) * 1000:7.0f} ms"
            f"  p99 {percentile(by_consumption, 99) * 1000:7.0f} ms  ({len(by_consumption)} batches)"
        )
        print(
            f"redirect delivered -> INITIATED, its occurred_at:  p50 {percentile(by_occurred, 50) * 1000:7.0f} ms"
            f"  p99 {percentile(by_occurred, 99) * 1000:7.0f} ms"
        )
    print(
        f"approvals start -> last COMPLETED consumed:        {f.all_completed - approvals_started:8.2f} s  "
        f"(COMPLETED {watcher.counts['COMPLETED']}, FAILED {watcher.counts['FAILED']})"
    )
    print(f"first produce -> last COMPLETED consumed:          {f.all_completed - f.first_produce:8.2f} s")
    for c in everyone:
        marks = f.cpu[c.name]
        print(f"{c.name:12} pid {c.pid:>7}: peak RSS (VmHWM) {mb(f.peaks[c.name])}, sampled max VmRSS "
              f"{mb(c.peak_rss_sampled)}; CPU s submit {marks[1] - marks[0]:6.1f}, approve+complete "
              f"{marks[2] - marks[1]:6.1f}")  # fmt: skip
    for index, means in enumerate(f.metrics):
        shown = ", ".join(f"{op} {count}x {mean * 1000:.0f} ms" for op, (count, mean) in sorted(means.items()))
        print(f"bank calls, instance {index + 1} (count, mean): {shown}")
    reference = (f.reference_before + speed_reference_seconds()) / 2
    print_normalised(n, f.cpu, [p.name for p in processors], sandbox.name, reference, f.metrics, bench.latency_ms)
    print_collectors(f.collectors)
    if watcher.duplicates or watcher.errors:
        print(f"status consumer: {watcher.duplicates} duplicate events, errors {watcher.errors[:3]}")
    if DROPPED_RETRIES:
        print(f"approver: {len(DROPPED_RETRIES)} GETs retried on a dropped keep-alive connection")
        DROPPED_RETRIES.clear()
    sys.stdout.flush()


# --- main ---------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def broker(explicit: str | None) -> Iterator[str]:
    """The bootstrap address: `--bootstrap`, `KAFKA_BOOTSTRAP_SERVERS`, else a LocalKafka started (and stopped)."""
    existing = explicit or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if existing:
        yield existing
        return
    say("starting a local Kafka broker (processor.devtools.kafka_local.LocalKafka)")
    with LocalKafka() as kafka:
        yield kafka.bootstrap


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def common_arguments(
    parser: argparse.ArgumentParser,
    *,
    sandbox_max_body_mb: float | None = None,
    status_max_message_mb: float | None = None,
) -> None:
    """Options shared with benchmarks/big_batch.py."""
    parser.add_argument("--store", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--pg-url", default=os.environ.get("DISPERSION_BENCH_PG_URL", DEFAULT_PG_URL),
                        help="PostgreSQL server (a database is created and dropped on it)")  # fmt: skip
    parser.add_argument("--bootstrap", help="existing Kafka (default: $KAFKA_BOOTSTRAP_SERVERS, else a local one)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added latency per bank call")
    parser.add_argument("--file-payment-delay", type=float, default=2.0, help="sandbox: seconds InitiationPending")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--engine-concurrency", type=int, help="[engine] concurrency (default: the processor's)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for each phase")
    parser.add_argument("--keep", action="store_true", help="keep the working folder (logs) for inspection")
    parser.add_argument("--profile", type=Path, help="run the processors under cProfile, stats into this folder")
    parser.add_argument("--sandbox-max-body-mb", type=float, default=sandbox_max_body_mb,
                        help="the sandbox's request body limit (its --max-body-mb; 64 MiB as shipped)")  # fmt: skip
    parser.add_argument("--status-max-message-mb", type=float, default=status_max_message_mb,
                        help="status topic max.message.bytes (default: as `dispersion topics` sets it)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--transactions", type=int, default=100)
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--approvers", type=int, default=16, help="approvals in flight at once")
    common_arguments(parser)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    options = RunOptions(
        batches=args.batches, transactions=args.transactions, approvers=args.approvers, timeout=args.timeout,
        store=args.store, pg_url=args.pg_url, partitions=args.partitions,
        engine={"concurrency": args.engine_concurrency} if args.engine_concurrency else {},
        status_max_message_mb=args.status_max_message_mb,
    )  # fmt: skip
    directory = Path(tempfile.mkdtemp(prefix="dispersion-month-end-"))
    print(f"month-end benchmark {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"load average {load_averages()}; {speed_reference()}; {code_version()}")  # fmt: skip
    try:
        with broker(args.bootstrap) as bootstrap:
            bench = prepare(directory, bootstrap, max(args.instances), args.latency_ms, args.file_payment_delay)
            bench.profile = args.profile.resolve() if args.profile else None
            bench.sandbox_max_body_mb = args.sandbox_max_body_mb
            for instances in args.instances:
                run(bench, instances, options)
    finally:
        if args.keep:
            say(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
