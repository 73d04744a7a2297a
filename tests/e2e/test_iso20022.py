"""ISO 20022 end to end (issue 21), as deployed: a real Kafka broker, PostgreSQL, the sandbox bank and
`dispersion processor` as a subprocess; the commands run as an operator types them.

A pain.001.001.03 written as SAP writes it (two PmtInf: one due today with an IBAN, an `Othr` account and a
closed account, one for a later payday) and a pain.001.001.09 written as Oracle writes it are submitted; one
with a control sum that does not match is refused and produces nothing. The due batches are paid; `pain002`
reports the partly paid batch (PART, the closed account RJCT AC04), and after `retry-failed` pays that transfer,
reports it ACSC naming the retry. `camt054` (.02 and .08) books every paid batch, its totals equal to `report`'s.
Every document is validated against ISO's schema here. `dispersion.transfers` carries one event per transfer
outcome (the retry's too), read with the CloudEvents SDK.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from cloudevents.core.bindings.kafka import KafkaMessage, from_binary
from cloudevents.core.formats.json import JSONFormat
from pain001_support import Block, Tx, oracle_pain001, sap_pain001, texts, valid
from processor_support import (
    STATUS_TOPIC,
    ApproveEach,
    Deployment,
    DeploymentFactory,
    TopicLog,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    unique_id,
)
from test_operator_loop import Ran, dispersion, has

import schemas
from processor.engine.transfer_events import transfer_event_id
from schemas.topics import TRANSFERS_TOPIC

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(300)]

ADMIN_TOKEN = "iso20022-admin-token-0123456789"
IBAN = "GT82TRAJ01020000001210029690"


def shown(ran: Ran) -> Ran:
    print(f"--- exit {ran.code}\n{ran.out}{ran.err}")  # the real output, for the docs
    return ran


def ledger_reads(deployment: Deployment, a: str, c: str) -> None:
    """`dispersion.transfers` as a ledger reads it: one event per transfer outcome, read by the CloudEvents SDK
    from the Kafka message as it is (binary mode), its data the Avro record."""
    transfers = deployment.topic_log(TRANSFERS_TOPIC)
    retry = f"{a}.retry-1"
    transfers.wait_until(lambda log: len(log.by_key(a) + log.by_key(retry) + log.by_key(c)) >= 6, timeout=60, what="6")
    transfers.poll(1.0)
    outcomes = [(e.key, e.record["index"], e.record["outcome"]) for e in transfers.by_key(a) + transfers.by_key(retry)]
    assert outcomes == [(a, 0, "COMPLETED"), (a, 1, "COMPLETED"), (a, 2, "FAILED"), (retry, 0, "COMPLETED")]
    failed, paid_again = transfers.by_key(a)[2].record, transfers.by_key(retry)[0].record
    assert (failed["end_to_end_id"], failed["reason_code"], failed["amount"]) == ("E2E-A3", "AC04", Decimal("750.25"))
    assert (failed["origin_account"], failed["destination_account"]) == ("100200300", "200109902")
    assert (paid_again["retry_of"], paid_again["original_index"], paid_again["end_to_end_id"]) == (a, 2, "E2E-A3")
    assert paid_again["destination_account"] == "200100303"  # the corrected account
    assert [e.record["outcome"] for e in transfers.by_key(c)] == ["COMPLETED", "COMPLETED"]
    for event in transfers.by_key(a) + transfers.by_key(retry):
        message = KafkaMessage(
            headers={name: value for name, value in event.headers if value is not None},
            key=event.key.encode(),
            value=event.raw,
        )
        cloud = from_binary(message, JSONFormat())
        assert cloud.get_id() == event.record["event_id"] and cloud.get_specversion() == "1.0"
        assert cloud.get_type() == f"dispersion.transfer.{event.record['outcome'].lower()}"
        assert cloud.get_subject() == f"{event.key}/{event.record['index']}"
        assert cloud.get_source() == "/dispersion/processor" and cloud.get_time() is not None
        data = cloud.get_data()
        assert isinstance(data, bytes) and schemas.decode(TRANSFERS_TOPIC, data) == event.record
    assert transfers.by_key(a)[2].record["event_id"] == transfer_event_id(a, 2, "FAILED")  # deterministic
    for event in (transfers.by_key(a)[2], transfers.by_key(retry)[0]):  # the real messages, for docs/kafka.md
        print(event.key, [(name, value) for name, value in event.headers], event.record)


@dataclass
class Documents:
    """The pain.001 documents of the run and their batch ids."""

    sap_id: str
    oracle_id: str
    payday: date
    sap: Path
    oracle: Path
    mismatch: Path

    @property
    def keys(self) -> tuple[str, str, str]:
        """The batches: SAP's due block, SAP's later block, Oracle's run."""
        return f"{self.sap_id}/NOV-A", f"{self.sap_id}/NOV-B", f"{self.oracle_id}/PAYRUN-7"


def write_documents(directory: Path) -> Documents:
    """A pain.001.001.03 as SAP writes it, a pain.001.001.09 as Oracle writes it, and one whose control sum does not
    match."""
    today, payday = datetime.now(UTC).date(), datetime.now(UTC).date() + timedelta(days=5)
    docs = Documents(
        unique_id("F110"),
        unique_id("ORA"),
        payday,
        directory / "sap.xml",
        directory / "oracle.xml",
        directory / "m.xml",
    )
    due = [
        Tx("E2E-A1", "1500.50", IBAN, email="ana@example.com"),
        Tx("E2E-A2", "2000.00", "200100301", email="bruno@example.com"),
        Tx("E2E-A3", "750.25", "200109902", email="carla@example.com"),  # 9902: closed, AC04
    ]
    later = [Tx("E2E-B1", "3200.00", "200100304")]
    docs.sap.write_bytes(
        sap_pain001(docs.sap_id, [Block("NOV-A", today, "100200300", due), Block("NOV-B", payday, "100200300", later)])
    )
    oracle_block = Block("PAYRUN-7", today, "100200300", [Tx("O-1", "99.99", "200100305"), Tx("O-2", "10.01", IBAN)])
    docs.oracle.write_bytes(oracle_pain001(docs.oracle_id, [oracle_block]))
    docs.mismatch.write_bytes(
        oracle_pain001(unique_id("BAD"), [Block("X", today, "100200300", [Tx("X-1", "1", "2")])], total="2")
    )
    return docs


def submit_and_pay(deployment: Deployment, docs: Documents, statuses: TopicLog, approve: ApproveEach) -> None:
    """The mismatching document is refused; the due batches are paid, the later one approved and not paid yet."""
    refused = shown(dispersion(deployment, "submit", str(docs.mismatch), "--quiet"))
    assert refused.code == 1 and "GrpHdr/CtrlSum: says 2, the amounts add up to 1" in refused.err
    submitted = shown(dispersion(deployment, "submit", str(docs.sap), "--quiet"))
    assert submitted.code == 0, submitted.err
    line = f"submitted batch {docs.sap_id}/NOV-B: 1 transactions, control sum 3200.00 GTQ, to be paid on {docs.payday}"
    assert line in submitted.out
    assert dispersion(deployment, "submit", str(docs.oracle), "--quiet").code == 0
    a, b, c = docs.keys
    statuses.wait_until(
        lambda log: all(log.find(key, "COMPLETED") for key in (a, c)) and log.find(b, "AUTHORIZED") is not None,
        timeout=120,
        what="the due batches paid, the later one approved",
        each=approve,
    )
    assert statuses.find(b, "COMPLETED") is None  # paid on its day, not before


def report_status_before_and_after_the_retry(
    deployment: Deployment, docs: Documents, statuses: TopicLog, approve: ApproveEach
) -> None:
    """`pain002` reports the partly paid batch (PART, RJCT AC04); after `retry-failed` pays that transfer, ACSC
    naming the retry."""
    a = docs.keys[0]
    part = shown(dispersion(deployment, "pain002", "--batch", a))
    assert part.code == 0, part.err
    root = valid(part.out, "pain.002.001.03")
    assert texts(root, "pain.002.001.03", "CstmrPmtStsRpt/OrgnlGrpInfAndSts/OrgnlMsgId") == [docs.sap_id]
    assert texts(root, "pain.002.001.03", "CstmrPmtStsRpt/OrgnlGrpInfAndSts/GrpSts") == ["PART"]
    tx = "CstmrPmtStsRpt/OrgnlPmtInfAndSts/TxInfAndSts"
    assert texts(root, "pain.002.001.03", f"{tx}/OrgnlEndToEndId") == ["E2E-A1", "E2E-A2", "E2E-A3"]
    assert texts(root, "pain.002.001.03", f"{tx}/TxSts") == ["ACSC", "ACSC", "RJCT"]
    assert texts(root, "pain.002.001.03", f"{tx}/StsRsnInf/Rsn/Cd") == ["AC04"]

    corrections = deployment.directory / "corrections.csv"
    corrections.write_text("index,account_number\n2,200100303\n")
    retried = dispersion(deployment, "retry-failed", "--batch", a, "--corrections", str(corrections))
    assert retried.code == 0, retried.err
    statuses.wait_until(has(f"{a}.retry-1", "COMPLETED"), timeout=90, what="the retry paid", each=approve)
    report_file = deployment.directory / "status.xml"
    paid = shown(dispersion(deployment, "pain002", "--batch", a, "--version", "10", "--output", str(report_file)))
    assert paid.code == 0, paid.err
    print(report_file.read_text())  # the real output, for the docs
    root = valid(report_file.read_bytes(), "pain.002.001.10")
    assert texts(root, "pain.002.001.10", "CstmrPmtStsRpt/OrgnlGrpInfAndSts/GrpSts") == ["ACSC"]
    assert texts(root, "pain.002.001.10", "CstmrPmtStsRpt/OrgnlGrpInfAndSts/OrgnlMsgNmId") == ["pain.001.001.03"]
    assert texts(root, "pain.002.001.10", f"{tx}/StsRsnInf/AddtlInf") == [f"paid by retry {a}.retry-1"]
    unknown = dispersion(deployment, "pain002", "--batch", "no-such-batch")
    assert unknown.code == 1 and "batch no-such-batch is unknown" in unknown.err


def book_with_camt054(deployment: Deployment, docs: Documents, since: datetime) -> None:
    """`camt054` (.02 and .08) books every paid batch, its totals equal to `report`'s; accounts masked unless
    asked for in clear."""
    a, _, c = docs.keys
    until = datetime.now(UTC) + timedelta(minutes=1)
    window = ("--since", since.isoformat(), "--until", until.isoformat())
    report = dispersion(deployment, "report", *window, "--format", "json")
    assert report.code == 0, report.err
    totals = json.loads(report.out)["totals"]
    paid_total = sum((Decimal(t["amount_completed"]) for t in totals), Decimal(0))
    for version, message in (("08", "camt.054.001.08"), ("02", "camt.054.001.02")):
        booked = shown(dispersion(deployment, "camt054", *window, "--version", version, "--accounts", "clear"))
        assert booked.code == 0, booked.err
        root = valid(booked.out, message)
        entries = texts(root, message, "BkToCstmrDbtCdtNtfctn/Ntfctn/Ntry/Amt")
        assert sum((Decimal(e) for e in entries), Decimal(0)) == paid_total == Decimal("4360.75")
        assert texts(root, message, "BkToCstmrDbtCdtNtfctn/Ntfctn/Ntry/NtryRef") == [a, c, f"{a}.retry-1"]
        batches = "BkToCstmrDbtCdtNtfctn/Ntfctn/Ntry/NtryDtls/Btch"
        expected_ids = [docs.sap_id, docs.oracle_id, docs.sap_id]  # the retry: its original's
        assert texts(root, message, f"{batches}/MsgId") == expected_ids
        assert texts(root, message, f"{batches}/PmtInfId") == ["NOV-A", "PAYRUN-7", "NOV-A"]
        accounts = "BkToCstmrDbtCdtNtfctn/Ntfctn/Ntry/NtryDtls/TxDtls/RltdPties/CdtrAcct/Id/IBAN"
        assert texts(root, message, accounts) == [IBAN, IBAN]
    masked = dispersion(deployment, "camt054", *window)
    assert "200100301" not in masked.out and "****0301" in masked.out


def test_pain001_from_sap_and_oracle_paid_reported_and_booked(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPERSION_TEST_ADMIN_TOKEN", ADMIN_TOKEN)
    tables = {"admin": {"token_env": "DISPERSION_TEST_ADMIN_TOKEN"}, "controls": {"four_eyes": False}}
    deployment = deployment_factory(kafka_bootstrap, tables=tables)  # one person: four eyes is issue 19's test
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    approve = ApproveEach(deployment.approver(), lambda: instance.url)
    since = datetime.now(UTC) - timedelta(minutes=1)
    docs = write_documents(deployment.directory)
    submit_and_pay(deployment, docs, statuses, approve)
    report_status_before_and_after_the_retry(deployment, docs, statuses, approve)
    ledger_reads(deployment, docs.keys[0], docs.keys[2])
    book_with_camt054(deployment, docs, since)
    assert instance.terminate() == 0
