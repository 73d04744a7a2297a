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
from pathlib import Path
from types import FrameType

from processor.devtools.kafka_local import (
    DEFAULT_HEAP,
    KafkaLocalError,
    LocalKafka,
    cache_home,
    fetch_jars,
    kafka_version,
    stop_detached,
)
from processor.devtools.registry_local import DEFAULT_HEAP as REGISTRY_HEAP
from processor.devtools.registry_local import (
    LocalRegistry,
    RegistryLocalError,
    fetch_registry,
    registry_version,
)
from processor.devtools.registry_local import cache_home as registry_home
from processor.devtools.registry_local import stop_detached as stop_registry

USAGE = """usage: dispersion dev SERVICE [ARGS...]

services:
  kafka     a local single-node Apache Kafka (KRaft) from the Maven Central jars (`dispersion dev kafka --help`)
  registry  a local schema registry (Apicurio Registry, Confluent-compatible API) (`dispersion dev registry --help`)
"""


REGISTRY_URL_ENV = "DISPERSION_SCHEMA_REGISTRY_URL"


class _Terminated(BaseException):
    """SIGTERM arrived; unwinds like Ctrl-C so the broker is stopped on the way out."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def kafka_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion dev kafka`."""
    p = argparse.ArgumentParser(
        prog="dispersion dev kafka",
        description="Run a local single-node Apache Kafka (KRaft) on loopback from the Maven Central jars.",
        epilog="The first start fetches the jars with Maven into the cache (DISPERSION_KAFKA_HOME overrides it).",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=("start", "stop", "fetch"),
        default="start",
        help="start (default) the broker, stop a detached one in --dir, or only fetch the jars",
    )
    p.add_argument("--dir", type=Path, help="run directory (data, logs, config); kept, so a restart keeps the data")
    p.add_argument("--port", type=int, help="client port on 127.0.0.1 (default: a free one, kept in --dir)")
    p.add_argument("--controller-port", type=int, help="KRaft controller port (default: a free one, kept in --dir)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--foreground", action="store_true", help="run until Ctrl-C or SIGTERM (the default)")
    mode.add_argument("--detach", action="store_true", help="leave the broker running and exit; needs --dir")
    p.add_argument("--version", default=None, help=f"Apache Kafka version (default {kafka_version()})")
    p.add_argument("--fetch-only", action="store_true", help="same as the `fetch` action (for setup scripts)")
    p.add_argument("--heap", default=DEFAULT_HEAP, help=f"JVM maximum heap (default {DEFAULT_HEAP})")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the broker to answer")
    return p


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def kafka_main(argv: list[str]) -> int:
    """`dispersion dev kafka`."""
    args = kafka_parser().parse_args(argv)
    version = args.version or kafka_version()
    if args.action == "fetch" or args.fetch_only:
        started = time.monotonic()
        libs = fetch_jars(version, cache_home(version), say=_err)
        _err(f"Kafka {version} jars ready in {libs} ({time.monotonic() - started:.1f} s)")
        return 0
    if args.action == "stop":
        if args.dir is None:
            _err("dispersion dev kafka stop: --dir is required")
            return 2
        stopped = stop_detached(args.dir)
        _err("stopped" if stopped else f"no broker of ours runs in {args.dir}")
        return 0 if stopped else 1
    if args.detach and args.dir is None:
        _err("dispersion dev kafka --detach: --dir is required (to stop it later with `dispersion dev kafka stop`)")
        return 2

    broker = LocalKafka(
        args.dir,
        port=args.port,
        controller_port=args.controller_port,
        version=version,
        heap=args.heap,
        startup_timeout=args.timeout,
        say=_err,
    )
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        started = time.monotonic()
        bootstrap = broker.start(detach=args.detach)
        print(f"KAFKA_BOOTSTRAP_SERVERS={bootstrap}", flush=True)
        if args.detach:
            print(f"KAFKA_PID={broker.pid}", flush=True)
            print(f"KAFKA_DIR={broker.directory}", flush=True)
            _err(f"Kafka {version} ready in {time.monotonic() - started:.1f} s; log {broker.log_file}")
            return 0
        _err(
            f"Kafka {version} ready in {time.monotonic() - started:.1f} s (pid {broker.pid}); "
            f"data {broker.directory}; log {broker.log_file}. Ctrl-C stops it."
        )
        while broker.running:
            time.sleep(0.5)
        _err(f"Kafka stopped on its own:\n{broker.log_tail()}")
        return 1
    except (KeyboardInterrupt, _Terminated):
        return 0
    except KafkaLocalError as exc:
        _err(f"dispersion dev kafka: {exc}")
        return 1
    finally:
        # No second signal may interrupt the shutdown half-way; stop() escalates to SIGKILL on its own.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if not args.detach:
                code = broker.stop()
                if code is not None:
                    _err(f"Kafka stopped (exit {code})")
                broker.close()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, signal.default_int_handler)


def registry_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion dev registry`."""
    p = argparse.ArgumentParser(
        prog="dispersion dev registry",
        description="Run a local schema registry (Apicurio Registry, in-memory storage) on loopback; its "
        "Confluent-compatible API is what [kafka] schema_registry_url names.",
        epilog="The first start fetches it with Maven into the cache (DISPERSION_REGISTRY_HOME overrides it).",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=("start", "stop", "fetch"),
        default="start",
        help="start (default) the registry, stop a detached one in --dir, or only fetch it",
    )
    p.add_argument("--dir", type=Path, help="run directory (logs, pid); the schemas live in memory only")
    p.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--foreground", action="store_true", help="run until Ctrl-C or SIGTERM (the default)")
    mode.add_argument("--detach", action="store_true", help="leave the registry running and exit; needs --dir")
    p.add_argument("--version", default=None, help=f"Apicurio Registry version (default {registry_version()})")
    p.add_argument("--fetch-only", action="store_true", help="same as the `fetch` action (for setup scripts)")
    p.add_argument("--heap", default=REGISTRY_HEAP, help=f"JVM maximum heap (default {REGISTRY_HEAP})")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the registry to be ready")
    return p


def registry_main(argv: list[str]) -> int:
    """`dispersion dev registry`."""
    args = registry_parser().parse_args(argv)
    version = args.version or registry_version()
    try:
        if args.action == "fetch" or args.fetch_only:
            started = time.monotonic()
            jar = fetch_registry(version, registry_home(version), say=_err)
            _err(f"Apicurio Registry {version} ready in {jar.parent} ({time.monotonic() - started:.1f} s)")
            return 0
    except RegistryLocalError as exc:
        _err(f"dispersion dev registry: {exc}")
        return 1
    if args.action == "stop":
        if args.dir is None:
            _err("dispersion dev registry stop: --dir is required")
            return 2
        stopped = stop_registry(args.dir)
        _err("stopped" if stopped else f"no registry of ours runs in {args.dir}")
        return 0 if stopped else 1
    if args.detach and args.dir is None:
        _err("dispersion dev registry --detach: --dir is required (to stop it with `dispersion dev registry stop`)")
        return 2
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    registry = LocalRegistry(
        args.dir, port=args.port, version=version, heap=args.heap, startup_timeout=args.timeout, say=_err
    )
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        started = time.monotonic()
        url = registry.start(detach=args.detach)
        print(f"{REGISTRY_URL_ENV}={url}", flush=True)
        if args.detach:
            print(f"REGISTRY_PID={registry.pid}", flush=True)
            print(f"REGISTRY_DIR={registry.directory}", flush=True)
            elapsed = time.monotonic() - started
            _err(f"Apicurio Registry {version} ready in {elapsed:.1f} s; log {registry.console_file}")
            return 0
        _err(
            f"Apicurio Registry {version} ready in {time.monotonic() - started:.1f} s (pid {registry.pid}); "
            f"log {registry.console_file}. Ctrl-C stops it."
        )
        while registry.running:
            time.sleep(0.5)
        _err(f"the registry stopped on its own:\n{registry.log_tail()}")
        return 1
    except (KeyboardInterrupt, _Terminated):
        return 0
    except (RegistryLocalError, KafkaLocalError) as exc:
        _err(f"dispersion dev registry: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if not args.detach:
                code = registry.stop()
                if code is not None:
                    _err(f"registry stopped (exit {code})")
                registry.close()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str]) -> int:
    """Run a `dispersion dev` service."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "kafka":
        return kafka_main(argv[1:])
    if argv[0] == "registry":
        return registry_main(argv[1:])
    _err(f"dispersion dev: unknown service {argv[0]!r}\n\n{USAGE}")
    return 2
