"""`dispersion dev registry --detach` and `stop`: a real Apicurio Registry from the Maven Central download, its
Confluent-compatible API answering on loopback, stopped by the pid it recorded and by nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from processor.devtools.jvm_service import process_matches
from processor.devtools.registry_local import PID_FILE, cache_home, runner_jar

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]


def _dev(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor.cli", "dev", "registry", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_detached_registry_answers_and_is_stopped_by_its_pid(tmp_path: Path) -> None:
    if runner_jar(cache_home()) is None:
        pytest.skip("the registry cache is cold (`dispersion dev registry fetch`)")
    assert _dev("--detach").returncode == 2  # --detach needs --dir, to be stopped later
    run = tmp_path / "registry"
    started = _dev("--detach", "--dir", str(run))
    assert started.returncode == 0, started.stderr
    lines = dict(line.split("=", 1) for line in started.stdout.splitlines())
    assert set(lines) == {"DISPERSION_SCHEMA_REGISTRY_URL", "REGISTRY_PID", "REGISTRY_DIR"}
    url, pid = lines["DISPERSION_SCHEMA_REGISTRY_URL"], int(lines["REGISTRY_PID"])
    assert url.startswith("http://127.0.0.1:") and url.endswith("/apis/ccompat/v7")
    try:
        assert httpx.get(url + "/subjects", timeout=10).json() == []  # in-memory storage starts empty
        assert (run / PID_FILE).read_text().strip() == str(pid)
        assert process_matches(pid, (f"-Ddispersion.registry.dir={run.resolve()}",))

        stopped = _dev("stop", "--dir", str(run), timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert not process_matches(pid, ("-jar",))
        assert not (run / PID_FILE).exists()
    finally:
        if process_matches(pid, (f"-Ddispersion.registry.dir={run.resolve()}",)):
            os.kill(pid, 15)

    # A stale pid file naming a process that is not our registry (this test's own pid) is not trusted.
    (run / PID_FILE).write_text(f"{os.getpid()}\n")
    again = _dev("stop", "--dir", str(run), timeout=60)
    assert again.returncode == 1
    assert "no registry of ours runs" in again.stderr
