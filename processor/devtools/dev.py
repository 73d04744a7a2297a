"""`dispersion dev ...`: local development services.

`dispersion dev kafka` starts a real single-node Apache Kafka (KRaft) on a free loopback port, from the jars on
Maven Central (fetched once into a cache), prints `KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:PORT` on standard output
and runs until Ctrl-C or SIGTERM, then stops the broker cleanly. `dispersion dev registry` does the same for a
schema registry (Apicurio Registry, in memory) and prints `DISPERSION_SCHEMA_REGISTRY_URL=...`. See docs/kafka.md.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from processor.devtools import kafka_local, registry_local
from processor.devtools.jvm_service import JvmService, JvmServiceError

USAGE = """usage: dispersion dev SERVICE [ARGS...]

services:
  kafka     a local single-node Apache Kafka (KRaft) from the Maven Central jars (`dispersion dev kafka --help`)
  registry  a local schema registry (Apicurio Registry, Confluent-compatible API) (`dispersion dev registry --help`)
"""


REGISTRY_URL_ENV = "DISPERSION_SCHEMA_REGISTRY_URL"


class _Terminated(BaseException):
    """SIGTERM arrived; unwinds like Ctrl-C so the service is stopped on the way out."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


@dataclass(frozen=True)
class _Service:
    """What differs between the `dispersion dev` services; `_parser` and `_run` are the same for all of them."""

    command: str  # `dispersion dev <command>`
    noun: str  # "broker", "registry": in help texts and messages
    product: str  # "Apache Kafka", "Apicurio Registry"
    short: str  # "Kafka", "Apicurio Registry": in "<short> <version> ready in ..."
    fetch_what: str  # what the `fetch` action fetches, in its help
    description: str
    epilog: str
    dir_help: str
    port_help: str
    ready_help: str  # what --timeout waits for
    default_version: Callable[[], str]
    default_heap: str
    fetch: Callable[[str], Path]  # fetch a version into its cache; the folder to name in the message
    fetched: str  # "{version}"-template of the fetch message's subject
    stop_detached: Callable[[Path], bool]
    make: Callable[[argparse.Namespace, str], JvmService]
    address_env: str  # the variable printed with the service's address
    env_prefix: str  # KAFKA_PID, KAFKA_DIR
    shows_data: bool  # whether the run directory holds data worth naming


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _parser(
    service: _Service, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> argparse.ArgumentParser:
    """The arguments every `dispersion dev` service takes (`extra` adds its own)."""
    p = argparse.ArgumentParser(
        prog=f"dispersion dev {service.command}", description=service.description, epilog=service.epilog
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=("start", "stop", "fetch"),
        default="start",
        help=f"start (default) the {service.noun}, stop a detached one in --dir, or only fetch {service.fetch_what}",
    )
    p.add_argument("--dir", type=Path, help=service.dir_help)
    p.add_argument("--port", type=int, help=service.port_help)
    if extra:
        extra(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--foreground", action="store_true", help="run until Ctrl-C or SIGTERM (the default)")
    mode.add_argument("--detach", action="store_true", help=f"leave the {service.noun} running and exit; needs --dir")
    p.add_argument("--version", default=None, help=f"{service.product} version (default {service.default_version()})")
    p.add_argument("--fetch-only", action="store_true", help="same as the `fetch` action (for setup scripts)")
    p.add_argument("--heap", default=service.default_heap, help=f"JVM maximum heap (default {service.default_heap})")
    p.add_argument("--timeout", type=float, default=120.0, help=f"seconds to wait for the {service.ready_help}")
    return p


def _run(service: _Service, args: argparse.Namespace) -> int:
    """Fetch, stop a detached one, or start the service and run it until Ctrl-C or SIGTERM (or detach)."""
    name = f"dispersion dev {service.command}"
    version = args.version or service.default_version()
    try:
        if args.action == "fetch" or args.fetch_only:
            started = time.monotonic()
            where = service.fetch(version)
            subject = service.fetched.format(version=version)
            _err(f"{subject} ready in {where} ({time.monotonic() - started:.1f} s)")
            return 0
    except JvmServiceError as exc:
        _err(f"{name}: {exc}")
        return 1
    if args.action == "stop":
        if args.dir is None:
            _err(f"{name} stop: --dir is required")
            return 2
        stopped = service.stop_detached(args.dir)
        _err("stopped" if stopped else f"no {service.noun} of ours runs in {args.dir}")
        return 0 if stopped else 1
    if args.detach and args.dir is None:
        _err(f"{name} --detach: --dir is required (to stop it later with `{name} stop`)")
        return 2

    running = service.make(args, version)
    title = f"{service.short} {version}"
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        started = time.monotonic()
        address = running.start(detach=args.detach)
        print(f"{service.address_env}={address}", flush=True)
        if args.detach:
            print(f"{service.env_prefix}_PID={running.pid}", flush=True)
            print(f"{service.env_prefix}_DIR={running.directory}", flush=True)
            _err(f"{title} ready in {time.monotonic() - started:.1f} s; log {running.log_file}")
            return 0
        data = f"data {running.directory}; " if service.shows_data else ""
        _err(
            f"{title} ready in {time.monotonic() - started:.1f} s (pid {running.pid}); "
            f"{data}log {running.log_file}. Ctrl-C stops it."
        )
        while running.running:
            time.sleep(0.5)
        _err(f"{running.title} stopped on its own:\n{running.log_tail()}")
        return 1
    except (KeyboardInterrupt, _Terminated):
        return 0
    except JvmServiceError as exc:
        _err(f"{name}: {exc}")
        return 1
    finally:
        # No second signal may interrupt the shutdown half-way; stop() escalates to SIGKILL on its own.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if not args.detach:
                code = running.stop()
                if code is not None:
                    _err(f"{running.title} stopped (exit {code})")
                running.close()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _kafka_fetch(version: str) -> Path:
    return kafka_local.fetch_jars(version, kafka_local.cache_home(version), say=_err)


def _registry_fetch(version: str) -> Path:
    return registry_local.fetch_registry(version, registry_local.cache_home(version), say=_err).parent


KAFKA = _Service(
    command="kafka",
    noun="broker",
    product="Apache Kafka",
    short="Kafka",
    fetch_what="the jars",
    description="Run a local single-node Apache Kafka (KRaft) on loopback from the Maven Central jars.",
    epilog="The first start fetches the jars with Maven into the cache (DISPERSION_KAFKA_HOME overrides it).",
    dir_help="run directory (data, logs, config); kept, so a restart keeps the data",
    port_help="client port on 127.0.0.1 (default: a free one, kept in --dir)",
    ready_help="broker to answer",
    default_version=kafka_local.kafka_version,
    default_heap=kafka_local.DEFAULT_HEAP,
    fetch=_kafka_fetch,
    fetched="Kafka {version} jars",
    stop_detached=kafka_local.stop_detached,
    make=lambda args, version: kafka_local.LocalKafka(
        args.dir,
        port=args.port,
        controller_port=args.controller_port,
        version=version,
        heap=args.heap,
        startup_timeout=args.timeout,
        say=_err,
    ),
    address_env="KAFKA_BOOTSTRAP_SERVERS",
    env_prefix="KAFKA",
    shows_data=True,
)

REGISTRY = _Service(
    command="registry",
    noun="registry",
    product="Apicurio Registry",
    short="Apicurio Registry",
    fetch_what="it",
    description="Run a local schema registry (Apicurio Registry, in-memory storage) on loopback; its "
    "Confluent-compatible API is what [kafka] schema_registry_url names.",
    epilog="The first start fetches it with Maven into the cache (DISPERSION_REGISTRY_HOME overrides it).",
    dir_help="run directory (logs, pid); the schemas live in memory only",
    port_help="port on 127.0.0.1 (default: a free one)",
    ready_help="registry to be ready",
    default_version=registry_local.registry_version,
    default_heap=registry_local.DEFAULT_HEAP,
    fetch=_registry_fetch,
    fetched="Apicurio Registry {version}",
    stop_detached=registry_local.stop_detached,
    make=lambda args, version: registry_local.LocalRegistry(
        args.dir, port=args.port, version=version, heap=args.heap, startup_timeout=args.timeout, say=_err
    ),
    address_env=REGISTRY_URL_ENV,
    env_prefix="REGISTRY",
    shows_data=False,
)


def _controller_port(p: argparse.ArgumentParser) -> None:
    p.add_argument("--controller-port", type=int, help="KRaft controller port (default: a free one, kept in --dir)")


def kafka_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion dev kafka`."""
    return _parser(KAFKA, _controller_port)


def registry_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion dev registry`."""
    return _parser(REGISTRY)


def main(argv: list[str]) -> int:
    """Run a `dispersion dev` service."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "kafka":
        return _run(KAFKA, kafka_parser().parse_args(argv[1:]))
    if argv[0] == "registry":
        return _run(REGISTRY, registry_parser().parse_args(argv[1:]))
    _err(f"dispersion dev: unknown service {argv[0]!r}\n\n{USAGE}")
    return 2
