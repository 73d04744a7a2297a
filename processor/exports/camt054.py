"""`camt.054` (BankToCustomerDebitCreditNotification, .001.02 and .001.08): what was paid, for the ledger.

One debit notification (`Ntfctn`) per origin account and currency, one entry (`Ntry`, batch booking) per batch
that paid anything, and one transaction detail (`TxDtls`) per paid transfer with its `EndToEndId`, amount and
creditor account (as given, or masked). Bank transaction code PMNT / ICDT / SALA (payroll). The document is
checked against ISO's schema before it is returned. Imports only `processor.domain` of ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Final, Literal

from lxml import etree

from processor.domain.money import money_text
from processor.exports.iso20022 import namespace, serialise, validation_errors
from processor.exports.pain002 import MAX35, NOT_PROVIDED

Version = Literal["02", "08"]
VERSIONS: Final[dict[str, str]] = {"02": "camt.054.001.02", "08": "camt.054.001.08"}
_IBAN: Final = re.compile(r"[A-Z]{2}[0-9]{2}[a-zA-Z0-9]{1,30}")
MAX140: Final = 140


@dataclass(frozen=True)
class PaidTransfer:
    """One paid transfer."""

    end_to_end_id: str | None
    amount: Decimal
    account: str
    concept: str


@dataclass(frozen=True)
class Entry:
    """One batch's paid transfers, booked together."""

    batch_id: str
    original_message_id: str
    original_payment_information_id: str
    booked_at: datetime
    bank_reference: str | None
    transfers: tuple[PaidTransfer, ...]

    @property
    def total(self) -> Decimal:
        """The entry's amount: its transfers added up."""
        return sum((t.amount for t in self.transfers), Decimal(0))


@dataclass(frozen=True)
class Notification:
    """The debits of one origin account in one currency."""

    account: str
    currency: str
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Notifications:
    """A whole `camt.054` message."""

    message_id: str
    created_at: datetime
    since: datetime
    until: datetime
    notifications: tuple[Notification, ...]


def _time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class _Writer:
    """Element helpers in one message's namespace."""

    def __init__(self, version: Version) -> None:
        self.version = version
        self.message = VERSIONS[version]
        self.space = namespace(self.message)

    def sub(self, parent: etree._Element, name: str, text: str | None = None, **attributes: str) -> etree._Element:
        child = etree.SubElement(parent, f"{{{self.space}}}{name}", attributes)
        if text is not None:
            child.text = text
        return child

    def path(self, parent: etree._Element, path: str, text: str | None = None) -> etree._Element:
        """`a/b/c` below `parent`, each step a new element, the last holding `text`."""
        steps = path.split("/")
        for step in steps[:-1]:
            parent = self.sub(parent, step)
        return self.sub(parent, steps[-1], text)

    def account(self, parent: etree._Element, number: str) -> None:
        identification = self.sub(parent, "Id")
        if _IBAN.fullmatch(number):
            self.sub(identification, "IBAN", number)
        else:
            self.path(identification, "Othr/Id", number[:34])

    def bank_code(self, parent: etree._Element) -> None:
        code = self.sub(parent, "BkTxCd")
        domain = self.sub(code, "Domn")
        self.sub(domain, "Cd", "PMNT")
        family = self.sub(domain, "Fmly")
        self.sub(family, "Cd", "ICDT")
        self.sub(family, "SubFmlyCd", "SALA")


class NothingPaidError(ValueError):
    """No batch paid anything in the window: ISO's schema wants at least one notification."""


def camt054(message: Notifications, version: Version) -> bytes:
    """The notifications as a `camt.054.001.<version>` document, valid against ISO's schema; NothingPaidError
    when there is no notification to write."""
    if not message.notifications:
        raise NothingPaidError(f"no batch paid anything between {_time(message.since)} and {_time(message.until)}")
    w = _Writer(version)
    root = etree.Element(f"{{{w.space}}}Document", nsmap={None: w.space})  # type: ignore[dict-item]  # the default namespace
    body = w.sub(root, "BkToCstmrDbtCdtNtfctn")
    header = w.sub(body, "GrpHdr")
    w.sub(header, "MsgId", message.message_id[:MAX35])
    w.sub(header, "CreDtTm", _time(message.created_at))
    for number, notification in enumerate(message.notifications, start=1):
        _notification(w, w.sub(body, "Ntfctn"), message, number, notification)
    problems = validation_errors(root, w.message)
    if problems:  # a bug of ours: never hand out a document ISO's schema refuses
        raise ValueError(f"{w.message} does not match ISO's schema: {'; '.join(problems)}")
    return serialise(root)


def _notification(
    w: _Writer, element: etree._Element, message: Notifications, number: int, notification: Notification
) -> None:
    w.sub(element, "Id", f"{message.message_id[:30]}-{number}")
    w.sub(element, "CreDtTm", _time(message.created_at))
    period = w.sub(element, "FrToDt")
    w.sub(period, "FrDtTm", _time(message.since))
    w.sub(period, "ToDtTm", _time(message.until))
    account = w.sub(element, "Acct")
    w.account(account, notification.account)
    w.sub(account, "Ccy", notification.currency)
    for entry in notification.entries:
        _entry(w, w.sub(element, "Ntry"), entry, notification.currency)


def _entry(w: _Writer, element: etree._Element, entry: Entry, currency: str) -> None:
    w.sub(element, "NtryRef", entry.batch_id[:MAX35])
    w.sub(element, "Amt", money_text(entry.total), Ccy=currency)
    w.sub(element, "CdtDbtInd", "DBIT")
    if w.version == "02":
        w.sub(element, "Sts", "BOOK")
    else:
        w.path(element, "Sts/Cd", "BOOK")
    w.path(element, "BookgDt/DtTm", _time(entry.booked_at))
    if entry.bank_reference:
        w.sub(element, "AcctSvcrRef", entry.bank_reference[:MAX35])
    w.bank_code(element)
    details = w.sub(element, "NtryDtls")
    batch = w.sub(details, "Btch")
    w.sub(batch, "MsgId", entry.original_message_id[:MAX35])
    w.sub(batch, "PmtInfId", entry.original_payment_information_id[:MAX35])
    w.sub(batch, "NbOfTxs", str(len(entry.transfers)))
    w.sub(batch, "TtlAmt", money_text(entry.total), Ccy=currency)
    w.sub(batch, "CdtDbtInd", "DBIT")
    for transfer in entry.transfers:
        item = w.sub(details, "TxDtls")
        references = w.sub(item, "Refs")
        w.sub(references, "MsgId", entry.original_message_id[:MAX35])
        w.sub(references, "PmtInfId", entry.original_payment_information_id[:MAX35])
        w.sub(references, "EndToEndId", (transfer.end_to_end_id or NOT_PROVIDED)[:MAX35])
        if w.version == "02":
            w.path(w.sub(item, "AmtDtls"), "InstdAmt/Amt", money_text(transfer.amount)).set("Ccy", currency)
        else:
            w.sub(item, "Amt", money_text(transfer.amount), Ccy=currency)
            w.sub(item, "CdtDbtInd", "DBIT")
        w.account(w.path(item, "RltdPties/CdtrAcct"), transfer.account)
        if transfer.concept:
            w.path(item, "RmtInf/Ustrd", transfer.concept[:MAX140])
