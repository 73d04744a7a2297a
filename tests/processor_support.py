"""A deployment for the end-to-end tests: the sandbox bank and N `dispersion processor` processes (the real
deployables, as subprocesses) on a fresh PostgreSQL database and uniquely named Kafka topics, plus the test's
side of the world: a producer for the input topics, a reader of the output topics, and an approver that drives
the bank's consent page the way a browser does.

- Each test gets its own PostgreSQL database (`CREATE DATABASE`, dropped afterwards): the processor's store URL
  is handed to libpq as is, so a database (not a schema) is what a configuration file can name.
- Each test gets its own topics (`[kafka.topics]` renames the six logical topics) and its own consumer group
  (`[kafka] group_id`), so tests never see each other's messages on a shared broker.
- Every instance shares one configuration file; its `public_url` (approval links, the registered redirect URI) is
  the first instance's address. The approver rewrites host and port of the approval link and of the bank's
  redirect to whichever instance it wants to reach, as a load balancer in front of the instances would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from sandbox_process import SandboxProcess, running_sandbox

import schemas
from processor.devtools.approver import decision_post
from processor.devtools.demo import toml_document
from processor.devtools.processes import Child, eventually, listening_socket, port_of, spawn
from processor.kafka.settings import KafkaSettings
from processor.kafka.topics import ensure_topics, project_topics
from processor.store import generate_key
from schemas.topics import (
    ALL_TOPICS,
    BATCHES_TOPIC,
    DLQ_TOPIC,
    STATUS_TOPIC,
    VRP_MANDATES_TOPIC,
    VRP_PAYMENTS_TOPIC,
    VRP_STATUS_TOPIC,
)

__all__ = [
    "BATCHES_TOPIC",
    "DLQ_TOPIC",
    "STATUS_TOPIC",
    "VRP_MANDATES_TOPIC",
    "VRP_PAYMENTS_TOPIC",
    "VRP_STATUS_TOPIC",
]

DATABASE_PREFIX = "dispersion_e2e_"
CALLBACK_PATH = "/callback"
CREDITOR = {"scheme_name": "UK.OBIE.SortCodeAccountNumber", "identification": "08080021325698", "name": "Savings pot"}

# Fast engine timings for tests: short waits between reads of a pending payment, short leases so a killed
# instance's work is taken over within seconds, a code exchange left unfinished by a killed instance may be
# repeated after 3 s.
FAST_ENGINE: dict[str, float | int] = {
    "idle_interval": 0.2,
    "poll_first": 0.5,
    "poll_max": 2.0,
    "retry_first": 0.5,
    "retry_max": 4.0,
    "lease_seconds": 8,
    "duplicate_wait": 2.0,
    "exchange_recovery_after": 3,
    "concurrency": 16,
    # Most tests pay the same few rows in many batches on purpose; the duplicate-payroll guard (on by default,
    # 35 days) would hold all but the first. tests/e2e/test_submissions.py turns it back on.
    "duplicate_window_days": 0,
}


# -- records ----------------------------------------------------------------------------------------------------

CLI = [sys.executable, "-m", "processor.cli"]


def payroll_batch(
    batch_id: str,
    transfers: Sequence[tuple[str, str]] = (("200100300", "1500.50"), ("200100301", "2000.00")),
    *,
    currency: str = "GTQ",
) -> dict[str, Any]:
    """A `payroll.batches` record (Avro form: Decimal amounts, datetime instants) for the sandbox integration.
    The sandbox rejects a transfer to an account ending in 9902 (AC04, closed account)."""
    return {
        "batch_id": batch_id,
        "integration": "sandbox",
        "file_reference": f"PAYROLL-{batch_id}"[:35],
        "origin_account": {"account_number": "100200300", "account_type": "MONETARY", "currency": currency},
        "transactions": [
            {
                "destination_account": {
                    "account_number": account,
                    "account_type": "SAVINGS",
                    "currency": currency,
                    "email": f"employee{i}@example.com",
                },
                "amount": Decimal(amount),
                "concept": f"Payroll November {i}",
                "employee_reference": f"E-{i:04d}",
            }
            for i, (account, amount) in enumerate(transfers)
        ],
        "requested_at": datetime.now(UTC),
        "source": "e2e-test",
    }


def vrp_mandate(mandate_id: str, *, max_individual: str = "500.00", monthly: str = "1000.00") -> dict[str, Any]:
    """A `vrp.mandates` record (Avro form): valid from yesterday for 60 days, GBP."""
    now = datetime.now(UTC)
    return {
        "mandate_id": mandate_id,
        "integration": "sandbox",
        "currency": "GBP",
        "creditor_account": dict(CREDITOR),
        "max_individual_amount": Decimal(max_individual),
        "periodic_limits": [{"amount": Decimal(monthly), "period_type": "Month", "period_alignment": "Calendar"}],
        "valid_from": now - timedelta(days=1),
        "valid_to": now + timedelta(days=60),
        "reference": "SWEEP-001",
        "description": None,
        "requested_at": now,
        "source": "e2e-test",
    }


def vrp_payment(mandate_id: str, payment_id: str, amount: str) -> dict[str, Any]:
    """A `vrp.payments` record (Avro form)."""
    return {
        "payment_id": payment_id,
        "mandate_id": mandate_id,
        "amount": Decimal(amount),
        "currency": "GBP",
        "end_to_end_id": f"E2E-{payment_id}"[:35],
        "remittance": "Sweep to savings",
        "requested_at": datetime.now(UTC),
    }


def unique_id(prefix: str) -> str:
    """An id no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# -- PostgreSQL: one database per test --------------------------------------------------------------------------


def _with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


@pytest.fixture(name="e2e_database")
def e2e_database_fixture(store_postgres_dsn: str) -> Iterator[str]:
    """The URL of a fresh PostgreSQL database for one test (the processors migrate it), dropped afterwards."""
    name = DATABASE_PREFIX + uuid.uuid4().hex[:12]
    with psycopg.connect(store_postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield _with_database(store_postgres_dsn, name)
    finally:
        with psycopg.connect(store_postgres_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def count_rows(url: str, sql: str) -> int:
    """One number from the test database (e.g. flows per state)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


# -- Kafka: topics, producing, reading ---------------------------------------------------------------------------


def topic_names(prefix: str) -> dict[str, str]:
    """Physical names for the six logical topics, unique to one test."""
    tag = f"e2e.{prefix}.{uuid.uuid4().hex[:8]}"
    return {logical: f"{tag}.{logical}" for logical in ALL_TOPICS}


def create_project_topics(bootstrap: str, topics: Mapping[str, str], *, partitions: int) -> None:
    """Create the six topics under their test names, as `dispersion topics` would."""
    settings = KafkaSettings(bootstrap=bootstrap, topics=dict(topics))
    results = ensure_topics(settings.config(), project_topics(settings, partitions=partitions), timeout=30)
    assert all(r.action in ("created", "exists") for r in results), results


class KafkaProducer:
    """Produces Avro records to a test's topics and waits for every acknowledgement."""

    def __init__(self, bootstrap: str, topics: Mapping[str, str]) -> None:
        self.topics = dict(topics)
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
        )
        self.errors: list[KafkaError] = []

    def _on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self.errors.append(error)

    def send(
        self,
        logical: str,
        key: str,
        record: Mapping[str, Any],
        *,
        flush: bool = True,
        headers: list[tuple[str, str | bytes]] | None = None,
    ) -> bytes:
        """Encode and produce one record (keyed by `key`, with `headers`); the encoded value."""
        value = schemas.encode(logical, dict(record))
        self.send_raw(logical, key.encode(), value, flush=flush, headers=headers)
        return value

    def send_raw(
        self,
        logical: str,
        key: bytes | None,
        value: bytes | None,
        *,
        flush: bool = True,
        headers: list[tuple[str, str | bytes]] | None = None,
    ) -> None:
        """Produce bytes as they are (e.g. a poison message)."""
        while True:
            try:
                self.producer.produce(
                    self.topics[logical], key=key, value=value, headers=headers, on_delivery=self._on_delivery
                )
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)
        if flush:
            self.flush()

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until everything produced was acknowledged."""
        assert self.producer.flush(timeout) == 0, "messages left unacknowledged"
        assert self.errors == [], self.errors


@dataclass(frozen=True)
class Event:
    """One message of an output topic, decoded."""

    partition: int
    offset: int
    key: str
    record: dict[str, Any]
    raw: bytes
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def status(self) -> str:
        return str(self.record.get("status"))

    @property
    def event_id(self) -> str:
        return str(self.record.get("event_id"))


class TopicLog:
    """Everything an output topic holds, read from the beginning of every partition as it arrives."""

    def __init__(self, bootstrap: str, topic: str, logical: str, *, decode: bool = True) -> None:
        self.topic = topic
        self.logical = logical
        self.decode = decode
        self.events: list[Event] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique_id("e2e-reader"),
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            }
        )
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
        partitions = sorted(metadata.topics[topic].partitions)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])

    def poll(self, seconds: float = 0.2) -> list[Event]:
        """Read what arrived within about `seconds`; the new events."""
        new: list[Event] = []
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            messages = self.consumer.consume(500, timeout=max(0.0, min(remaining, 0.2)))
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() < 0 and not error.fatal():  # librdkafka's own (broker down, ...): it retries
                        continue
                    raise AssertionError(f"{self.topic}: {error}")
                raw = message.value() or b""
                record = schemas.decode(self.logical, raw) if self.decode else {}
                key = (message.key() or b"").decode()
                headers = tuple(message.headers() or ())
                new.append(Event(message.partition() or 0, message.offset() or 0, key, record, raw, headers))
            if not messages and time.monotonic() >= deadline:
                break
        self.events.extend(new)
        return new

    def wait_until(
        self,
        done: Callable[[TopicLog], bool],
        *,
        timeout: float,
        what: str,
        each: Callable[[list[Event]], None] | None = None,
    ) -> None:
        """Poll until `done(self)`; `each` sees every batch of new events (e.g. to approve)."""

        def step() -> bool:
            if done(self):
                return True
            new = self.poll(0.3)
            if each is not None:
                each(new)
            return False

        try:
            eventually(step, what=what, timeout=timeout, interval=0)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; {self.summary()}") from None

    def by_key(self, key: str) -> list[Event]:
        """The events of one key, in log order (one key lives in one partition)."""
        return sorted((e for e in self.events if e.key == key), key=lambda e: (e.partition, e.offset))

    def deduplicated(self, key: str) -> list[Event]:
        """The events of one key, the first of each event_id only (the consumers' documented contract)."""
        seen: set[str] = set()
        out: list[Event] = []
        for event in self.by_key(key):
            if event.event_id not in seen:
                seen.add(event.event_id)
                out.append(event)
        return out

    def statuses(self, key: str, *, payment_id: str | None = None) -> list[str]:
        """Statuses of one key after deduplication (for `vrp.status`: of one payment, or of the mandate)."""
        events = self.deduplicated(key)
        if self.logical == VRP_STATUS_TOPIC:
            events = [e for e in events if e.record.get("payment_id") == payment_id]
        return [e.status for e in events]

    def raw_duplicates(self) -> int:
        """How many messages repeated an event_id already read."""
        return len(self.events) - len({e.event_id for e in self.events})

    def differing_duplicates(self) -> list[str]:
        """Event ids read more than once with different bytes (a re-sent event must be the same event)."""
        first: dict[str, bytes] = {}
        differ: list[str] = []
        for event in self.events:
            if first.setdefault(event.event_id, event.raw) != event.raw:
                differ.append(event.event_id)
        return differ

    def find(self, key: str, status: str) -> Event | None:
        """The first event of a key with a status."""
        return next((e for e in self.by_key(key) if e.status == status), None)

    def keys_with(self, status: str) -> set[str]:
        """Keys that have an event with this status."""
        return {e.key for e in self.events if e.status == status}

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for event in self.events:
            counts[event.status] = counts.get(event.status, 0) + 1
        return f"{self.topic}: {len(self.events)} events {counts}"

    def close(self) -> None:
        self.consumer.close()


# -- the approver ------------------------------------------------------------------------------------------------


def rebase(url: str, base: str) -> str:
    """`url` with the scheme, host and port of `base` (the instance the browser reaches)."""
    parts, target = urlsplit(url), urlsplit(base)
    return urlunsplit((target.scheme, target.netloc, parts.path, parts.query, parts.fragment))


class AlreadyAuthorizedError(AssertionError):
    """The approval link answered 409: the flow is authorised already."""


@dataclass
class Decision:
    """The bank's redirect after the approver pressed a button."""

    redirect: str
    query: dict[str, str]


class Approver:
    """A person with a browser: opens our approval link, presses Approve or Reject on the bank's consent page, and
    follows the bank's redirect back to one of our instances."""

    def __init__(self) -> None:
        self.http = httpx.Client(timeout=30, follow_redirects=False)

    def decide(self, link: str, *, via: str, approve: bool = True) -> Decision:
        """Open the approval link on instance `via`, follow it to the consent page, press the button; the bank's
        redirect (not yet delivered). `AlreadyAuthorizedError` when the link says the flow is authorised."""
        opened = self.http.get(rebase(link, via))
        if opened.status_code == 409:
            raise AlreadyAuthorizedError(opened.text[:300])
        assert opened.status_code == 302, f"{opened.status_code} {opened.text[:300]}"
        page = self.http.get(opened.headers["location"], follow_redirects=True)
        assert page.status_code == 200, page.text[:300]
        target, data = decision_post(str(page.url), page.text, "approve" if approve else "reject")
        answer = self.http.post(target, data=data)
        assert answer.status_code in (302, 303), answer.text[:300]
        redirect = str(answer.headers["location"])
        query = {k: v[0] for k, v in parse_qs(urlsplit(redirect).query).items()}
        return Decision(redirect, query)

    def deliver(self, decision: Decision, *, via: str) -> httpx.Response:
        """The browser following the bank's redirect to instance `via`."""
        return self.http.get(rebase(decision.redirect, via))

    def approve(self, link: str, *, via: str, approve: bool = True) -> httpx.Response:
        """Decide and deliver through one instance; our callback API's answer."""
        return self.deliver(self.decide(link, via=via, approve=approve), via=via)

    def close(self) -> None:
        self.http.close()


class ApproveEach:
    """A `TopicLog.wait_until(each=...)` callback: decides every key the first time its AUTHORIZATION_REQUIRED is
    read, through the instance `via()` names; `answers` keeps our callback API's status code per key."""

    def __init__(self, approver: Approver, via: Callable[[], str], *, approve: bool = True) -> None:
        self.approver = approver
        self.via = via
        self.approve = approve
        self.answers: dict[str, int] = {}

    def __call__(self, events: list[Event]) -> None:
        for event in events:
            if event.status == "AUTHORIZATION_REQUIRED" and event.key not in self.answers:
                link = str(event.record["authorization_url"])
                answer = self.approver.approve(link, via=self.via(), approve=self.approve)
                self.answers[event.key] = answer.status_code


# -- the processes -----------------------------------------------------------------------------------------------


@dataclass
class ProcessorProcess(Child):
    """One `dispersion processor` subprocess."""

    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.output()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the ready line is printed (fails when the process exits first)."""
        eventually(lambda: "processor ready:" in self.log(), what=f"{self.name} ready", timeout=timeout, child=self)

    def terminate(self, timeout: float = 45.0) -> int:
        """SIGTERM and wait for the graceful exit; the exit status (SIGKILL after `timeout`)."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
                raise AssertionError(f"{self.name} ignored SIGTERM for {timeout} s:\n{self.log()[-4000:]}") from None
        return int(self.process.returncode)


def log_events(instance: ProcessorProcess) -> list[dict[str, Any]]:
    """The instance's JSON log lines, decoded (anything else in the file is skipped)."""
    out: list[dict[str, Any]] = []
    for line in instance.log().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def write_config(path: Path, tables: Mapping[str, Mapping[str, Any]]) -> None:
    """A TOML file from `{"table.name": {key: value}}` (the demo's writer)."""
    path.write_text(toml_document(tables))


def start_api_processor(
    config: Path, instance: str, env: Mapping[str, str], *extra: str
) -> tuple[subprocess.Popen[bytes], str]:
    """`dispersion processor --role api` on a port the system chooses, once it printed its ready line: the
    process (standard output and error piped) and its API's base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "processor.cli", "processor", "--config", str(config), "--role", "api",
         "--listen", "127.0.0.1:0", "--instance", instance, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env),
    )  # fmt: skip
    assert process.stdout is not None
    ready = process.stdout.readline().decode()
    if not ready.startswith("processor ready: "):
        process.kill()
        _, err = process.communicate(timeout=30)
        raise AssertionError(ready or f"no ready line: {err.decode()[-3000:]}")
    return process, ready.split()[2].removeprefix("api=")


@dataclass
class Deployment:
    """The sandbox and the processor instances of one test, with their shared configuration."""

    directory: Path
    sandbox: SandboxProcess
    config_path: Path
    bootstrap: str
    topics: dict[str, str]
    group_id: str
    store_url: str
    store_key: str
    sockets: list[socket.socket | None]  # each instance's port, held until the instance is started on it
    ports: list[int]
    processors: dict[int, ProcessorProcess] = field(default_factory=dict)
    readers: list[TopicLog] = field(default_factory=list)
    approvers: list[Approver] = field(default_factory=list)
    producers: list[KafkaProducer] = field(default_factory=list)
    admin: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30))

    @property
    def public_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}"

    def start(
        self, index: int, *, wait: bool = True, bootstrap: str | None = None, name: str | None = None
    ) -> ProcessorProcess:
        """Start instance `index` (on its own port, with `name` or a new unique name) and, with `wait`, wait for its
        ready line."""
        name = name or f"p{index}-{uuid.uuid4().hex[:4]}"
        log_path = self.directory / f"processor-{name}.log"
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "DISPERSION_STORE_KEY": self.store_key,
        }
        env.pop("DISPERSION_STORE_ALLOW_DEV_KEY", None)
        # The first start serves on the socket held since the port was chosen; a restart binds the port again.
        sock = self.sockets[index] or listening_socket(port=self.ports[index])
        self.sockets[index] = None
        with sock:  # the child holds it from here: a stopped instance's port refuses connections
            argv = [
                *CLI,
                "processor",
                "--config",
                str(self.config_path),
                "--bootstrap",
                bootstrap or self.bootstrap,
                "--listen-fd",
                str(sock.fileno()),
                "--instance",
                name,
                "--grace",
                "10",
            ]
            child = spawn(name, argv, log_path, env=env, cwd=self.directory, pass_fds=(sock.fileno(),))
        instance = ProcessorProcess(child.name, child.process, child.log_path, self.ports[index])
        self.processors[index] = instance
        if wait:
            instance.wait_ready()
        return instance

    def alive(self) -> list[ProcessorProcess]:
        """The instances still running."""
        return [p for p in self.processors.values() if p.alive]

    def topic_log(self, logical: str = STATUS_TOPIC, *, decode: bool = True) -> TopicLog:
        """A reader of one output topic, from the beginning (closed with the deployment)."""
        reader = TopicLog(self.bootstrap, self.topics[logical], logical, decode=decode)
        self.readers.append(reader)
        return reader

    def approver(self) -> Approver:
        """A browser for the approver (closed with the deployment)."""
        approver = Approver()
        self.approvers.append(approver)
        return approver

    def producer(self) -> KafkaProducer:
        """A producer for the input topics."""
        producer = KafkaProducer(self.bootstrap, self.topics)
        self.producers.append(producer)
        return producer

    def bank_counts(self) -> dict[str, int]:
        """Documents per kind at the sandbox (`GET /__sandbox/counts`)."""
        answer = self.admin.get(f"{self.sandbox.base_url}/__sandbox/counts")
        answer.raise_for_status()
        return {str(k): int(v) for k, v in answer.json().items()}

    def stop_all(self) -> dict[str, int]:
        """SIGTERM every running instance; exit status per instance name."""
        for instance in self.alive():
            instance.process.send_signal(signal.SIGTERM)
        return {p.name: p.terminate() for p in self.processors.values()}

    def logs(self) -> str:
        """The tail of every instance's log (for failure messages)."""
        return "\n".join(f"--- {p.name}\n{p.log()[-3000:]}" for p in self.processors.values())

    def close(self) -> None:
        """Stop every instance (SIGTERM, then SIGKILL after 30 s) and close the readers, approvers, producers and
        the admin client."""
        for instance in self.processors.values():
            if instance.alive:
                instance.process.send_signal(signal.SIGTERM)
        for instance in self.processors.values():
            try:
                instance.process.wait(30)
            except subprocess.TimeoutExpired:
                instance.process.kill()
                instance.process.wait(10)
        for reader in self.readers:
            reader.close()
        for approver in self.approvers:
            approver.close()
        for producer in self.producers:
            producer.producer.flush(0)
        self.admin.close()


DeploymentFactory = Callable[..., Deployment]
FIXTURES = ("deployment_factory_fixture", "e2e_database_fixture")  # import both into a test module to use them


@pytest.fixture(name="deployment_factory")
def deployment_factory_fixture(tmp_path: Path, e2e_database: str) -> Iterator[DeploymentFactory]:
    """Builds a `Deployment`: `deployment_factory(bootstrap, instances=N, partitions=P, engine={...},
    kafka={...}, sandbox_args=(...), tables={"admin": {...}})` (`kafka`: more keys of the `[kafka]` table; `tables`:
    more configuration tables). The sandbox is started; the instances are not (`deployment.start(i)`). Everything
    started is stopped at the end of the test (instances by SIGTERM, then SIGKILL)."""
    with ExitStack() as stack:
        made: list[Deployment] = []

        def build(
            bootstrap: str,
            *,
            instances: int = 1,
            partitions: int = 3,
            engine: Mapping[str, float | int] | None = None,
            kafka: Mapping[str, Any] | None = None,
            sandbox_args: Iterable[str] = ("--file-payment-delay", "0.5", "--vrp-delay", "0.5"),
            create_topics: bool = True,
            tables: Mapping[str, Mapping[str, Any]] | None = None,
        ) -> Deployment:
            directory = tmp_path / f"deployment-{len(made)}"
            directory.mkdir()
            sockets = [stack.enter_context(listening_socket()) for _ in range(instances)]
            ports = [port_of(sock) for sock in sockets]
            redirect_uri = f"http://127.0.0.1:{ports[0]}{CALLBACK_PATH}"
            sandbox = stack.enter_context(
                running_sandbox(
                    directory / "sandbox",
                    "--admin",
                    *sandbox_args,
                    init_args=("--redirect-uri", redirect_uri),
                )
            )
            topics = topic_names(directory.name[-1] + uuid.uuid4().hex[:4])
            if create_topics:
                create_project_topics(bootstrap, topics, partitions=partitions)
            group_id = unique_id("e2e-group")
            integration = dict(sandbox.config["integrations"]["sandbox"])
            config_path = directory / "dispersion.toml"
            config_tables: dict[str, Mapping[str, Any]] = {
                "processor": {"store": e2e_database, "public_url": f"http://127.0.0.1:{ports[0]}"},
                "kafka": {"bootstrap_servers": bootstrap, "group_id": group_id, **(kafka or {})},
                "kafka.topics": topics,
                "engine": {**FAST_ENGINE, **(engine or {})},
                "integrations.sandbox": integration,
                **(tables or {}),
            }
            write_config(config_path, config_tables)
            deployment = Deployment(
                directory=directory,
                sandbox=sandbox,
                config_path=config_path,
                bootstrap=bootstrap,
                topics=topics,
                group_id=group_id,
                store_url=e2e_database,
                store_key=generate_key(),
                sockets=list(sockets),
                ports=ports,
            )
            made.append(deployment)
            return deployment

        try:
            yield build
        finally:
            for deployment in made:
                deployment.close()
