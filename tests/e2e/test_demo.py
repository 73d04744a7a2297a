"""`dispersion demo`, the README's first command, as a user runs it: its own Kafka broker, the sandbox bank and a
processor as child processes, the sample export submitted, approved on the consent page, followed to COMPLETED;
and nothing it started is left running afterwards."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def test_demo_runs_a_batch_to_completed_and_cleans_up(tmp_path: Path) -> None:
    workdir = tmp_path / "demo-run"
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}  # the demo starts its own
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", "demo", "--dir", str(workdir), "--timeout", "200"],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
        check=False,
    )
    output = done.stdout
    assert done.returncode == 0, f"stdout:\n{output}\nstderr:\n{done.stderr}"
    statuses = re.findall(r"^  \S+Z  DEMO-\S+  ([A-Z_]+)", output, flags=re.MULTILINE)
    assert statuses == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"], output
    assert "our callback API answered HTTP 200" in output
    results = re.findall(r"^    #(\d)  (E-\d{4})  ([\d.]+)  (COMPLETED|FAILED)", output, flags=re.MULTILINE)
    assert results == [
        ("0", "E-0001", "1500.25", "COMPLETED"),
        ("1", "E-0002", "2000.00", "COMPLETED"),
        ("2", "E-0003", "1250.75", "COMPLETED"),
        ("3", "E-0004", "980.10", "COMPLETED"),
        ("4", "E-0005", "750.50", "FAILED"),
    ], output
    assert re.search(r"^DEMO-\S+: COMPLETED$", output, flags=re.MULTILINE)
    assert (workdir / "processor.log").exists() and (workdir / "sandbox.log").exists()
    assert _processes_mentioning(str(workdir)) == []


def test_demo_refuses_a_directory_it_did_not_create(tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", "demo", "--dir", str(precious)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "is not a demo directory" in done.stderr
    assert (precious / "notes.txt").read_text(encoding="utf-8") == "keep me"
