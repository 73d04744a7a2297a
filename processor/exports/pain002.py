"""`pain.002` (CustomerPaymentStatusReport, .001.03 and .001.10): a batch's status report for the ERP that sent it.

One report per batch: the original message and payment-information ids, the group status (`ACCP` while waiting,
`ACSC` all paid, `RJCT` none paid, `PART` some), and one `TxInfAndSts` per transfer with its `OrgnlEndToEndId`,
`ACSC`/`RJCT` (`ACCP` while it is not final) and the bank's ISO reason code. A transfer paid by a retry says which
(`StsRsnInf/AddtlInf`). The document is checked against ISO's schema before it is returned. Imports only
`processor.domain` of ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Final, Literal

from lxml import etree

from processor.domain.money import money_text
from processor.exports.iso20022 import namespace, serialise, validation_errors

Version = Literal["03", "10"]
VERSIONS: Final[dict[str, str]] = {"03": "pain.002.001.03", "10": "pain.002.001.10"}
# The pain.001 a status report answers when the batch was not read from one: by convention .03 with .03, .10 .09.
ORIGINAL_MESSAGE: Final[dict[str, str]] = {"03": "pain.001.001.03", "10": "pain.001.001.09"}
NOT_PROVIDED: Final = "NOTPROVIDED"
MAX35: Final = 35
MAX105: Final = 105


@dataclass(frozen=True)
class TransferStatus:
    """One transfer's final (or current) outcome: `ACSC` paid, `RJCT` failed, `ACCP` not final yet."""

    end_to_end_id: str | None
    status: Literal["ACSC", "RJCT", "ACCP"]
    reason_code: str | None = None
    reason_text: str | None = None
    paid_by: str | None = None  # the retry batch that paid it
    accepted_at: datetime | None = None


@dataclass(frozen=True)
class StatusReport:
    """What a status report says of one batch."""

    message_id: str
    created_at: datetime
    original_message_id: str
    original_payment_information_id: str
    original_message_name: str | None  # `pain.001.001.03` ...; None: not read from a pain.001
    control_sum: Decimal
    transfers: tuple[TransferStatus, ...]
    batch_note: str | None = None  # why the batch as a whole ended unpaid (rejected, expired, ...)


def group_status(transfers: Sequence[TransferStatus]) -> str:
    """`ACCP` no transfer final yet, `ACSC` all paid, `RJCT` none paid and all final, `PART` otherwise."""
    statuses = {t.status for t in transfers}
    if not statuses or statuses == {"ACCP"}:
        return "ACCP"
    if statuses == {"ACSC"}:
        return "ACSC"
    if statuses == {"RJCT"}:
        return "RJCT"
    return "PART"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _time(moment: datetime) -> str:
    """ISODateTime in UTC with milliseconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def pain002(report: StatusReport, version: Version) -> bytes:
    """The report as a `pain.002.001.<version>` document, valid against ISO's schema."""
    message = VERSIONS[version]
    space = namespace(message)

    def sub(parent: etree._Element, name: str, text: str | None = None) -> etree._Element:
        child = etree.SubElement(parent, f"{{{space}}}{name}")
        if text is not None:
            child.text = text
        return child

    root = etree.Element(f"{{{space}}}Document", nsmap={None: space})  # type: ignore[dict-item]  # the default namespace
    body = sub(root, "CstmrPmtStsRpt")
    header = sub(body, "GrpHdr")
    sub(header, "MsgId", _cut(report.message_id, MAX35))
    sub(header, "CreDtTm", _time(report.created_at))
    group = sub(body, "OrgnlGrpInfAndSts")
    sub(group, "OrgnlMsgId", _cut(report.original_message_id, MAX35))
    sub(group, "OrgnlMsgNmId", report.original_message_name or ORIGINAL_MESSAGE[version])
    sub(group, "OrgnlNbOfTxs", str(len(report.transfers)))
    sub(group, "OrgnlCtrlSum", money_text(report.control_sum))
    status = group_status(report.transfers)
    sub(group, "GrpSts", status)
    if report.batch_note:
        sub(sub(group, "StsRsnInf"), "AddtlInf", _cut(report.batch_note, MAX105))
    block = sub(body, "OrgnlPmtInfAndSts")
    sub(block, "OrgnlPmtInfId", _cut(report.original_payment_information_id, MAX35))
    sub(block, "OrgnlNbOfTxs", str(len(report.transfers)))
    sub(block, "OrgnlCtrlSum", money_text(report.control_sum))
    sub(block, "PmtInfSts", status)
    for index, transfer in enumerate(report.transfers):
        item = sub(block, "TxInfAndSts")
        sub(item, "StsId", f"{index}")
        sub(item, "OrgnlEndToEndId", _cut(transfer.end_to_end_id or NOT_PROVIDED, MAX35))
        sub(item, "TxSts", transfer.status)
        notes = [transfer.reason_text] if transfer.reason_text else []
        if transfer.paid_by:
            notes.append(f"paid by retry {transfer.paid_by}")
        if transfer.reason_code or notes:
            reason = sub(item, "StsRsnInf")
            code = transfer.reason_code
            if code:
                sub(sub(reason, "Rsn"), "Cd" if len(code) <= 4 else "Prtry", _cut(code, 4 if len(code) <= 4 else MAX35))
            for note in notes:
                sub(reason, "AddtlInf", _cut(note, MAX105))
        if transfer.status == "ACSC" and transfer.accepted_at is not None:
            sub(item, "AccptncDtTm", _time(transfer.accepted_at))
    problems = validation_errors(root, message)
    if problems:  # a bug of ours: never hand out a document ISO's schema refuses
        raise ValueError(f"{message} does not match ISO's schema: {'; '.join(problems)}")
    return serialise(root)
