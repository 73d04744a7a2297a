"""`dispersion processor`: one processor instance, a member of the deployment's consumer group.

    dispersion processor --config dispersion.toml [--bootstrap HOST:PORT] [--listen HOST:PORT | --listen-fd FD]
                         [--role all|api] [--instance NAME] [--log-format json|console]

With `--role all` (the default) the instance runs, over the configured store:

- one Kafka consumer (thread) for `payroll.batches`, `vrp.mandates` and `vrp.payments`: each message is stored by
  the engine's intake (never a bank call), then its offset is committed; bad input is dead-lettered;
- the engine's worker (asyncio): claims due flows, mandates and payments with leases (`FOR UPDATE SKIP LOCKED`
  on PostgreSQL), so any number of instances share the work and a dead instance's work is taken over;
- the outbox relay (thread): status events to `dispersion.status` and `vrp.status`, in order per key, each once;
- the HTTP server (uvicorn): the callback API (approval links, the bank's redirect), `/healthz`, `/metrics`,
  the admin API under `/admin` (token from `[admin]`; processor/api/admin.py) and the operator console under
  `/console` when `[console]` names operators (processor/api/console/, docs/console.md).

`--role api` serves only the HTTP part (for a separate, public callback API deployment): the redirect is checked
and the code exchanged there; the payment is then due work for any processor's worker.

SIGTERM or Ctrl-C: the consumer stops taking messages, commits what it handled and closes (a static member,
`group.instance.id` = `--instance`, keeps its partitions until it is back or its session expires; a dynamic one
leaves the group); the worker stops claiming and lets in-flight steps finish (`--grace` seconds, then cancels
them: each step is safe to resume); the relay delivers what it handed to Kafka; the HTTP server closes. Exit
status 0. Fenced by a live instance of the same name: the message says so, exit status 1.

With `[telemetry] otlp_endpoint` (or OTEL_EXPORTER_OTLP_ENDPOINT) every batch is a trace, exported with OTLP
(processor/cli/telemetry.py, docs/operations.md).

The first line on standard output is `processor ready: api=http://HOST:PORT instance=NAME` once everything runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import structlog
import uvicorn
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from consumers.attempts import StoreAttempts
from consumers.batches import BatchHandler, EngineIntake
from consumers.loop import AtLeastOnceConsumer, ConsumerFencedError, Handler, route
from consumers.vrp import VrpIntake, vrp_handlers
from processor.api.admin import admin_app
from processor.api.callback import create_app
from processor.api.console.app import console_app, console_off
from processor.api.console.auth import ConsoleAuth, console_auth
from processor.api.metrics import StoreCollector
from processor.bank import IssuerMismatch
from processor.cli.common import QuietServer, bind, inherited, listen_address
from processor.cli.config import Config, default_config_path, load_config
from processor.cli.gc_tuning import tune_gc
from processor.cli.logs import configure_logging
from processor.cli.malloc import tune_malloc
from processor.cli.telemetry import Telemetry, start_telemetry
from processor.domain.settings import ConfigError
from processor.engine.assembly import Engine, build_engine
from processor.engine.intake import Guard, calendars_of
from processor.engine.vrp import attach_vrp
from processor.kafka.clients import consumer_config, producer_config
from processor.kafka.settings import KafkaSettings, KafkaSetupError, settings_from
from processor.store import Store, StoreError, load_cipher
from producers.dlq import DeadLetterPublisher
from producers.relay import OutboxRelay
from producers.replay import DeadLetterReplayer, store_recorder
from schemas.topics import BATCHES_TOPIC, DLQ_TOPIC

log = structlog.get_logger("processor.cli.service")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
ROLES = ("all", "api")


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion processor`."""
    p = argparse.ArgumentParser(prog="dispersion processor", description="Run one processor instance.")
    p.add_argument("--config", help="configuration file (default: $DISPERSION_CONFIG or ./dispersion.toml)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: [kafka] or $KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--listen", help="HOST:PORT of the HTTP server (default: the host and port of public_url)")
    p.add_argument(
        "--listen-fd",
        type=int,
        metavar="FD",
        help="serve on this inherited listening socket instead of binding one (a starter that holds the port)",
    )
    p.add_argument("--role", choices=ROLES, default="all", help="all (default) or api (HTTP only)")
    p.add_argument(
        "--instance",
        help="name in logs, lease owners, client ids and the Kafka group.instance.id; unique among running "
        "instances, the same across restarts (default: host-pid)",
    )
    p.add_argument("--log-format", choices=("json", "console"), default="json")
    p.add_argument("--log-level", choices=("debug", "info", "warning"), default="info")
    p.add_argument("--grace", type=float, default=30.0, help="seconds in-flight steps may take at shutdown")
    return p


@dataclass
class _Thread:
    """A component running in its own thread; `error` holds what killed it, if anything did."""

    name: str
    target: Callable[[], None]
    thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> None:
        def run() -> None:
            try:
                self.target()
            except BaseException as exc:
                self.error = exc
                log.exception("component_failed", component=self.name)

        self.thread = threading.Thread(target=run, name=self.name, daemon=True)
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


@dataclass
class Processor:
    """One instance's parts, started by `run` and stopped by `stop` (or a signal)."""

    config: Config
    kafka: KafkaSettings | None
    store: Store
    role: str = "all"
    instance: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    grace: float = 30.0
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[_Thread] = field(default_factory=list)
    telemetry: Telemetry | None = None  # traces, when configured (processor/cli/telemetry.py)
    # Makes the relay's Kafka producers (a new one after a fatal error); None: librdkafka's `Producer`.
    producer_factory: Callable[[dict[str, Any]], Any] | None = None

    def __post_init__(self) -> None:
        bank_options = None
        if self.telemetry is not None:
            self.telemetry.observe(self.store)
            bank_options = self.telemetry.bank_options()
        self.engine: Engine = build_engine(self.config, self.store, bank_options=bank_options)
        self.console_auth = console_auth(self.config.console)
        self.vrp = attach_vrp(self.engine)
        self._stopped = asyncio.Event()
        self._relay_stop = threading.Event()  # set after the worker stopped, so its last events go out too
        self.relay: OutboxRelay | None = None
        self._worker_task: asyncio.Task[None] | None = None

    def stop(self) -> None:
        """Begin a graceful shutdown (idempotent; safe from a signal handler on the loop)."""
        if not self.stop_event.is_set():
            log.info("processor_stopping", instance=self.instance)
        self.stop_event.set()
        self._stopped.set()

    async def health(self) -> Mapping[str, Any]:
        """The instance's health: its threads and worker alive, the relay with a working producer, the store
        readable. Anything else is "down: why" and makes `/healthz` answer 503."""
        components = {t.name: "ok" if t.alive else f"down: {t.error or 'stopped'!r}" for t in self.threads}
        relay_problem = None if self.relay is None else self.relay.problem
        if relay_problem is not None and components.get("relay") == "ok":
            components["relay"] = f"down: {relay_problem}"
        if self._worker_task is not None:
            done = self._worker_task.done()
            error = self._worker_task.exception() if done and not self._worker_task.cancelled() else None
            components["worker"] = f"down: {error or 'stopped'!r}" if done else "ok"
        try:
            await self.store.arun(lambda tx: tx.outbox.backlog(), write=False)
            components["store"] = "ok"
        except StoreError as exc:
            components["store"] = f"down: {exc}"
        reasons = [f"{name} {state}" for name, state in components.items() if state != "ok"]
        if self.stop_event.is_set():
            reasons.append("stopping")
        body: dict[str, Any] = {"status": "unavailable" if reasons else "ok", "instance": self.instance}
        body.update(role=self.role, **components)
        if reasons:
            body["reason"] = "; ".join(reasons)
        return body

    def http_app(self) -> Starlette:
        """The callback API with `/healthz`, plus `/metrics`."""
        callback = create_app(self.engine.authorizer, redirect_paths=self.engine.redirect_paths(), health=self.health)

        shared = CollectorRegistry(auto_describe=True)  # read from the store at scrape time, not process-global
        shared.register(StoreCollector(self.store))

        def scrape() -> bytes:
            return generate_latest(REGISTRY) + generate_latest(shared)

        async def metrics(request: Request) -> Response:
            return Response(await asyncio.to_thread(scrape), media_type=CONTENT_TYPE_LATEST)

        replayer = None if self.kafka is None else DeadLetterReplayer(self.kafka)
        admin = admin_app(
            self.store,
            tokens=self.config.admin.by_name,
            integrations=self.config.integrations,
            replayer=replayer,
            controls=self.config.controls,
        )
        routes: list[BaseRoute] = [Route("/metrics", metrics, methods=["GET"]), Mount("/admin", app=admin)]
        if self.console_auth is not None:  # the operator console, when [console] names operators
            console = console_app(
                self.store,
                self.console_auth,
                public_url=self.config.public_url,
                integrations=self.config.integrations,
                replayer=replayer,
                clock=self.engine.ctx.clock,
                controls=self.config.controls,
            )
            routes.append(Route("/console", lambda request: RedirectResponse("/console/", 308), methods=["GET"]))
            routes.append(Mount("/console", app=console))
        else:  # says how to turn it on, instead of a bare "Not Found"
            routes.append(Mount("/console", app=console_off()))
        return Starlette(routes=[*routes, Mount("/", app=callback)])

    def _consumer(self, loop: asyncio.AbstractEventLoop) -> AtLeastOnceConsumer:
        assert self.kafka is not None

        def wake() -> None:  # the intakes run in the consumer's thread; the worker lives on the loop
            loop.call_soon_threadsafe(self.engine.wake)

        batch_intake = EngineIntake(
            self.store,
            integrations=self.config.integrations,
            clock=self.engine.ctx.clock,
            calendars=calendars_of(self.config.integrations),
            guard=Guard(
                window=timedelta(days=self.config.engine.duplicate_window_days),
                threshold=Decimal(str(self.config.engine.duplicate_overlap)),
                public_url=self.config.public_url,
            ),
            controls=self.config.controls,
        )
        handlers: dict[str, Handler] = {
            self.kafka.topic(BATCHES_TOPIC): BatchHandler(batch_intake, wire=self.kafka.wire),
            **vrp_handlers(self.kafka, VrpIntake(self.vrp, wake=wake)),
        }
        dead_letters = DeadLetterPublisher(
            producer_config(self.kafka, f"dlq-{self.instance}"),
            topic=self.kafka.topic(DLQ_TOPIC),
            wire=self.kafka.wire,
            recorder=store_recorder(self.store, self.engine.ctx.clock.now),  # listed by the admin API
        )
        config = consumer_config(
            self.kafka, "processor", instance=self.instance, **{"client.id": f"dispersion-processor-{self.instance}"}
        )
        attempts = StoreAttempts(self.store, self.engine.ctx.clock.now)  # survives a crash of this process
        return AtLeastOnceConsumer(config, list(handlers), route(handlers), dead_letters, attempts=attempts)

    def _start_threads(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self.kafka is not None
        consumer = self._consumer(loop)
        relay = self.relay = OutboxRelay(
            self.store,
            producer_config(self.kafka, f"relay-{self.instance}"),
            owner=f"relay-{self.instance}-{uuid.uuid4().hex[:6]}",
            topic_name=self.kafka.topic,
            wire=self.kafka.wire,
            producer_factory=self.producer_factory,
        )
        self.threads = [
            _Thread("consumer", lambda: consumer.run(self.stop_event)),
            _Thread("relay", lambda: relay.run(self._relay_stop)),
        ]
        for component in self.threads:
            component.start()

    async def _watch_threads(self) -> None:
        """A component thread that died stops the instance (its supervisor restarts it)."""
        while not self._stopped.is_set():
            if any(t.error is not None for t in self.threads):
                log.error("processor_component_died", instance=self.instance)
                self.stop()
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), timeout=0.5)

    async def run(self, sock: socket.socket, *, ready: Callable[[], None] = lambda: None) -> int:
        """Run until `stop()`; the exit status."""
        loop = asyncio.get_running_loop()
        server = QuietServer(uvicorn.Config(self.http_app(), log_level="warning", lifespan="off", log_config=None))
        http = asyncio.create_task(server.serve(sockets=[sock]), name="http")
        worker_task: asyncio.Task[None] | None = None
        worker = None
        if self.role == "all":
            self._start_threads(loop)
            worker = self.engine.worker(owner=f"worker-{self.instance}-{uuid.uuid4().hex[:6]}")
            worker_task = self._worker_task = asyncio.create_task(worker.run(), name="worker")
        watch = asyncio.create_task(self._watch_threads(), name="watch")
        while not server.started and not http.done():  # noqa: ASYNC110 (uvicorn offers no "started" event)
            await asyncio.sleep(0.02)
        failed = http.done()
        if not failed:
            ready()
            await self._stopped.wait()
        # Shutdown: stop taking input first, then let in-flight steps finish, then deliver events, then HTTP.
        self.stop()
        for component in self.threads:
            if component.name == "consumer":
                await asyncio.to_thread(component.join, self.grace)
        if worker is not None and worker_task is not None:
            await worker.stop(self.grace)
            await asyncio.gather(worker_task, return_exceptions=True)
        self._relay_stop.set()
        for component in self.threads:
            await asyncio.to_thread(component.join, self.grace)
        server.should_exit = True
        await asyncio.gather(http, watch, return_exceptions=True)
        await self.engine.aclose()
        died = [t.name for t in self.threads if t.error is not None]
        for component in self.threads:
            if isinstance(component.error, ConsumerFencedError):  # an operator's mistake: say so plainly
                print(f"dispersion processor: {component.error}", file=sys.stderr, flush=True)
        if failed or died:
            log.error("processor_stopped_after_failure", instance=self.instance, components=died or ["http"])
            return EXIT_FAILED
        log.info("processor_stopped", instance=self.instance)
        return EXIT_OK


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (every platform but Windows: pyproject.toml), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def _serve(processor: Processor, sock: socket.socket) -> int:
    try:
        await processor.engine.verify_banks()  # a bank whose discovery names another issuer: refuse to start
    except IssuerMismatch as exc:
        print(f"dispersion processor: {exc}", file=sys.stderr)
        await processor.engine.aclose()
        return EXIT_USAGE
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, processor.stop)
    host, port = sock.getsockname()[:2]
    # What exists now (modules, settings, the engine, the banks' discovery) mostly lives as long as the process:
    # frozen out of the collector's walks (processor/cli/gc_tuning.py says what that costs and saves).
    young, frozen = tune_gc()

    def ready() -> None:
        print(f"processor ready: api=http://{host}:{port} instance={processor.instance}", flush=True)
        log.info(
            "processor_started",
            instance=processor.instance,
            event_loop=type(loop).__module__,
            gc_young_threshold=young,
            gc_frozen=frozen,
        )
        config = processor.config
        print(console_line(processor.console_auth, config.public_url, config.source), flush=True)

    return await processor.run(sock, ready=ready)


def console_line(auth: ConsoleAuth | None, public_url: str, source: str) -> str:
    """Where the operator console is (or how to turn it on), printed once the processor is ready."""
    if auth is None:
        return f"console: off (no [console] operators in {source}; docs/console.md says how to add one)"
    names = ", ".join(sorted(auth.operators))
    return f"console: {public_url.rstrip('/')}/console/ (operators: {names})"


def main(argv: list[str]) -> int:
    """Run `dispersion processor`."""
    args = parser().parse_args(argv)
    tune_malloc()  # large freed buffers go back to the system (a 100,000-transfer batch: processor/cli/malloc.py)
    instance = args.instance or f"{socket.gethostname()}-{os.getpid()}"
    configure_logging(args.log_format, level=getattr(logging, args.log_level.upper()), instance=instance)
    try:
        config = load_config(args.config or default_config_path())
        kafka = None
        if args.role == "all":
            kafka = settings_from(config.kafka, bootstrap=args.bootstrap)
        if args.listen_fd is not None:
            sock = inherited(args.listen_fd)
        else:
            sock = bind(*listen_address(args.listen or config.processor.public_url))
        threads = config.processor.store_threads
        # Connections for the store threads and for the threads that run their own transactions (the consumer,
        # the relay, the metrics scrape), with room to spare.
        store = Store.open(config.processor.store, cipher=load_cipher(), pool_size=max(8, threads + 4), threads=threads)
    except (ConfigError, KafkaSetupError, StoreError) as exc:
        print(f"dispersion processor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    telemetry = start_telemetry(config.telemetry.otlp_endpoint, instance=instance)
    try:
        processor = Processor(
            config, kafka, store, role=args.role, instance=instance, grace=args.grace, telemetry=telemetry
        )
        # uvloop's loop runs the engine, the bank calls and the HTTP server: at month end the processor's CPU over
        # the sandbox's was lower with it in each of four pairs of runs (docs/benchmarks.md, sixth pass); the
        # consumer threads keep asyncio's.
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(_serve(processor, sock))
    finally:
        sock.close()
        store.close()
        if telemetry is not None:
            telemetry.shutdown()
