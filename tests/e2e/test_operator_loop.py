"""The operator's month-end loop (issue 11) end to end, as deployed: a real Kafka broker, PostgreSQL, the sandbox
bank and `dispersion processor` as a subprocess; the operator's commands run as subprocesses too, as typed.

- the same export submitted twice is one batch, with no dead letter; the batch id reused with other transfers
  is a conflict (dead letter) and changes nothing, and what differs (transfers changed and added, origin, file
  reference) is shown by `submit`, `dlq show` and the console's dead-letter page;
- a month-end day: a batch with a closed account exits 4 and names the failed transfer; `retry-failed` with a
  correction by ana (an operator's personal token) waits as a request (exit 5, no consent) that ana may not
  approve and bob (an approver) does; it pays only that transfer (its own approval) and leaves the original
  untouched; `audit` shows who did what with their roles; `report` totals are
  the status events' amounts; an invalid batch's dead letter is listed, replayed (recorded), refused a second
  time, and dead-lettered again with the chain visible.
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path

import httpx
import pytest
from console_support import CSRF
from kafka_layer_support import committed
from processor_support import (
    BATCHES_TOPIC,
    DLQ_TOPIC,
    STATUS_TOPIC,
    ApproveEach,
    Deployment,
    DeploymentFactory,
    ProcessorProcess,
    TopicLog,
    count_rows,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    payroll_batch,
    unique_id,
)

from processor.api.console.auth import hash_password
from processor.devtools.processes import eventually

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(300)]

ORIGIN = ("--origin-account", "100200300", "--origin-currency", "GTQ", "--integration", "sandbox")
VIEWER_PASSWORD = "a viewer reads dead letters"


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

    def done() -> bool:
        return sum(committed(deployment.bootstrap, deployment.group_id, topic).values()) >= count

    eventually(done, what=f"{count} messages consumed", timeout=timeout, interval=0.3)


def test_the_same_export_submitted_twice_is_one_batch_without_dead_letter(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPERSION_TEST_ADMIN_TOKEN", ADMIN_TOKEN)
    viewer = {"password": hash_password(VIEWER_PASSWORD), "role": "viewer"}
    tables = {
        "admin": {"token_env": "DISPERSION_TEST_ADMIN_TOKEN"},
        "console": {"session_key": "s" * 40},
        "console.operators.vera": viewer,
    }
    deployment = deployment_factory(kafka_bootstrap, tables=tables)
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    letters = deployment.topic_log(DLQ_TOPIC)
    batch_id = unique_id("NOV")
    path = export(deployment.directory / "export.csv", [("200100300", "1500.50"), ("200100301", "2000.00")])

    first = dispersion(deployment, "submit", str(path), *ORIGIN, "--batch-id", batch_id, "--no-wait")
    assert first.code == 0, first.err
    statuses.wait_until(has(batch_id, "AUTHORIZATION_REQUIRED"), timeout=60, what="the approval link")
    # requested_at differs
    second = dispersion(deployment, "submit", str(path), *ORIGIN, "--batch-id", batch_id, "--no-wait")
    assert second.code == 0, second.err
    assert "is recognised as the same batch" in second.err
    # The batch id reused: one transfer changed, one added, another origin account and file reference.
    rows = [("200100300", "1500.50"), ("200100302", "99.00"), ("200100303", "10.00")]
    other = export(deployment.directory / "other.csv", rows)
    moved = ("--origin-account", "100200399", *ORIGIN[2:], "--file-reference", "NOV-OTHER")
    conflict = dispersion(deployment, "submit", str(other), *moved, "--batch-id", batch_id)  # waits: a verdict
    assert conflict.code == 5 and "dispersion submit: conflict: " in conflict.err, conflict.err
    consumed(deployment, 3)
    letters.poll(1.0)

    assert [e.record["batch_id"] for e in letters.events] == [batch_id]  # the conflict only
    assert letters.events[0].record["reason"].startswith("conflict: ")
    # What differs from the stored batch, in `dlq show` and on the console's dead-letter page.
    differs = (
        "transfers: 1 changed (#1 account ****0301 -> ****0302, amount 2000.00 -> 99.00)",
        "1 transfer(s) added (10.00)",
        "control sum 3500.50 -> 1609.50 GTQ",
        "origin ****0300 ",
        " -> ****0399 ",
        "-> NOV-OTHER",
    )
    listed = dispersion(deployment, "dlq", "list", "--batch", batch_id)
    assert listed.code == 0 and len(listed.out.splitlines()) == 1, listed.out + listed.err
    letter_id = listed.out.split()[0]
    show = dispersion(deployment, "dlq", "show", letter_id)
    assert show.code == 0, show.err
    reason_line = next(line for line in show.out.splitlines() if line.startswith("  reason: "))
    assert all(part in reason_line for part in differs), show.out
    assert all(part in conflict.err for part in differs), conflict.err
    assert "100200399" not in show.out and "200100302" not in reason_line  # accounts masked
    with httpx.Client(base_url=f"{instance.url}/console", timeout=30) as console:
        form = console.get("/sign-in")
        token = CSRF.search(form.text)
        assert token is not None, form.text
        signed = console.post("/sign-in", data={"csrf": token.group(1), "name": "vera", "password": VIEWER_PASSWORD})
        assert signed.status_code == 303, signed.text
        page = console.get(f"/dead-letters/{letter_id}")
    assert page.status_code == 200, page.text
    shown_reason = re.search(r'<dd id="reason" class="reason">(.*?)</dd>', page.text, re.S)
    assert shown_reason is not None, page.text
    assert all(part in unescape(shown_reason.group(1)) for part in differs), shown_reason.group(1)
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


ADMIN_TOKEN = "month-end-admin-token-0123456789"
ANA_TOKEN, BOB_TOKEN = "month-end-ana-operator-0123456789", "month-end-bob-approver-0123456789"
AS_ANA, AS_BOB = {"DISPERSION_ADMIN_TOKEN": ANA_TOKEN}, {"DISPERSION_ADMIN_TOKEN": BOB_TOKEN}


@dataclass
class MonthEnd:
    """The deployment of the month-end day and what its steps share."""

    deployment: Deployment
    instance: ProcessorProcess
    statuses: TopicLog
    approve: ApproveEach
    batch_id: str
    since: datetime

    @property
    def retry_id(self) -> str:
        return f"{self.batch_id}.retry-1"

    def run(self, *argv: str, env: dict[str, str] | None = None) -> Ran:
        """`dispersion ARGV...`, its real output printed for docs/operations.md."""
        ran = dispersion(self.deployment, *argv, env=env)
        print(f"--- exit {ran.code}\n{ran.out}{ran.err}")
        return ran


def pay_with_a_closed_account(m: MonthEnd) -> None:
    """A batch with a closed account exits 4 and names the failed transfer."""
    rows = [("200100300", "1500.50"), ("200100301", "2000.00"), ("200109902", "750.250")]  # 9902: closed account
    path = export(m.deployment.directory / "payroll-november.csv", rows)
    submitted = m.run("submit", str(path), *ORIGIN, "--batch-id", m.batch_id, "--quiet")
    assert submitted.code == 0, submitted.err
    assert ", control sum 4250.75 GTQ -> " in submitted.out
    m.statuses.wait_until(has(m.batch_id, "COMPLETED"), timeout=90, what="COMPLETED", each=m.approve)
    paid = m.run("status", "--batch", m.batch_id, "--until-terminal", "--timeout", "60")
    assert paid.code == 4, paid.out + paid.err  # completed with a failed transfer
    assert "paid=2 (3500.50) failed=1 (750.25)" in paid.out


def retry_with_four_eyes(m: MonthEnd) -> None:
    """`retry-failed` with a correction by ana waits as a request that ana may not approve and bob does; it pays
    only that transfer."""
    deployment, batch_id, retry_id = m.deployment, m.batch_id, m.retry_id
    corrections = deployment.directory / "corrections.csv"
    corrections.write_text("index,account_number\n2,200100303\n")
    fix = ("retry-failed", "--batch", batch_id, "--corrections", str(corrections))
    posing = m.run(*fix, "--requested-by", "bob", env=AS_ANA)
    assert posing.code == 1 and "requested_by must be the token's own name (ana)" in posing.err
    retried = m.run(*fix, "--requested-by", "ana", env=AS_ANA)
    assert retried.code == 5, retried.out + retried.err  # waits for a second person
    assert "transfer 2: ****9902 -> ****0303" in retried.out and "dispersion requests approve 1" in retried.out
    assert m.statuses.find(retry_id, "RECEIVED") is None and deployment.bank_counts()["file_consent"] == 1
    pending = m.run("requests", "list", env=AS_BOB)
    assert pending.code == 0 and f"1  PENDING  retry  {batch_id}  asked by ana" in pending.out
    own = m.run("requests", "approve", "1", env=AS_ANA)
    assert own.code == 1 and "another approver or admin must approve it" in own.err
    approved = m.run("requests", "approve", "1", env=AS_BOB)
    assert approved.code == 0, approved.err
    assert "approved by bob" in approved.out and f"-> {retry_id}" in approved.out
    m.statuses.wait_until(has(retry_id, "COMPLETED"), timeout=90, what="the retry COMPLETED", each=m.approve)
    retry_paid = m.run("status", "--batch", retry_id, "--until-terminal", "--timeout", "60")
    assert retry_paid.code == 0, retry_paid.out + retry_paid.err
    completed = m.statuses.find(retry_id, "COMPLETED")
    assert completed is not None and completed.record["retry_of"] == batch_id
    nothing = m.run("retry-failed", "--batch", batch_id)
    assert nothing.code == 1 and f"batch {batch_id} has no failed transfer: nothing created" in nothing.out
    assert deployment.bank_counts()["file_payment"] == 2  # the original and the retry


def report_and_find(m: MonthEnd) -> None:
    """`report` totals are the status events' amounts; `find` names the retry that paid the failure."""
    batch_id, retry_id = m.batch_id, m.retry_id
    until = datetime.now(UTC) + timedelta(minutes=1)
    report = m.run("report", "--since", m.since.isoformat(), "--until", until.isoformat(), "--format", "csv")
    assert report.code == 0, report.err
    lines = list(csv.DictReader(io.StringIO(report.out)))
    assert [(line["batch_id"], line["index"], line["status"]) for line in lines] == [
        (batch_id, "0", "COMPLETED"),
        (batch_id, "1", "COMPLETED"),
        (batch_id, "2", "FAILED"),
        (retry_id, "2", "COMPLETED"),  # a retry keeps the original transfer numbers
    ]
    assert lines[2]["reason_code"] == "AC04" and lines[2]["amount"] == "750.25"
    for key in (batch_id, retry_id):
        event = m.statuses.find(key, "COMPLETED")
        assert event is not None
        count = event.record["transfers_completed"] + event.record["transfers_failed"]
        total = f"total {key} GTQ: {count} transfer{'' if count == 1 else 's'}"
        total += f", {event.record['transfers_completed']} paid {event.record['amount_completed']}"
        total += f", {event.record['transfers_failed']} failed {event.record['amount_failed']}"
        assert total in report.err.splitlines()
    grand = [line for line in report.err.splitlines() if line.startswith("grand total GTQ")]
    assert len(grand) == 1 and ", outstanding 0 0.00," in grand[0], report.err  # the retry paid the failure
    assert "net outstanding GTQ: 0.00" in report.err.splitlines()
    found = m.run("find", "--employee", "E-0002")
    assert found.code == 0, found.err
    assert f"{batch_id}  #2  E-0002  ****9902  750.25 GTQ  paid by {retry_id}" in found.out


def replay_a_dead_letter_and_read_the_audit(m: MonthEnd) -> None:
    """An invalid batch's dead letter is listed, replayed (recorded), refused a second time, and dead-lettered
    again with the chain visible; `audit` shows who did what with their roles."""
    letters = m.deployment.topic_log(DLQ_TOPIC)
    bad_id = unique_id("BAD")
    bad = payroll_batch(bad_id, [("200100300", "10.00")])
    bad["integration"] = "bank-not-configured"
    m.deployment.producer().send(BATCHES_TOPIC, bad_id, bad)
    letters.wait_until(lambda log: any(e.key == bad_id for e in log.events), timeout=60, what="the dead letter")
    listed = m.run("dlq", "list", "--batch", bad_id)
    assert listed.code == 0 and len(listed.out.splitlines()) == 1, listed.err
    letter_id = listed.out.split()[0]
    replayed = m.run("dlq", "replay", letter_id, "--reason", "bank-not-configured added")
    assert replayed.code == 0, replayed.err
    refused = m.run("dlq", "replay", letter_id, "--reason", "again")
    assert refused.code == 1 and "already replayed" in refused.err
    letters.wait_until(lambda log: len([e for e in log.events if e.key == bad_id]) == 2, timeout=60, what="again")
    chain = m.run("dlq", "show", letter_id)
    assert chain.code == 0, chain.err
    assert "replayed " in chain.out and "by " in chain.out and "(bank-not-configured added)" in chain.out
    assert "dead-lettered again as " in chain.out
    trail = m.run("audit", "--since", m.since.isoformat(), env=AS_BOB)
    assert trail.code == 0, trail.err
    actions = [line.split("  ")[1:3] for line in trail.out.splitlines()]
    assert actions == [
        ["ana (operator)", "retry_requested"],
        ["bob (approver)", "request_approved"],
        ["admin (admin)", "replay"],
    ]
    assert "200100303" not in trail.out and '"new_account": "****0303"' in trail.out


def test_a_month_end_day(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPERSION_TEST_ADMIN_TOKEN", ADMIN_TOKEN)
    monkeypatch.setenv("DISPERSION_TEST_ANA_TOKEN", ANA_TOKEN)
    monkeypatch.setenv("DISPERSION_TEST_BOB_TOKEN", BOB_TOKEN)
    tokens = {
        "ana": {"token_env": "DISPERSION_TEST_ANA_TOKEN", "role": "operator"},
        "bob": {"token_env": "DISPERSION_TEST_BOB_TOKEN", "role": "approver"},
    }
    admin = {"token_env": "DISPERSION_TEST_ADMIN_TOKEN", "tokens": tokens}
    deployment = deployment_factory(kafka_bootstrap, tables={"admin": admin})
    instance = deployment.start(0)
    day = MonthEnd(
        deployment=deployment,
        instance=instance,
        statuses=deployment.topic_log(STATUS_TOPIC),
        approve=ApproveEach(deployment.approver(), lambda: instance.url),
        batch_id=unique_id("NOV"),
        since=datetime.now(UTC) - timedelta(minutes=1),
    )
    pay_with_a_closed_account(day)
    retry_with_four_eyes(day)
    report_and_find(day)
    replay_a_dead_letter_and_read_the_audit(day)
    assert instance.terminate() == 0
