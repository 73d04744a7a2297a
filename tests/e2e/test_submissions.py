"""Submissions mean what they say (issue 18), as deployed: a real Kafka broker, PostgreSQL, the sandbox bank and
`dispersion processor` as a subprocess, the operator's commands as typed (one deployment, one run):

- the same workbook saved twice (other bytes, no profile) is one batch: `submit` says "accepted", then "same batch";
- a re-export under another batch id is held as a possible duplicate payroll (`submit` exits 6 naming the batch),
  `dispersion confirm-duplicate` lets it go, and it is paid once; one more submitted with `--allow-duplicate-of`
  that batch is not held (the link leads to the bank at once) and is paid once without a confirmation;
- the same batch id with other transfers: `submit` exits 5 and prints the difference;
- `dispersion withdraw`: the link refuses ("withdrawn by ..."), the corrected batch under the same id is paid;
- an EXPIRED batch submitted again is paid (`status --until-terminal` follows the new attempt to 0);
- a batch dead-lettered for an integration not configured yet, replayed after it is configured (processor
  restarted): paid once, and the replay landed on the partition its original was read from, although the
  original's producer used librdkafka's default partitioner (CRC32), not the Java client's;
- refused by the processor for reasons the command cannot see (an integration the operator's configuration has and
  the processor's has not, a payday further ahead than the processor allows): `submit` prints every problem and
  exits 1; with the processor's admin API unreachable it exits 7 after `--wait`, and the batch it produced is
  still decided when read.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from murmur2_support import java_partition
from openpyxl import Workbook
from processor_support import (
    BATCHES_TOPIC,
    DLQ_TOPIC,
    STATUS_TOPIC,
    Approver,
    Deployment,
    DeploymentFactory,
    ProcessorProcess,
    TopicLog,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    payroll_batch,
    rebase,
    unique_id,
)

import schemas
from processor.devtools.demo import toml_document
from processor.devtools.processes import eventually

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(420)]

ORIGIN = ("--origin-account", "100200300", "--origin-currency", "GTQ", "--integration", "sandbox")
ADMIN_TOKEN = "submissions-admin-token-0123456789"
PARTITIONS = 3


@dataclass
class Ran:
    code: int
    out: str
    err: str


def dispersion(deployment: Deployment, *argv: str, timeout: float = 120) -> Ran:
    """`dispersion ARGV...` against the deployment, as typed; printed for docs/operations.md."""
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "DISPERSION_CONFIG": str(deployment.config_path), "DISPERSION_ADMIN_TOKEN": ADMIN_TOKEN},
        cwd=deployment.directory,
        check=False,
    )
    print(f"$ dispersion {' '.join(argv)}\n{done.stdout}{done.stderr}--- exit {done.returncode}")
    return Ran(done.returncode, done.stdout, done.stderr)


def workbook(path: Path, rows: list[tuple[str, float]], *, creator: str) -> Path:
    """A workbook in our own layout (no profile needed); `creator` makes another save of the same rows."""
    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["employee_reference", "account_number", "amount", "email", "concept"])
    for index, (account, amount) in enumerate(rows):
        sheet.append([f"E-{index:03d}", account, amount, f"employee{index}@example.com", "Sueldo noviembre"])
    book.properties.creator = creator
    book.save(path)
    return path


def export(path: Path, rows: list[tuple[str, str]], people: str) -> Path:
    lines = ["employee_reference,account_number,amount,email,concept"]
    # employee references of their own: issue 19's changed-account review would hold an employee paid elsewhere
    lines += [
        f"{people}-{i},{acct},{amount},employee{i}@example.com,Horas extra" for i, (acct, amount) in enumerate(rows)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def event(log: TopicLog, key: str, status: str, attempt: int = 1) -> Any:
    for found in log.by_key(key):
        if found.status == status and (found.record.get("attempt") or 1) == attempt:
            return found
    return None


def wait_for(log: TopicLog, key: str, status: str, attempt: int = 1, timeout: float = 90) -> Any:
    log.wait_until(lambda _: event(log, key, status, attempt) is not None, timeout=timeout, what=f"{key} {status}")
    return event(log, key, status, attempt)


def link_of(log: TopicLog, key: str, attempt: int = 1) -> str:
    """The approval link of that attempt's AUTHORIZATION_REQUIRED."""
    return str(wait_for(log, key, "AUTHORIZATION_REQUIRED", attempt).record["authorization_url"])


def approve(approver: Approver, link: str, via: str, timeout: float = 60) -> None:
    """Open the approval link until it leads to the bank (a batch just confirmed may not have its consent yet),
    approve, and deliver the bank's redirect."""

    def leads() -> bool:
        return approver.http.get(rebase(link, via)).status_code != 409

    eventually(leads, what="the approval link leading to the bank", timeout=timeout, interval=0.3)
    assert approver.approve(link, via=via).status_code == 200


def configure_payday(deployment: Deployment) -> None:
    """The integration `payday` (the same sandbox client) added to the configuration."""
    sandbox = tomllib.loads(deployment.config_path.read_text())["integrations"]["sandbox"]
    with deployment.config_path.open("a") as config:
        config.write("\n" + toml_document({"integrations.payday": sandbox}))


@dataclass
class Session:
    """The deployment and what every step uses: one processor instance (restarted in step 6), the status topic,
    the approver, and the paths of the exports the steps share."""

    deployment: Deployment
    instance: ProcessorProcess
    statuses: TopicLog
    approver: Approver
    payroll_id: str = ""
    first: Path | None = None
    late: Path | None = None

    @property
    def directory(self) -> Path:
        return self.deployment.directory

    def run(self, *argv: str, timeout: float = 120) -> Ran:
        return dispersion(self.deployment, *argv, timeout=timeout)


def same_workbook_twice_is_one_batch(s: Session) -> None:
    """1. The same workbook saved twice is one batch; read by its extension, without a profile."""
    rows = [("200100300", 1500.5), ("200100301", 2000.0), ("200100302", 743.25)]
    s.first = first = workbook(s.directory / "planilla-nov.xlsx", rows, creator="ERP")
    again = workbook(s.directory / "planilla-nov (saved again).xlsx", rows, creator="Excel")
    assert first.read_bytes() != again.read_bytes()
    accepted = s.run("submit", str(first), *ORIGIN, "--quiet")
    assert accepted.code == 0, accepted.err
    s.payroll_id = payroll_id = accepted.out.split()[2].rstrip(":")
    assert payroll_id.startswith("payroll-") and "accepted by the processor" in accepted.out
    same = s.run("submit", str(again), *ORIGIN, "--quiet")
    assert same.code == 0 and f"submitted batch {payroll_id}:" in same.out and "same batch" in same.out, same.err
    link = wait_for(s.statuses, payroll_id, "AUTHORIZATION_REQUIRED").record["authorization_url"]
    approve(s.approver, link, s.instance.url)
    wait_for(s.statuses, payroll_id, "COMPLETED")


def a_reexport_is_held_then_paid_once(s: Session) -> None:
    """2. A re-export under another batch id: held, confirmed, paid once; once more allowed up front."""
    statuses, approver, url, payroll_id = s.statuses, s.approver, s.instance.url, s.payroll_id
    first = str(s.first)
    held = s.run("submit", first, *ORIGIN, "--batch-id", "NOV-B", "--quiet")
    assert held.code == 6, held.out + held.err
    assert f"held: possible duplicate payroll of batch {payroll_id}" in held.err
    assert "3 of 3 transfers (100 %, 4243.75 GTQ)" in held.err
    assert "dispersion confirm-duplicate --batch NOV-B" in held.err
    hold = wait_for(statuses, "NOV-B", "AUTHORIZATION_REQUIRED")
    assert hold.record["duplicate_of"] == payroll_id
    assert approver.http.get(rebase(hold.record["authorization_url"], url)).status_code == 409
    confirmed = s.run("confirm-duplicate", "--batch", "NOV-B")
    assert confirmed.code == 0 and "confirmed by " in confirmed.out, confirmed.err
    approve(approver, hold.record["authorization_url"], url)
    assert wait_for(statuses, "NOV-B", "AUTHORIZED").record["duplicate_confirmed_by"]
    wait_for(statuses, "NOV-B", "COMPLETED")
    # ... and once more on purpose, allowed up front: not held, no confirmation, paid once.
    allowed = s.run("submit", first, *ORIGIN, "--batch-id", "NOV-C", "--allow-duplicate-of", payroll_id, "--quiet")
    assert allowed.code == 0 and "accepted by the processor: NOV-C, a new batch" in allowed.out, allowed.err
    asking = wait_for(statuses, "NOV-C", "AUTHORIZATION_REQUIRED")
    assert asking.record["duplicate_of"] == payroll_id
    assert asking.record["duplicate_confirmed_by"] == "submit --allow-duplicate-of"
    assert approver.approve(asking.record["authorization_url"], via=url).status_code == 200  # no 409 first
    assert wait_for(statuses, "NOV-C", "COMPLETED").record["transfers_completed"] == 3
    assert [e.status for e in statuses.by_key("NOV-C")].count("AUTHORIZATION_REQUIRED") == 1


def a_conflict_then_withdraw_and_correct(s: Session) -> None:
    """3. The same batch id with other transfers: a conflict, with the difference. 4. Withdraw it; its link
    refuses; the corrected batch under the same id is paid."""
    statuses, approver, url = s.statuses, s.approver, s.instance.url
    hours = export(s.directory / "horas-extra.csv", [("200100310", "1000.00"), ("200100311", "266.25")], "HEX")
    assert s.run("submit", str(hours), *ORIGIN, "--batch-id", "HEX-B", "--quiet").code == 0
    edited = export(s.directory / "horas-extra-edit.csv", [("200100310", "1000.00"), ("200100311", "366.25")], "HEX")
    conflict = s.run("submit", str(edited), *ORIGIN, "--batch-id", "HEX-B", "--quiet")
    assert conflict.code == 5, conflict.out + conflict.err
    assert "transfers: 1 changed (#1 amount 266.25 -> 366.25); control sum 1266.25 -> 1366.25 GTQ" in conflict.err
    assert "dispersion withdraw --batch HEX-B --reason TEXT" in conflict.err

    old_link = wait_for(statuses, "HEX-B", "AUTHORIZATION_REQUIRED").record["authorization_url"]
    withdrawn = s.run("withdraw", "--batch", "HEX-B", "--reason", "overtime corrected")
    assert withdrawn.code == 0 and "withdrawn by " in withdrawn.out, withdrawn.err
    rejected = wait_for(statuses, "HEX-B", "REJECTED")
    assert rejected.record["withdrawn_by"] and rejected.record["reason"].endswith(": overtime corrected")
    refused = approver.http.get(rebase(old_link, url))
    assert refused.status_code == 410 and "withdrawn by" in refused.text
    corrected = s.run("submit", str(edited), *ORIGIN, "--batch-id", "HEX-B", "--quiet")
    assert corrected.code == 0 and "as attempt 2" in corrected.out, corrected.out + corrected.err
    approve(approver, wait_for(statuses, "HEX-B", "AUTHORIZATION_REQUIRED", 2).record["authorization_url"], url)
    assert wait_for(statuses, "HEX-B", "COMPLETED", 2).record["control_sum"] == Decimal("1366.25")


def a_batch_nobody_approves(s: Session) -> None:
    """Submitted first and left alone, so that it expires (authorization_deadline) while steps 1-4 run: step 5."""
    s.late = late = export(s.directory / "bono.csv", [("200100320", "50.00")], "BONO")
    assert s.run("submit", str(late), *ORIGIN, "--batch-id", "BONO", "--quiet").code == 0


def an_expired_batch_submitted_again(s: Session) -> None:
    """5. An EXPIRED batch (submitted at the start and never approved) submitted again is paid."""
    late = s.late
    assert late is not None
    wait_for(s.statuses, "BONO", "EXPIRED", timeout=60)
    resubmitted = s.run("submit", str(late), *ORIGIN, "--batch-id", "BONO", "--quiet")
    assert resubmitted.code == 0 and "as attempt 2" in resubmitted.out, resubmitted.out + resubmitted.err
    approve(s.approver, link_of(s.statuses, "BONO", 2), s.instance.url)
    followed = s.run("status", "--batch", "BONO", "--until-terminal", "--timeout", "60")
    assert followed.code == 0, followed.out + followed.err


def a_dead_letter_replayed_on_its_partition(s: Session) -> None:
    """6. A dead letter replayed after its integration is configured: paid once, on its original partition."""
    deployment = s.deployment
    keys = (f"PAYDAY-{unique_id('x')}-{i}".encode() for i in range(100))
    key = next(k for k in keys if zlib.crc32(k) % PARTITIONS != java_partition(k, PARTITIONS)).decode()
    document = payroll_batch(key, [("200100330", "75.00")])
    document["integration"] = "payday"
    erp = Producer({"bootstrap.servers": deployment.bootstrap, "partitioner": "consistent_random"})  # an ERP's
    erp.produce(deployment.topics[BATCHES_TOPIC], key=key.encode(), value=schemas.encode(BATCHES_TOPIC, document))
    assert erp.flush(30) == 0
    letters = deployment.topic_log(DLQ_TOPIC)
    letters.wait_until(lambda log: any(e.key == key for e in log.events), timeout=60, what="the dead letter")
    original = next(e for e in letters.events if e.key == key).record["partition"]
    assert original == zlib.crc32(key.encode()) % PARTITIONS
    assert s.instance.terminate() == 0
    configure_payday(deployment)
    s.instance = deployment.start(0)
    listed = s.run("dlq", "list", "--batch", key)
    replayed = s.run("dlq", "replay", listed.out.split()[0], "--reason", "payday configured")
    assert replayed.code == 0 and f"replayed to {deployment.topics[BATCHES_TOPIC]}/{original}/" in replayed.out
    approve(s.approver, link_of(s.statuses, key, 2), s.instance.url)
    wait_for(s.statuses, key, "COMPLETED", 2)


def refusals_the_command_cannot_see(s: Session) -> None:
    """7. Refused by the processor for what the command cannot check: every problem printed, exit 1; the admin
    API unreachable: no verdict within --wait, exit 7, and the batch on Kafka is still decided."""
    config_path = s.deployment.config_path
    table = tomllib.loads(config_path.read_text())
    nomina = {**table["integrations"]["sandbox"], "schedule_max_days": 60}
    wider = config_path.with_name("operator-copy.toml")  # the operator's copy names one more integration
    wider.write_text(config_path.read_text() + "\n" + toml_document({"integrations.nomina": nomina}))
    day = (datetime.now(UTC) + timedelta(days=40)).date().isoformat()
    options = ("--integration", "nomina", "--batch-id", "NOMINA-1", "--execute-on", day, "--quiet")
    invalid = s.run("submit", str(s.late), "--config", str(wider), *ORIGIN[:4], *options)
    assert invalid.code == 1, invalid.out + invalid.err
    problems = invalid.err.splitlines()
    assert problems[0] == "dispersion submit: the processor refused batch NOMINA-1 as INVALID:", invalid.err
    assert problems[1] == "  integration 'nomina' is not configured (configured: payday, sandbox)", invalid.err
    assert problems[2].startswith(f"  execute_on {day} is ") and problems[2].endswith(
        "days ahead, more than 28 days (the approval's token must still be renewable on the day)"
    ), invalid.err
    assert len(problems) == 3 and wait_for(s.statuses, "NOMINA-1", "INVALID")
    unasked = export(s.directory / "anticipo.csv", [("200100340", "20.00")], "ANT")
    options = ("--batch-id", "ANT-7", "--url", "http://127.0.0.1:9", "--wait", "1", "--quiet")
    no_verdict = s.run("submit", str(unasked), *ORIGIN, *options)
    assert no_verdict.code == 7, no_verdict.out + no_verdict.err
    assert no_verdict.out.startswith("submitted batch ANT-7: 1 transactions, control sum 20.00 GTQ")
    assert "the processor's verdict cannot be asked" in no_verdict.err
    assert "Follow it: dispersion status --batch ANT-7" in no_verdict.err
    wait_for(s.statuses, "ANT-7", "AUTHORIZATION_REQUIRED")


def test_submissions_mean_what_they_say(kafka_bootstrap: str, deployment_factory: DeploymentFactory) -> None:
    deployment = deployment_factory(
        kafka_bootstrap,
        partitions=PARTITIONS,
        # Every batch expires 30 s after it asks for approval: steps 1-4 approve theirs well before (under load too),
        # and BONO, submitted first and never approved, has expired by step 5.
        engine={"duplicate_window_days": 35, "authorization_deadline": 30, "consent_watch_interval": 1},
        tables={"admin": {"token_sha256": hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()}},
    )
    session = Session(deployment, deployment.start(0), deployment.topic_log(STATUS_TOPIC), deployment.approver())
    a_batch_nobody_approves(session)
    same_workbook_twice_is_one_batch(session)
    a_reexport_is_held_then_paid_once(session)
    a_conflict_then_withdraw_and_correct(session)
    an_expired_batch_submitted_again(session)
    a_dead_letter_replayed_on_its_partition(session)
    refusals_the_command_cannot_see(session)

    counts = deployment.bank_counts()
    # payroll, NOV-B, NOV-C, HEX-B (attempt 2), BONO (attempt 2), the replayed one
    assert counts["file_payment"] == 6
    assert session.instance.terminate() == 0
