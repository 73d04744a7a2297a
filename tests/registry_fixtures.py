"""Schema registry fixtures (loaded from tests/conftest.py as a pytest plugin): a real registry for the tests.

- `schema_registry_url` (session): the Confluent-compatible API of a schema registry. `DISPERSION_SCHEMA_REGISTRY_URL`
  when set; else `dispersion dev registry` (Apicurio Registry, in memory) started once for the whole run and stopped
  (SIGTERM to its pid) at the end.
- `wire` (parametrized): the wire settings of a test, once `single-object` (no registry) and once `confluent`
  (the session registry); a test taking it runs the Kafka path in both wire formats.
- `register_subjects(settings)`: what `dispersion topics` does for the registry, for a test's own topic names.

Without Java or Maven the fixtures skip; with `DISPERSION_REQUIRE_KAFKA=1` (CI) they fail instead.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_fixtures import REQUIRE_KAFKA_ENV

from processor.devtools.processes import die_with_parent
from processor.kafka.settings import KafkaSettings
from processor.kafka.topics import SubjectResult, ensure_subjects
from processor.kafka.wire import Registry, WireSettings
from schemas import CONFLUENT, SINGLE_OBJECT

REGISTRY_URL_ENV = "DISPERSION_SCHEMA_REGISTRY_URL"
ROOT = Path(__file__).resolve().parent.parent


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_KAFKA_ENV, "") == "1":
        pytest.fail(f"{REQUIRE_KAFKA_ENV}=1 but no schema registry could be started: {reason}")
    pytest.skip(f"no schema registry: {reason}")


def _first_line(process: subprocess.Popen[str], prefix: str, timeout: float) -> str | None:
    """The first stdout line starting with `prefix`, or None when the process ends or the time is up."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = process.stdout.readline()
            if not line:
                return None
            if line.startswith(prefix):
                return line.strip()[len(prefix) :]
    return None


@pytest.fixture(scope="session")
def schema_registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Confluent-compatible API of a real schema registry for this test session."""
    configured = os.environ.get(REGISTRY_URL_ENV, "").strip()
    if configured:
        yield configured
        return
    directory = tmp_path_factory.mktemp("registry-session")
    log = (directory / "dev-registry.err").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "processor.cli", "dev", "registry", "--dir", str(directory), "--timeout", "240"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=die_with_parent(),  # the registry goes if the test session is killed
    )
    try:
        url = _first_line(process, f"{REGISTRY_URL_ENV}=", timeout=900)  # the first run downloads it
        if url is None:
            log.flush()
            _unavailable((directory / "dev-registry.err").read_text(errors="replace")[-2000:])
        assert url is not None
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # `dev registry` stops the JVM it started, then exits
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        log.close()


@pytest.fixture(params=[SINGLE_OBJECT, CONFLUENT])
def wire(request: pytest.FixtureRequest) -> WireSettings:
    """The wire settings of a test: single-object without a registry, or confluent with the session registry."""
    if request.param == SINGLE_OBJECT:
        return WireSettings()
    return WireSettings(CONFLUENT, Registry(request.getfixturevalue("schema_registry_url")))


def register_subjects(settings: KafkaSettings) -> list[SubjectResult]:
    """Register the subjects of `settings`' topics (when it names a registry), as `dispersion topics` does."""
    registry = settings.wire.registry
    return ensure_subjects(registry, settings) if registry is not None else []
