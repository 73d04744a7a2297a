"""What `dispersion demo` starts and stops: the broker, the schema registry, the sandbox bank and the processor.

`Services` records every process it starts (children by pid, the local broker and registry by their handles), so
that `close` stops exactly those; `Progress` is the run's clock and its printed progress lines.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from processor.devtools.processes import Child, answers, eventually, port_of, spawn

T = TypeVar("T")

SANDBOX_DELAYS = ("--file-payment-delay", "1", "--vrp-delay", "1")


class DemoError(Exception):
    """A step of the demo failed; the message says which and what to look at."""


@dataclass
class Progress:
    """The run's time budget and its progress lines."""

    directory: Path
    timeout: float
    out: Any = field(default_factory=lambda: sys.stdout)
    started: float = field(default_factory=time.monotonic)

    @property
    def deadline(self) -> float:
        """When the run's time is up (monotonic clock)."""
        return self.started + self.timeout

    @property
    def logs(self) -> Path:
        """Where the child processes write."""
        return self.directory / "logs"

    def say(self, text: str) -> None:
        """One progress line, with the time since the start."""
        elapsed = time.monotonic() - self.started
        for i, line in enumerate(text.splitlines() or [""]):
            prefix = f"[{elapsed:5.1f}s] " if i == 0 else " " * 9
            print(prefix + line, file=self.out, flush=True)

    def remaining(self, what: str) -> float:
        """Seconds left; `DemoError` when none."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DemoError(f"timed out after {self.timeout:.0f} s {what} (--timeout); logs in {self.logs}")
        return left

    def rel(self, path: Path) -> str:
        """`path` relative to the working directory when below it."""
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
        return str(path)


@dataclass
class Services:
    """The processes of one demo run: what it started, so that `close` stops exactly that."""

    progress: Progress
    bootstrap: str | None = None
    registry: bool = False  # Confluent wire format
    registry_url: str | None = None  # a registry to use (else one is started when `registry`)
    children: list[Child] = field(default_factory=list)
    kafka: Any = None  # processor.devtools.kafka_local.LocalKafka when the demo started the broker
    local_registry: Any = None  # processor.devtools.registry_local.LocalRegistry when the demo started it

    def start_kafka(self) -> str:
        """The broker's bootstrap address: the given one, or a local broker started now."""
        if self.bootstrap:
            self.progress.say(
                f"Kafka: using the broker at {self.bootstrap} (topics and consumer group of this run only)"
            )
            return self.bootstrap
        from processor.devtools.kafka_local import KafkaLocalError, LocalKafka, cache_home, jars_ready, kafka_version

        version = kafka_version()
        if not jars_ready(cache_home(version)):
            self.progress.say(f"Kafka: fetching the Apache Kafka {version} jars with Maven (first run only)")
        self.progress.say("Kafka: starting a local single-node broker (KRaft)")
        self.kafka = LocalKafka(
            self.progress.directory / "kafka",
            startup_timeout=min(120.0, self.progress.remaining("starting Kafka")),
            say=self.progress.say,
        )
        try:
            bootstrap = str(self.kafka.start())
        except (KafkaLocalError, OSError) as exc:
            raise DemoError(f"Kafka did not start: {exc}") from exc
        self.progress.say(f"Kafka: {bootstrap} (pid {self.kafka.pid}, log {self.progress.rel(self.kafka.log_file)})")
        return bootstrap

    def start_registry(self) -> str | None:
        """The schema registry's URL with `--registry`: the given one, or a local registry started now."""
        if not self.registry:
            return None
        if self.registry_url:
            self.progress.say(f"schema registry: using {self.registry_url} (Confluent wire format)")
            return self.registry_url
        from processor.devtools.registry_local import (
            LocalRegistry,
            RegistryLocalError,
            cache_home,
            registry_version,
            runner_jar,
        )

        if runner_jar(cache_home()) is None:
            self.progress.say(
                f"schema registry: fetching Apicurio Registry {registry_version()} with Maven (first run only)"
            )
        self.progress.say("schema registry: starting a local Apicurio Registry (in memory)")
        self.local_registry = LocalRegistry(
            self.progress.directory / "registry",
            startup_timeout=min(120.0, self.progress.remaining("starting the registry")),
        )
        try:
            url = str(self.local_registry.start())
        except (RegistryLocalError, OSError) as exc:
            raise DemoError(f"the schema registry did not start: {exc}") from exc
        self.progress.say(
            f"schema registry: {url} (pid {self.local_registry.pid}, log "
            f"{self.progress.rel(self.local_registry.console_file)}); Confluent wire format"
        )
        return url

    def child_env(self) -> dict[str, str]:
        """The environment of the sandbox and the processor."""
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["DISPERSION_STORE_ALLOW_DEV_KEY"] = "1"  # a development key for the store's secrets: demo only
        return env

    def _spawn(self, name: str, args: list[str], log: str, sock: socket.socket) -> Child:
        """`python -m processor.cli ARGS --listen-fd FD` serving on `sock` (held since the port was chosen), in
        its own session (Ctrl-C reaches only the demo, which stops it)."""
        child = spawn(
            name,
            [sys.executable, "-m", "processor.cli", *args, "--listen-fd", str(sock.fileno())],
            self.progress.logs / log,
            env=self.child_env(),
            cwd=self.progress.directory,
            pass_fds=(sock.fileno(),),
            new_session=True,
            append=True,
        )
        self.children.append(child)
        return child

    def start_sandbox(self, sock: socket.socket) -> tuple[Child, str]:
        """The sandbox bank as a child process serving on `sock` (not yet waited for)."""
        clients = self.progress.directory / "sandbox-bank" / "clients.json"
        args = ["sandbox", "--clients", str(clients), *SANDBOX_DELAYS]
        return self._spawn("sandbox bank", args, "sandbox.log", sock), f"http://127.0.0.1:{port_of(sock)}"

    def wait_http(self, child: Child, url: str) -> None:
        """Until `url` answers (any status below 500)."""
        self.wait(lambda: answers(url), f"waiting for the {child.name} at {url}", child)

    def start_processor(self, config: Path, bootstrap: str, sock: socket.socket) -> Child:
        """One `dispersion processor` (role all) as a child process serving on `sock` (not yet waited for)."""
        args = [
            "processor",
            "--config",
            str(config),
            "--bootstrap",
            bootstrap,
            "--instance",
            "demo-1",
            "--log-format",
            "console",
            "--grace",
            "5",
        ]
        return self._spawn("processor", args, "processor.log", sock)

    def wait_ready(self, child: Child) -> str:
        """Until the processor prints its ready line; that line."""

        def ready_line() -> str | None:
            lines = child.output().splitlines()
            return next((line for line in lines if line.startswith("processor ready:")), None)

        return self.wait(ready_line, "waiting for the processor to start", child)

    def wait(self, check: Callable[[], T | None], what: str, child: Child) -> T:
        """`check()` once it is true, within the run's time; `ChildExitedError` when `child` exits first,
        `DemoError` when the run's time is up."""
        try:
            return eventually(check, what=what, timeout=self.progress.remaining(what), interval=0.2, child=child)
        except TimeoutError:
            self.progress.remaining(what)  # the run's time is up: DemoError saying so
            raise

    def check_children(self) -> None:
        """Raise `ChildExitedError` when a child exited."""
        for child in self.children:
            child.check()

    def close(self) -> None:
        """Stop every child (processor first, then the bank, then Kafka), by pid; never raises."""
        for child in reversed(self.children):
            if child.alive:
                code = child.stop(timeout=30.0 if child.name == "processor" else 10.0)
                how = f"exit status {code}" if code >= 0 else f"ended by signal {-code}"
                self.progress.say(f"stopped the {child.name} (pid {child.pid}, {how})")
        for label, service in (("the schema registry", self.local_registry), ("Kafka", self.kafka)):
            if service is None:
                continue
            pid = service.pid
            try:
                code = service.stop()
            except Exception as exc:  # cleanup must go on; say what happened
                self.progress.say(f"stopping {label} (pid {pid}) failed: {exc}")
            else:
                if pid is not None:
                    self.progress.say(f"stopped {label} (pid {pid}, exit status {code})")
        self.progress.say(f"logs: {self.progress.logs}")
