"""`pain.001` in (issue 21 point 1): messages written as SAP (.001.03) and Oracle (.001.09) write them are read
against ISO's schema, one batch per `PmtInf` with the issue's mapping; `NbOfTxs`/`CtrlSum` mismatches at group and
block level are all reported; a transfer without e-mail is refused by its `EndToEndId`; unsafe or foreign XML is
refused; `dispersion submit FILE.xml` (dry run, `--explain`, refusals) on top."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from cli_support import Run, write_config
from pain001_support import Block, Tx, oracle_pain001, sap_pain001

from processor.cli import submit
from processor.exports.iso20022 import MESSAGES, XSD_DIR
from processor.exports.pain001 import Pain001Error, batches, read_pain001

TODAY = datetime.now(UTC).date()
LATER = TODAY + timedelta(days=20)
IBAN = "GT82TRAJ01020000001210029690"


def blocks() -> list[Block]:
    return [
        Block("PAY-NOV-A", TODAY, "100200300", [Tx("E2E-0001", "1500.50", IBAN), Tx("E2E-0002", "2000", "200100301")]),
        Block("PAY-NOV-B", LATER, "100200300", [Tx("E2E-0003", "99.99", "200100302", concept="Bonus Q4")]),
    ]


@pytest.mark.parametrize("write", [sap_pain001, oracle_pain001])
def test_each_payment_block_becomes_a_batch_with_the_issues_mapping(write: object) -> None:
    assert callable(write)
    message = read_pain001(write("MSG-2026-11-25", blocks()))
    now = datetime.now(UTC)
    found, problems = batches(message, integration="sandbox", requested_at=now, source="t", today=TODAY)
    assert problems == []
    assert [b.batch_id for b in found] == ["MSG-2026-11-25/PAY-NOV-A", "MSG-2026-11-25/PAY-NOV-B"]
    first, second = found
    assert (first.origin.number, first.origin.currency, first.file_reference) == ("100200300", "GTQ", "PAY-NOV-A")
    assert first.execute_on is None  # today: paid as soon as approved
    assert second.execute_on == LATER  # a future ReqdExctnDt
    ana = first.transactions[0]
    assert (ana.account_number, ana.amount, ana.currency) == (IBAN, Decimal("1500.50"), "GTQ")
    assert ana.email == "ana@example.com"
    assert (ana.employee_reference, ana.concept, ana.account_type) == ("E2E-0001", "Payroll", "SAVINGS")
    assert first.transactions[1].account_number == "200100301"  # Othr/Id, as written
    assert second.transactions[0].concept == "Bonus Q4"  # Oracle's two Ustrd lines joined


def test_every_count_and_control_sum_mismatch_is_reported() -> None:
    bad = [
        Block("A", TODAY, "100200300", [Tx("E1", "10.00", "1")], control_sum="10.01"),
        Block("B", TODAY, "100200300", [Tx("E2", "5", "2")], number_of_transactions=2),
    ]
    with pytest.raises(Pain001Error) as caught:
        read_pain001(sap_pain001("M", bad, count=3, total="16"))
    assert caught.value.problems == [
        "GrpHdr/NbOfTxs: says 3, the message holds 2",
        "GrpHdr/CtrlSum: says 16, the amounts add up to 15.00",
        "PmtInf A: CtrlSum says 10.01, its amounts add up to 10.00",
        "PmtInf B: NbOfTxs says 2, the block holds 1",
    ]


def test_a_transfer_without_email_is_named_by_its_end_to_end_id() -> None:
    block = Block("A", TODAY, "100200300", [Tx("E2E-NOMAIL", "1", "1", email=None)])
    message = read_pain001(oracle_pain001("M", [block]))
    _, problems = batches(message, integration="x", requested_at=datetime.now(UTC), source="t", today=TODAY)
    assert problems == [
        "PmtInf A: EndToEndId E2E-NOMAIL (transaction 0): Cdtr/CtctDtls/EmailAdr is missing; the bank needs the "
        "creditor's e-mail"
    ]


def test_schema_violations_entities_and_other_messages_are_refused() -> None:
    broken = sap_pain001("M", blocks()).replace(b"<PmtMtd>TRF</PmtMtd>", b"<PmtMtd>WIRE</PmtMtd>")
    with pytest.raises(Pain001Error) as caught:
        read_pain001(broken)
    assert all(p.startswith("line ") for p in caught.value.problems) and len(caught.value.problems) == 2
    assert "PmtMtd" in caught.value.problems[0]
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
        b"<Document>&b;</Document>"
    )
    with pytest.raises(Pain001Error, match="DOCTYPE is not allowed"):
        read_pain001(bomb)
    other = b'<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.001.001.05"/>'
    expected = r"Document of pain\.001\.001\.03 or pain\.001\.001\.09, found pain\.001\.001\.05"
    with pytest.raises(Pain001Error, match=expected):
        read_pain001(other)
    with pytest.raises(Pain001Error, match="not well-formed"):
        read_pain001(b"employee,amount\n")


def test_the_vendored_schemas_are_isos_as_published() -> None:
    expected = {
        line.split("|")[1].strip(" `"): line.split("|")[2].strip(" `")
        for line in (XSD_DIR / "PROVENANCE.md").read_text().splitlines()
        if line.startswith("| `")
    }
    assert sorted(expected) == sorted(f"{m}.xsd" for m in MESSAGES)
    for name, digest in expected.items():
        assert hashlib.sha256((XSD_DIR / name).read_bytes()).hexdigest() == digest, name


# -- dispersion submit FILE.xml --------------------------------------------------------------------------------


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("DISPERSION_CONFIG", raising=False)
    return write_config(tmp_path / "dispersion.toml", "127.0.0.1:9")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    code = submit.main(list(argv))
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def test_submit_dry_run_explains_and_validates_every_block(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "PAYROLL_20261125.xml"
    path.write_bytes(sap_pain001("MSG-2026-11-25", blocks()))
    ran = run(capsys, "--config", str(config), str(path), "--dry-run", "--explain", "--quiet")
    assert ran.code == 0, ran.err
    assert "pain.001.001.03: MsgId MSG-2026-11-25, 3 transaction(s)" in ran.out
    assert "PmtInf PAY-NOV-A -> batch MSG-2026-11-25/PAY-NOV-A" in ran.out
    assert "    CdtrAcct/Id/IBAN          -> account_number ****9690 (SAVINGS)" in ran.out
    assert f"  ReqdExctnDt {LATER.isoformat()} -> execute_on {LATER.isoformat()}" in ran.out
    assert "valid batch MSG-2026-11-25/PAY-NOV-A: 2 transactions, control sum 3500.50 GTQ" in ran.out
    later = f"valid batch MSG-2026-11-25/PAY-NOV-B: 1 transactions, control sum 99.99 GTQ, to be paid on {LATER}"
    assert later in ran.out


def test_submit_refuses_a_control_sum_mismatch_and_produces_nothing(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.xml"
    rows = blocks()
    rows[1] = Block("PAY-NOV-B", LATER, "100200300", [Tx("E2E-0003", "99.99", "200100302", email=None)])
    path.write_bytes(oracle_pain001("M", rows, total="3600.50"))
    ran = run(capsys, "--config", str(config), str(path), "--quiet")  # the broker (port 9) is never reached
    assert ran.code == submit.EXIT_INVALID
    assert ran.err.splitlines() == [
        "GrpHdr/CtrlSum: says 3600.50, the amounts add up to 3600.49",
        "PmtInf PAY-NOV-B: EndToEndId E2E-0003 (transaction 0): Cdtr/CtctDtls/EmailAdr is missing; the bank needs "
        "the creditor's e-mail",
        "dispersion submit: 2 problem(s); nothing was produced",
    ]


def test_submit_names_invalid_transfers_by_block_and_end_to_end_id(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.xml"
    rows = [Tx("E2E-BAD", "10.001", "200100301"), Tx("E2E-USD", "5", "200100302", currency="USD")]
    path.write_bytes(sap_pain001("M", [Block("A", TODAY - timedelta(days=3), "100200300", rows)]))
    ran = run(capsys, "--config", str(config), str(path), "--dry-run", "--quiet")
    assert ran.code == submit.EXIT_INVALID
    assert "PmtInf A: EndToEndId E2E-BAD (transaction 0): amount: " in ran.err
    assert "PmtInf A: EndToEndId E2E-USD (transaction 1): destination_account.currency: currency_mismatch" in ran.err
    assert "execute_on" not in ran.err  # a past ReqdExctnDt is paid as soon as approved


@pytest.mark.parametrize("option", [("--batch-id", "X"), ("--origin-account", "1"), ("--execute-on", "2030-01-01")])
def test_options_the_message_already_answers_are_refused(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str], option: tuple[str, str]
) -> None:
    path = tmp_path / "m.xml"
    path.write_bytes(sap_pain001("M", blocks()))
    ran = run(capsys, "--config", str(config), str(path), *option, "--dry-run")
    assert ran.code == submit.EXIT_USAGE
    assert f"{option[0]} cannot be used with a pain.001 message" in ran.err
