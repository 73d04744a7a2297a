"""`pain.001` (CustomerCreditTransferInitiation, .001.03 and .001.09) read as payroll batches.

The document is validated against ISO's schema first (`processor.exports.iso20022`). Each payment information
block (`PmtInf`) becomes one batch:

| ISO 20022 | our field |
| --- | --- |
| `GrpHdr/MsgId` + `PmtInf/PmtInfId` | `batch_id` = `MsgId/PmtInfId` (the same message resubmitted is the same batch) |
| `PmtInf/PmtInfId` | `file_reference` (its first 40 characters) |
| `DbtrAcct/Id/IBAN` or `.../Othr/Id`, `DbtrAcct/Ccy` | origin account and currency (else the first `InstdAmt/@Ccy`) |
| `ReqdExctnDt` (`ReqdExctnDt/Dt` or `/DtTm` in .09) | `execute_on` when later than the day the file is read |
| `CdtTrfTxInf/PmtId/EndToEndId` | `employee_reference` (kept per transfer: `pain.002` names it back) |
| `Amt/InstdAmt` and its `Ccy` | `amount`, `currency` |
| `CdtrAcct/Id/IBAN` or `CdtrAcct/Id/Othr/Id` | `account_number`, as written |
| `CdtrAcct/Tp/Cd` | `account_type`: `CACC` -> MONETARY, anything else SAVINGS |
| `Cdtr/CtctDtls/EmailAdr` | `email` (the bank requires it: a transfer without one is refused) |
| `RmtInf/Ustrd` | `concept` (several lines joined with a space) |

`NbOfTxs` and `CtrlSum` are checked at group and block level; every mismatch is reported and nothing is read
(`Pain001Error`). Imports only `processor.domain` of ours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Final

from lxml import etree

from processor.domain.batch import DEFAULT_ORIGIN_ACCOUNT_TYPE, OriginAccount, PayrollBatch, Transfer
from processor.domain.masking import mask_account
from processor.domain.money import money_text
from processor.exports.iso20022 import Document, Iso20022Error, parse

VERSIONS: Final = ("pain.001.001.03", "pain.001.001.09")
FILE_REFERENCE_LENGTH: Final = 40
_ACCOUNT_TYPES: Final = {"CACC": "MONETARY"}
_DEFAULT_ACCOUNT_TYPE: Final = "SAVINGS"


class Pain001Error(Exception):
    """The message cannot become batches; `problems` lists everything found."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class CreditTransfer:
    """One `CdtTrfTxInf` as written; `account_path` says where its account was (`IBAN` or `Othr/Id`)."""

    end_to_end_id: str
    amount: Decimal
    currency: str
    account: str
    account_path: str
    account_type_code: str | None
    email: str | None
    concept: str


@dataclass(frozen=True)
class PaymentBlock:
    """One `PmtInf` as written."""

    pmt_inf_id: str
    requested_on: date | None
    debtor_account: str
    debtor_account_path: str
    debtor_currency: str | None
    number_of_transactions: int | None
    control_sum: Decimal | None
    transfers: tuple[CreditTransfer, ...]


@dataclass(frozen=True)
class Pain001Message:
    """A validated `pain.001` message."""

    version: str
    msg_id: str
    number_of_transactions: int
    control_sum: Decimal | None
    blocks: tuple[PaymentBlock, ...]


def read_pain001(data: bytes, *, check_totals: bool = True) -> Pain001Message:
    """The message in `data`; Pain001Error listing every problem (schema findings, and `NbOfTxs`/`CtrlSum` that do
    not match what the message holds unless `check_totals` is false: the caller then reports `totals_problems`
    beside its own)."""
    try:
        document = parse(data, VERSIONS)
    except Iso20022Error as exc:
        raise Pain001Error(exc.problems) from None
    text = _texts(document)
    root = document.root.find(document.ns("CstmrCdtTrfInitn"))
    assert root is not None  # the schema requires it
    header = root.find(document.ns("GrpHdr"))
    assert header is not None
    blocks = tuple(_block(document, element, text) for element in root.findall(document.ns("PmtInf")))
    message = Pain001Message(
        version=document.message,
        msg_id=text(header, "MsgId") or "",
        number_of_transactions=int(text(header, "NbOfTxs") or "0"),
        control_sum=_decimal(text(header, "CtrlSum")),
        blocks=blocks,
    )
    problems = totals_problems(message) if check_totals else []
    if problems:
        raise Pain001Error(problems)
    return message


def _texts(document: Document) -> Callable[[etree._Element, str], str | None]:
    def text(element: etree._Element, path: str) -> str | None:
        found = element.find(document.ns(path))
        return None if found is None or found.text is None else found.text.strip()

    return text


def _decimal(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)


def _account(document: Document, account: etree._Element | None) -> tuple[str, str]:
    """(number, `IBAN` or `Othr/Id`) of a `CashAccount` element."""
    if account is None:
        return "", ""
    found = account.find(document.ns("Id/IBAN"))
    if found is not None and found.text:
        return found.text.strip(), "IBAN"
    other = account.find(document.ns("Id/Othr/Id"))
    return ("", "") if other is None or other.text is None else (other.text.strip(), "Othr/Id")


def _block(
    document: Document, element: etree._Element, text: Callable[[etree._Element, str], str | None]
) -> PaymentBlock:
    number, path = _account(document, element.find(document.ns("DbtrAcct")))
    when = text(element, "ReqdExctnDt")
    if document.message == "pain.001.001.09":
        when = text(element, "ReqdExctnDt/Dt") or (text(element, "ReqdExctnDt/DtTm") or "")[:10] or None
    count = text(element, "NbOfTxs")
    return PaymentBlock(
        pmt_inf_id=text(element, "PmtInfId") or "",
        requested_on=date.fromisoformat(when[:10]) if when else None,
        debtor_account=number,
        debtor_account_path=path,
        debtor_currency=text(element, "DbtrAcct/Ccy"),
        number_of_transactions=None if count is None else int(count),
        control_sum=_decimal(text(element, "CtrlSum")),
        transfers=tuple(_transfer(document, item, text) for item in element.findall(document.ns("CdtTrfTxInf"))),
    )


def _transfer(
    document: Document, element: etree._Element, text: Callable[[etree._Element, str], str | None]
) -> CreditTransfer:
    amount = element.find(document.ns("Amt/InstdAmt"))
    account, path = _account(document, element.find(document.ns("CdtrAcct")))
    lines = [line.text.strip() for line in element.findall(document.ns("RmtInf/Ustrd")) if line.text]
    return CreditTransfer(
        end_to_end_id=text(element, "PmtId/EndToEndId") or "",
        amount=Decimal(amount.text.strip()) if amount is not None and amount.text else Decimal(0),
        currency=amount.get("Ccy", "") if amount is not None else "",
        account=account,
        account_path=path,
        account_type_code=text(element, "CdtrAcct/Tp/Cd"),
        email=text(element, "Cdtr/CtctDtls/EmailAdr"),
        concept=" ".join(lines),
    )


def totals_problems(message: Pain001Message) -> list[str]:
    """Every `NbOfTxs` / `CtrlSum` (group and block) that differs from what the message holds."""
    problems: list[str] = []
    transfers = [t for block in message.blocks for t in block.transfers]
    total = sum((t.amount for t in transfers), Decimal(0))
    if message.number_of_transactions != len(transfers):
        problems.append(f"GrpHdr/NbOfTxs: says {message.number_of_transactions}, the message holds {len(transfers)}")
    if message.control_sum is not None and message.control_sum != total:
        problems.append(f"GrpHdr/CtrlSum: says {message.control_sum}, the amounts add up to {total}")
    for block in message.blocks:
        where = f"PmtInf {block.pmt_inf_id}"
        count = len(block.transfers)
        amounts = sum((t.amount for t in block.transfers), Decimal(0))
        if block.number_of_transactions is not None and block.number_of_transactions != count:
            problems.append(f"{where}: NbOfTxs says {block.number_of_transactions}, the block holds {count}")
        if block.control_sum is not None and block.control_sum != amounts:
            problems.append(f"{where}: CtrlSum says {block.control_sum}, its amounts add up to {amounts}")
    return problems


def batch_id_of(msg_id: str, pmt_inf_id: str) -> str:
    """`MsgId/PmtInfId`: resubmitting the same message gives the same batches."""
    return f"{msg_id}/{pmt_inf_id}"


def batches(
    message: Pain001Message, *, integration: str, requested_at: datetime, source: str, today: date
) -> tuple[list[PayrollBatch], list[str]]:
    """One batch per block, and the transfers that cannot be paid (no e-mail), each named by its EndToEndId.
    A `ReqdExctnDt` after `today` (the integration's day) becomes the batch's `execute_on`."""
    found: list[PayrollBatch] = []
    problems: list[str] = []
    for block in message.blocks:
        currency = block.debtor_currency or (block.transfers[0].currency if block.transfers else "")
        transfers: list[Transfer] = []
        for index, item in enumerate(block.transfers):
            if not item.email:
                problems.append(
                    f"PmtInf {block.pmt_inf_id}: EndToEndId {item.end_to_end_id} (transaction {index}): "
                    "Cdtr/CtctDtls/EmailAdr is missing; the bank needs the creditor's e-mail"
                )
            transfers.append(
                Transfer(
                    account_number=item.account,
                    account_type=_ACCOUNT_TYPES.get(item.account_type_code or "", _DEFAULT_ACCOUNT_TYPE),
                    currency=item.currency,
                    email=item.email or "",
                    amount=item.amount,
                    concept=item.concept,
                    employee_reference=item.end_to_end_id,
                )
            )
        later = block.requested_on if block.requested_on is not None and block.requested_on > today else None
        found.append(
            PayrollBatch(
                batch_id=batch_id_of(message.msg_id, block.pmt_inf_id),
                integration=integration,
                file_reference=block.pmt_inf_id[:FILE_REFERENCE_LENGTH],
                origin=OriginAccount(block.debtor_account, DEFAULT_ORIGIN_ACCOUNT_TYPE, currency),
                transactions=tuple(transfers),
                requested_at=requested_at,
                source=source,
                execute_on=later,
            )
        )
    return found, problems


def explain(message: Pain001Message, batches_read: list[PayrollBatch], *, rows: int = 3) -> list[str]:
    """`--explain`: how each block and its first transactions were read (accounts masked)."""
    lines = [f"{message.version}: MsgId {message.msg_id}, {message.number_of_transactions} transaction(s)"]
    for block, batch in zip(message.blocks, batches_read, strict=True):
        when = block.requested_on.isoformat() if block.requested_on else "(none)"
        paid = f"execute_on {batch.execute_on.isoformat()}" if batch.execute_on else "paid as soon as approved"
        lines.append(f"PmtInf {block.pmt_inf_id} -> batch {batch.batch_id}")
        lines.append(
            f"  DbtrAcct/Id/{block.debtor_account_path} -> origin {mask_account(block.debtor_account)} "
            f"{batch.origin.currency}"
        )
        lines.append(f"  ReqdExctnDt {when} -> {paid}")
        for index, (item, transfer) in enumerate(zip(block.transfers[:rows], batch.transactions, strict=False)):
            lines.append(f"  transaction {index}:")
            lines.append(f"    PmtId/EndToEndId          -> employee_reference {item.end_to_end_id}")
            lines.append(f"    Amt/InstdAmt              -> amount {money_text(item.amount)} {item.currency}")
            lines.append(
                f"    CdtrAcct/Id/{item.account_path:<13} -> account_number {mask_account(item.account)} "
                f"({transfer.account_type})"
            )
            lines.append(f"    Cdtr/CtctDtls/EmailAdr    -> email {item.email or '(missing)'}")
            lines.append(f"    RmtInf/Ustrd              -> concept {item.concept!r}")
        if len(block.transfers) > rows:
            lines.append(f"  ... {len(block.transfers) - rows:,} more transaction(s)")
    return lines
