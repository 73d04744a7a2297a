"""`dispersion demo` as a user runs it: one command, a real subprocess, against the test session's Kafka broker
(`KAFKA_BOOTSTRAP_SERVERS`, so it does not start a second one). It must print the batch's statuses in order with the
per-transaction results, exit 0, and leave no process behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

STATUS_LINE = re.compile(r"status: \S+\s+(demo-\S+)\s+([A-Z_]+)")
RESULT_LINE = re.compile(r"^\s+#(\d+) (E-\d{4}) ([0-9.]+) (COMPLETED|FAILED)(.*)$", re.MULTILINE)
PID = re.compile(r"\(pid (\d+)")


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of running processes that mention `text` (the demo's work directory)."""
    found: list[str] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and _running(int(entry.name)):
            found.append(f"{entry.name}: {cmdline}")
    return found


def _run_demo(work: Path, env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor.cli", "demo", "--dir", str(work), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=work.parent,
    )


@pytest.mark.kafka
def test_demo_runs_the_whole_flow_and_cleans_up(kafka_bootstrap: str, tmp_path: Path) -> None:
    work = tmp_path / "demo-run"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    done = _run_demo(work, env, "--timeout", "90")
    elapsed = time.monotonic() - started
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"

    assert f"Kafka: using the broker at {kafka_bootstrap}" in out  # no second broker
    statuses = STATUS_LINE.findall(out)
    assert len({batch for batch, _ in statuses}) == 1, statuses
    assert [status for _, status in statuses] == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
    assert re.search(r"approve at http://127\.0\.0\.1:\d+/approve/file/demo-\S+\?t=", out)
    assert re.search(r"approver: pressed Approve on the bank's consent page .* which answered 200", out)

    results = RESULT_LINE.findall(out)
    assert [(index, ref, status) for index, ref, _, status, _ in results] == [
        ("0", "E-1001", "COMPLETED"),
        ("1", "E-1002", "COMPLETED"),
        ("2", "E-1003", "COMPLETED"),
        ("3", "E-1004", "FAILED"),
        ("4", "E-1005", "COMPLETED"),
    ]
    assert "AC04" in results[3][4]
    assert "COMPLETED: 4 of 5 transfers paid, 1 failed" in out

    # What it wrote, and where the logs are.
    assert (work / "payroll-export.csv").read_text().count("\n") == 6
    assert (work / "logs" / "processor.log").is_file()
    assert (work / "logs" / "sandbox.log").is_file()
    assert f"logs: {work.resolve() / 'logs'}" in out

    # Nothing left running: the children it reported, and anything else started on its work directory.
    pids = {int(pid) for pid in PID.findall(out)}
    assert len(pids) >= 2, out  # the sandbox bank and the processor
    assert [pid for pid in pids if _running(pid)] == []
    assert _processes_mentioning(str(work.resolve())) == []
    assert re.search(r"stopped the processor \(pid \d+, exit status 0\)", out)
    print(f"demo took {elapsed:.1f} s")


@pytest.mark.kafka
def test_demo_starts_and_stops_its_own_broker(tmp_path: Path) -> None:
    """Without KAFKA_BOOTSTRAP_SERVERS the demo runs a local broker (the Maven jars, cached by `.ci/setup`) in its
    work directory and stops it at the end."""
    from processor.devtools.kafka_local import cache_home, jars_ready

    if not jars_ready(cache_home()):
        pytest.skip("the Kafka jar cache is cold (`dispersion dev kafka fetch`)")
    work = tmp_path / "demo-run"
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    done = _run_demo(work, {**env, "PYTHONUNBUFFERED": "1"}, "--timeout", "120", timeout=180)
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"
    assert "Kafka: starting a local single-node broker" in out
    kafka_pid = re.search(r"Kafka: 127\.0\.0\.1:\d+ \(pid (\d+)", out)
    assert kafka_pid is not None, out
    assert re.search(rf"stopped Kafka \(pid {kafka_pid.group(1)}", out)
    assert [status for _, status in STATUS_LINE.findall(out)][-1] == "COMPLETED"
    assert [pid for pid in map(int, PID.findall(out)) if _running(pid)] == []
    assert _processes_mentioning(str(work.resolve())) == []


def test_demo_refuses_a_foreign_non_empty_directory(tmp_path: Path) -> None:
    work = tmp_path / "mine"
    work.mkdir()
    (work / "notes.txt").write_text("keep me")
    done = _run_demo(work, dict(os.environ), timeout=60)
    assert done.returncode == 2
    assert "not made by `dispersion demo`" in done.stderr
    assert (work / "notes.txt").read_text() == "keep me"


@pytest.mark.kafka
def test_demo_with_registry_runs_in_the_confluent_wire_format(kafka_bootstrap: str, tmp_path: Path) -> None:
    """`--registry` without DISPERSION_SCHEMA_REGISTRY_URL: the demo starts its own schema registry, registers the
    subjects, every event travels Confluent-framed, and the registry is stopped at the end."""
    from processor.devtools.registry_local import cache_home, runner_jar

    if runner_jar(cache_home()) is None:
        pytest.skip("the registry cache is cold (`dispersion dev registry fetch`)")
    work = tmp_path / "demo-run"
    env = {k: v for k, v in os.environ.items() if k != "DISPERSION_SCHEMA_REGISTRY_URL"}
    env.update(KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, PYTHONUNBUFFERED="1")
    done = _run_demo(work, env, "--registry", "--timeout", "120", timeout=180)
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"

    registry = re.search(r"schema registry: (http://127\.0\.0\.1:\d+/apis/ccompat/v7) \(pid (\d+)", out)
    assert registry is not None, out
    assert re.search(r"schema registry subjects \(BACKWARD compatibility\): .*dispersion\.status-value", out)
    assert [status for _, status in STATUS_LINE.findall(out)] == [
        "AUTHORIZATION_REQUIRED",
        "AUTHORIZED",
        "INITIATED",
        "COMPLETED",
    ]
    followed = re.search(r"following (\S+) for batch", out)
    assert followed is not None, out
    values = _values(kafka_bootstrap, followed.group(1))
    assert len(values) >= 4
    assert {value[:1] for value in values} == {b"\x00"}  # Confluent framing: magic byte, then the schema id
    assert re.search(rf"stopped the schema registry \(pid {registry.group(2)}", out)
    assert [pid for pid in map(int, PID.findall(out)) if _running(pid)] == []
    assert _processes_mentioning(str(work.resolve())) == []


def _values(bootstrap: str, topic: str) -> list[bytes]:
    """Every message value the topic holds now."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{os.getpid()}", "enable.partition.eof": True})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        values: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < len(partitions) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(message.partition() or 0)
            else:
                values.append(message.value() or b"")
        return values
    finally:
        consumer.close()
