"""`pain.002` and `camt.054` out (issue 21 points 2 and 3), as documents: every version valid against ISO's schema
(checked again here with the vendored XSDs, independently of the writer's own check), the group status rules,
reason codes (ISO code or proprietary), the retry that paid a transfer, masked or clear creditor accounts."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pain001_support import texts, valid

from processor.engine.iso_reports import original_ids, report_message_id
from processor.exports.camt054 import Entry, NothingPaidError, Notification, Notifications, PaidTransfer, camt054
from processor.exports.pain002 import StatusReport, TransferStatus, group_status, pain002

NOW = datetime(2026, 11, 26, 10, 30, 5, 123000, tzinfo=UTC)


def report(*transfers: TransferStatus, note: str | None = None) -> StatusReport:
    return StatusReport(
        message_id=report_message_id("PSR", "F110-01/PAY-A", NOW),
        created_at=NOW,
        original_message_id="F110-01",
        original_payment_information_id="PAY-A",
        original_message_name="pain.001.001.03",
        control_sum=Decimal("4250.75"),
        transfers=transfers,
        batch_note=note,
    )


PAID = TransferStatus("E2E-1", "ACSC", accepted_at=NOW)
CLOSED = TransferStatus("E2E-3", "RJCT", "AC04", "ClosedAccountNumber: the destination account is closed")


@pytest.mark.parametrize(("version", "message"), [("03", "pain.002.001.03"), ("10", "pain.002.001.10")])
def test_a_partly_paid_batch_names_each_transfer_and_the_banks_reason(version: str, message: str) -> None:
    retried = TransferStatus("E2E-2", "ACSC", paid_by="F110-01/PAY-A.retry-1", accepted_at=NOW)
    root = valid(pain002(report(PAID, retried, CLOSED), "03" if version == "03" else "10"), message)
    assert texts(root, message, "CstmrPmtStsRpt/OrgnlGrpInfAndSts/OrgnlMsgId") == ["F110-01"]
    assert texts(root, message, "CstmrPmtStsRpt/OrgnlGrpInfAndSts/OrgnlMsgNmId") == ["pain.001.001.03"]
    assert texts(root, message, "CstmrPmtStsRpt/OrgnlGrpInfAndSts/GrpSts") == ["PART"]
    assert texts(root, message, "CstmrPmtStsRpt/OrgnlPmtInfAndSts/OrgnlPmtInfId") == ["PAY-A"]
    tx = "CstmrPmtStsRpt/OrgnlPmtInfAndSts/TxInfAndSts"
    assert texts(root, message, f"{tx}/OrgnlEndToEndId") == ["E2E-1", "E2E-2", "E2E-3"]
    assert texts(root, message, f"{tx}/TxSts") == ["ACSC", "ACSC", "RJCT"]
    assert texts(root, message, f"{tx}/StsRsnInf/Rsn/Cd") == ["AC04"]
    assert texts(root, message, f"{tx}/StsRsnInf/AddtlInf") == [
        "paid by retry F110-01/PAY-A.retry-1",
        "ClosedAccountNumber: the destination account is closed",
    ]


def test_group_status_follows_the_transfers() -> None:
    waiting = TransferStatus("E", "ACCP")
    assert group_status([waiting, waiting]) == "ACCP"
    assert group_status([PAID, PAID]) == "ACSC"
    assert group_status([CLOSED]) == "RJCT"
    assert group_status([PAID, CLOSED]) == "PART"
    assert group_status([PAID, waiting]) == "PART"


def test_a_rejected_batch_without_references_and_a_long_proprietary_reason_stays_valid() -> None:
    odd = TransferStatus(None, "RJCT", "TECHNICAL_FAILURE", "x" * 300)
    root = valid(pain002(report(odd, note="the batch ended REJECTED"), "10"), "pain.002.001.10")
    tx = "CstmrPmtStsRpt/OrgnlPmtInfAndSts/TxInfAndSts"
    assert texts(root, "pain.002.001.10", f"{tx}/OrgnlEndToEndId") == ["NOTPROVIDED"]
    assert texts(root, "pain.002.001.10", f"{tx}/StsRsnInf/Rsn/Prtry") == ["TECHNICAL_FAILURE"]
    assert texts(root, "pain.002.001.10", "CstmrPmtStsRpt/OrgnlGrpInfAndSts/StsRsnInf/AddtlInf") == [
        "the batch ended REJECTED"
    ]


def test_original_ids_read_a_pain001_batch_id_back() -> None:
    assert original_ids("F110-01/PAY-A", "PAY-A") == ("F110-01", "PAY-A")
    assert original_ids("payroll-0123", "PAYROLL-NOV") == ("payroll-0123", "PAYROLL-NOV")
    assert len(report_message_id("PSR", "x" * 500, NOW)) <= 35


@pytest.mark.parametrize(("version", "message"), [("02", "camt.054.001.02"), ("08", "camt.054.001.08")])
def test_debit_notifications_book_each_paid_batch_with_its_transfers(version: str, message: str) -> None:
    entry = Entry(
        batch_id="F110-01/PAY-A",
        original_message_id="F110-01",
        original_payment_information_id="PAY-A",
        booked_at=NOW,
        bank_reference="fp-123",
        transfers=(
            PaidTransfer("E2E-1", Decimal("1500.50"), "GT82TRAJ01020000001210029690", "Nomina"),
            PaidTransfer("E2E-2", Decimal("2000.00"), "****0301", ""),
        ),
    )
    notifications = Notifications("DCN-1", NOW, NOW, NOW, (Notification("100200300", "GTQ", (entry,)),))
    root = valid(camt054(notifications, "02" if version == "02" else "08"), message)
    ntry = "BkToCstmrDbtCdtNtfctn/Ntfctn/Ntry"
    assert texts(root, message, "BkToCstmrDbtCdtNtfctn/Ntfctn/Acct/Id/Othr/Id") == ["100200300"]
    assert texts(root, message, f"{ntry}/Amt") == ["3500.50"]
    assert texts(root, message, f"{ntry}/CdtDbtInd") == ["DBIT"]
    assert texts(root, message, f"{ntry}/NtryDtls/Btch/NbOfTxs") == ["2"]
    assert texts(root, message, f"{ntry}/NtryDtls/TxDtls/Refs/EndToEndId") == ["E2E-1", "E2E-2"]
    assert texts(root, message, f"{ntry}/NtryDtls/TxDtls/RltdPties/CdtrAcct/Id/IBAN") == [
        "GT82TRAJ01020000001210029690"
    ]
    assert texts(root, message, f"{ntry}/NtryDtls/TxDtls/RltdPties/CdtrAcct/Id/Othr/Id") == ["****0301"]


def test_a_window_where_nothing_was_paid_is_said_not_written() -> None:
    with pytest.raises(NothingPaidError, match=r"no batch paid anything between 2026-11-26T10:30:05\.123Z and"):
        camt054(Notifications("DCN-2", NOW, NOW, NOW, ()), "08")
