"""The chaos run (benchmarks/chaos.py) at a small size: 20 batches through three `dispersion processor` processes
on one PostgreSQL store while processors are SIGKILLed and restarted, the broker restarts, the bank answers with
faults (latency, 500/503, 429, dropped connections, commit-then-fail on creating calls) and the approver rejects
some batches. Nothing may be paid twice and no outcome may disagree with the bank."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_fixtures import kafka_unavailable

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "chaos.py"
NO_BROKER_EXIT = 3  # benchmarks/chaos.py: the local broker could not be started


def test_a_small_chaos_run_pays_nothing_twice_and_misreports_nothing(store_postgres_dsn: str) -> None:
    command = [sys.executable, str(SCRIPT), "--batches", "20", "--seed", "7", "--timeout", "240"]
    command += ["--pg-url", store_postgres_dsn]
    result = subprocess.run(command, capture_output=True, text=True, timeout=480, env=dict(os.environ), check=False)
    if result.returncode == NO_BROKER_EXIT:
        kafka_unavailable(result.stderr.strip()[-500:])
    report = f"{result.stdout}\n--- stderr (tail)\n{result.stderr[-3000:]}"
    figures = {name: int(n) for name, n in re.findall(r"^([A-Za-z ]+):\s+(\d+)", result.stdout, re.MULTILINE)}
    assert figures.get("batches in") == 20, report
    # The chaos happened: instances were killed and the broker went away while batches were in flight.
    assert figures.get("processor SIGKILLs", 0) >= 1, report
    assert re.search(r"^broker restart:\s+at \d+ status events", result.stdout, re.MULTILINE), report
    assert figures.get("duplicate bank resources") == 0, report
    assert figures.get("misreported outcomes") == 0, report
    assert result.returncode == 0, report
