"""The operator's month-end loop (issue 11) end to end, as deployed: a real Kafka broker, PostgreSQL, the sandbox
bank and `dispersion processor` as a subprocess; the operator's commands run as subprocesses too, as typed.

- the same export submitted twice is one batch, with no dead letter; the batch id reused with other transfers
  is a conflict (dead letter) and changes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka_layer_support import committed
from processor_support import (
    BATCHES_TOPIC,
    DLQ_TOPIC,
    STATUS_TOPIC,
    ApproveEach,
    Deployment,
    DeploymentFactory,
    TopicLog,
    count_rows,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    unique_id,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(300)]

ORIGIN = ("--origin-account", "100200300", "--origin-currency", "GTQ", "--integration", "sandbox")


@dataclass
class Ran:
    """A command's exit status and output."""

    code: int
    out: str
    err: str


def dispersion(deployment: Deployment, *argv: str, env: dict[str, str] | None = None, timeout: float = 120) -> Ran:
    """Run `dispersion ARGV...` against the deployment's configuration, as an operator types it."""
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "DISPERSION_CONFIG": str(deployment.config_path), **(env or {})},
        cwd=deployment.directory,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def has(key: str, status: str) -> Callable[[TopicLog], bool]:
    """`wait_until` condition: the key has an event with this status."""
    return lambda log: log.find(key, status) is not None


def export(path: Path, rows: list[tuple[str, str]]) -> Path:
    """A CSV export with one row per (account, amount)."""
    lines = ["employee_reference,account_number,amount,email,concept"]
    lines += [f"E-{i:04d},{acct},{amount},employee{i}@example.com,Payroll" for i, (acct, amount) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def consumed(deployment: Deployment, count: int, timeout: float = 60) -> None:
    """Until the processor committed `count` input messages."""
    topic = deployment.topics[BATCHES_TOPIC]
    deadline = time.monotonic() + timeout
    while sum(committed(deployment.bootstrap, deployment.group_id, topic).values()) < count:
        assert time.monotonic() < deadline, f"fewer than {count} messages consumed"
        time.sleep(0.3)


def test_the_same_export_submitted_twice_is_one_batch_without_dead_letter(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap)
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    letters = deployment.topic_log(DLQ_TOPIC)
    batch_id = unique_id("NOV")
    path = export(deployment.directory / "export.csv", [("200100300", "1500.50"), ("200100301", "2000.00")])

    first = dispersion(deployment, "submit", str(path), *ORIGIN, "--batch-id", batch_id)
    assert first.code == 0, first.err
    statuses.wait_until(has(batch_id, "AUTHORIZATION_REQUIRED"), timeout=60, what="the approval link")
    second = dispersion(deployment, "submit", str(path), *ORIGIN, "--batch-id", batch_id)  # requested_at differs
    assert second.code == 0, second.err
    assert "is recognised as the same batch" in second.err
    other = export(deployment.directory / "other.csv", [("200100300", "1500.50"), ("200100302", "99.00")])
    conflict = dispersion(deployment, "submit", str(other), *ORIGIN, "--batch-id", batch_id)
    assert conflict.code == 0, conflict.err
    consumed(deployment, 3)
    letters.poll(1.0)

    assert [e.record["batch_id"] for e in letters.events] == [batch_id]  # the conflict only
    assert letters.events[0].record["reason"].startswith("conflict: ")
    approve = ApproveEach(deployment.approver(), lambda: instance.url)
    approve(statuses.by_key(batch_id))
    statuses.wait_until(has(batch_id, "COMPLETED"), timeout=60, what="COMPLETED")
    statuses.poll(1.0)
    assert statuses.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
    completed = statuses.find(batch_id, "COMPLETED")
    assert completed is not None
    assert [r["status"] for r in completed.record["transaction_results"]] == ["COMPLETED", "COMPLETED"]
    counts = deployment.bank_counts()
    assert (counts["file_consent"], counts["file_payment"]) == (1, 1)
    assert count_rows(deployment.store_url, "SELECT COUNT(*) FROM flows") == 1
    assert instance.terminate() == 0
