"""One clear line when Kafka is unreachable (issue 20 point 7): `dispersion status` against a port where nothing
listens prints librdkafka's repeated "Connection refused" once with its count, then one line naming the address
and where it came from, and exits 8 (not 3, "not final yet")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from processor.cli.kafka_noise import distinct, where_kafka_is


def _status(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "processor.cli", "status", "--batch", "NOV-1", "--until-terminal", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def test_an_unreachable_broker_is_one_line_with_its_address_and_source(tmp_path: Path, unserved_port: int) -> None:
    address = f"127.0.0.1:{unserved_port}"  # nothing listens there
    answer = _status("--bootstrap", address, "--timeout", "4")
    assert answer.returncode == 8, answer.stderr
    lines = answer.stderr.splitlines()
    assert lines[-1] == (
        f"dispersion status: Kafka at {address} (from --bootstrap) is not reachable "
        "(Failed to get metadata: Local: Broker transport failure)"
    ), answer.stderr
    refused = [line for line in lines if "Connection refused" in line]
    assert 1 <= len(refused) <= 2, answer.stderr  # the first one, then its count
    assert len(lines) <= 5, answer.stderr
    if len(refused) == 2:
        assert refused[1].endswith("times in all)"), refused

    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    from_env = _status("--timeout", "2", env={**env, "KAFKA_BOOTSTRAP_SERVERS": address, "DISPERSION_CONFIG": ""})
    assert from_env.returncode == 8 and f"{address} (from $KAFKA_BOOTSTRAP_SERVERS)" in from_env.stderr

    config = tmp_path / "dispersion.toml"
    config.write_text(f'[kafka]\nbootstrap_servers = "{address}"\n')
    assert where_kafka_is(address, None, str(config)) == f"{address} (from [kafka] bootstrap_servers in {config})"


def test_librdkafka_lines_that_differ_only_in_thread_and_timing_are_one() -> None:
    tail = "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"
    first = f"FAIL [dispersion-status#consumer-1] [thrd:127.0.0.1:1/bootstrap]: {tail} (after 0ms in state CONNECT)"
    again = f"FAIL [dispersion-status#consumer-2] [thrd:127.0.0.1:1/bootstrap]: {tail} (after 12ms in state CONNECT)"
    assert distinct(first) == distinct(again) == f"FAIL {tail} (in state CONNECT)"


def test_submit_to_an_unreachable_broker_says_where_it_tried(tmp_path: Path, unserved_port: int) -> None:
    export = tmp_path / "ok.csv"
    export.write_text("employee_reference,account_number,amount,email,concept\nE-1,200100300,10.00,a@example.com,Pay\n")
    address = f"127.0.0.1:{unserved_port}"
    command = [sys.executable, "-m", "processor.cli", "submit", str(export), "--origin-account", "3001234567"]
    command += ["--origin-currency", "GTQ", "--integration", "sandbox", "--bootstrap", address, "--timeout", "3"]
    answer = subprocess.run([*command, "--quiet"], capture_output=True, text=True, timeout=120)
    assert answer.returncode == 3, answer.stderr
    lines = answer.stderr.splitlines()
    assert len(lines) <= 3, answer.stderr
    assert lines[-1].startswith(f"dispersion submit: Kafka at {address} (from --bootstrap) did not take the batch")
