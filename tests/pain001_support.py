"""`pain.001` messages written the way two ERPs write them, for the tests.

- `sap_pain001`: pain.001.001.03 as SAP's Payment Medium Workbench (DMEE) writes it: `BtchBookg`, block-level
  `NbOfTxs`/`CtrlSum`, IBAN accounts with the debtor's `Ccy`, `InstrId` beside `EndToEndId`, BIC agents, the
  creditor's postal address before its contact details, one `Ustrd` line.
- `oracle_pain001`: pain.001.001.09 as Oracle Payments writes it: an initiating party with an organisation id,
  `Othr/Id` accounts with a scheme name (BBAN), `ReqdExctnDt/Dt`, `BICFI` agents, several `Ustrd` lines.

Each writer takes blocks of `(pmt_inf_id, requested_on, debtor_account, [Tx ...])`; the header's
`NbOfTxs`/`CtrlSum` are computed unless given (to write a message whose totals do not match). `valid` and `texts`
read a document back after ISO's schema accepted it (the tests' own validation, with the vendored XSD files).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from xml.sax.saxutils import escape

from lxml import etree

from processor.exports.iso20022 import XSD_DIR, namespace


@dataclass(frozen=True)
class Tx:
    """One credit transfer."""

    end_to_end_id: str
    amount: str
    account: str
    email: str | None = "ana@example.com"
    concept: str = "Payroll"
    currency: str = "GTQ"
    name: str = "Ana Lopez"


@dataclass(frozen=True)
class Block:
    """One payment information block."""

    pmt_inf_id: str
    requested_on: date
    debtor_account: str
    transactions: list[Tx]
    control_sum: str | None = None  # written as given (None: computed)
    number_of_transactions: int | None = None


def _sum(transactions: list[Tx]) -> str:
    return str(sum((Decimal(t.amount) for t in transactions), Decimal(0)))


def _header(msg_id: str, blocks: list[Block], count: int | None, total: str | None, party: str) -> str:
    transactions = [t for b in blocks for t in b.transactions]
    return (
        f"<GrpHdr><MsgId>{escape(msg_id)}</MsgId><CreDtTm>2026-11-25T10:15:00</CreDtTm>"
        f"<NbOfTxs>{len(transactions) if count is None else count}</NbOfTxs>"
        f"<CtrlSum>{_sum(transactions) if total is None else total}</CtrlSum>{party}</GrpHdr>"
    )


def _block_totals(block: Block) -> str:
    count = len(block.transactions) if block.number_of_transactions is None else block.number_of_transactions
    total = _sum(block.transactions) if block.control_sum is None else block.control_sum
    return f"<NbOfTxs>{count}</NbOfTxs><CtrlSum>{total}</CtrlSum>"


def _account_03(number: str) -> str:
    """SAP writes IBANs; a domestic number goes into Othr."""
    if number[:2].isalpha():
        return f"<Id><IBAN>{number}</IBAN></Id>"
    return f"<Id><Othr><Id>{number}</Id></Othr></Id>"


def sap_pain001(msg_id: str, blocks: list[Block], *, count: int | None = None, total: str | None = None) -> bytes:
    """A pain.001.001.03 message as SAP writes it."""
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.001.001.03" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">',
        "<CstmrCdtTrfInitn>",
        _header(msg_id, blocks, count, total, "<InitgPty><Nm>ACME GUATEMALA SA</Nm></InitgPty>"),
    ]
    for block in blocks:
        parts.append(
            f"<PmtInf><PmtInfId>{escape(block.pmt_inf_id)}</PmtInfId><PmtMtd>TRF</PmtMtd><BtchBookg>true</BtchBookg>"
            f"{_block_totals(block)}<PmtTpInf><InstrPrty>NORM</InstrPrty><CtgyPurp><Cd>SALA</Cd></CtgyPurp></PmtTpInf>"
            f"<ReqdExctnDt>{block.requested_on.isoformat()}</ReqdExctnDt>"
            "<Dbtr><Nm>ACME GUATEMALA SA</Nm><PstlAdr><Ctry>GT</Ctry></PstlAdr></Dbtr>"
            f"<DbtrAcct>{_account_03(block.debtor_account)}<Ccy>GTQ</Ccy></DbtrAcct>"
            "<DbtrAgt><FinInstnId><BIC>AGRCGTGCXXX</BIC></FinInstnId></DbtrAgt><ChrgBr>SLEV</ChrgBr>"
        )
        for i, tx in enumerate(block.transactions):
            email = f"<CtctDtls><EmailAdr>{escape(tx.email)}</EmailAdr></CtctDtls>" if tx.email else ""
            parts.append(
                f"<CdtTrfTxInf><PmtId><InstrId>{escape(block.pmt_inf_id)}-{i + 1}</InstrId>"
                f"<EndToEndId>{escape(tx.end_to_end_id)}</EndToEndId></PmtId>"
                f'<Amt><InstdAmt Ccy="{tx.currency}">{tx.amount}</InstdAmt></Amt>'
                "<CdtrAgt><FinInstnId><BIC>BINDGTGCXXX</BIC></FinInstnId></CdtrAgt>"
                f"<Cdtr><Nm>{escape(tx.name)}</Nm><PstlAdr><Ctry>GT</Ctry></PstlAdr>{email}</Cdtr>"
                f"<CdtrAcct>{_account_03(tx.account)}</CdtrAcct>"
                f"<RmtInf><Ustrd>{escape(tx.concept)}</Ustrd></RmtInf></CdtTrfTxInf>"
            )
        parts.append("</PmtInf>")
    parts.append("</CstmrCdtTrfInitn></Document>")
    return "\n".join(parts).encode("utf-8")


def _account_09(number: str) -> str:
    """Oracle writes the bank's own numbers as Othr with a BBAN scheme; IBANs as IBAN."""
    if number[:2].isalpha():
        return f"<Id><IBAN>{number}</IBAN></Id>"
    return f"<Id><Othr><Id>{number}</Id><SchmeNm><Cd>BBAN</Cd></SchmeNm></Othr></Id>"


def oracle_pain001(msg_id: str, blocks: list[Block], *, count: int | None = None, total: str | None = None) -> bytes:
    """A pain.001.001.09 message as Oracle Payments writes it."""
    party = (
        "<InitgPty><Nm>Acme Corp GT</Nm><Id><OrgId><Othr><Id>GT-4455667</Id>"
        "<SchmeNm><Cd>TXID</Cd></SchmeNm></Othr></OrgId></Id></InitgPty>"
    )
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.001.001.09">',
        "<CstmrCdtTrfInitn>",
        _header(msg_id, blocks, count, total, party),
    ]
    for block in blocks:
        parts.append(
            f"<PmtInf><PmtInfId>{escape(block.pmt_inf_id)}</PmtInfId><PmtMtd>TRF</PmtMtd>"
            f"{_block_totals(block)}<PmtTpInf><SvcLvl><Cd>NURG</Cd></SvcLvl></PmtTpInf>"
            f"<ReqdExctnDt><Dt>{block.requested_on.isoformat()}</Dt></ReqdExctnDt>"
            "<Dbtr><Nm>Acme Corp GT</Nm></Dbtr>"
            f"<DbtrAcct>{_account_09(block.debtor_account)}<Ccy>GTQ</Ccy></DbtrAcct>"
            "<DbtrAgt><FinInstnId><BICFI>AGRCGTGC</BICFI></FinInstnId></DbtrAgt>"
        )
        for tx in block.transactions:
            email = f"<CtctDtls><EmailAdr>{escape(tx.email)}</EmailAdr></CtctDtls>" if tx.email else ""
            words = tx.concept.split(" ", 1)
            ustrd = "".join(f"<Ustrd>{escape(word)}</Ustrd>" for word in words)
            parts.append(
                f"<CdtTrfTxInf><PmtId><EndToEndId>{escape(tx.end_to_end_id)}</EndToEndId></PmtId>"
                f'<Amt><InstdAmt Ccy="{tx.currency}">{tx.amount}</InstdAmt></Amt>'
                f"<Cdtr><Nm>{escape(tx.name)}</Nm>{email}</Cdtr>"
                f"<CdtrAcct>{_account_09(tx.account)}<Tp><Cd>SVGS</Cd></Tp></CdtrAcct>"
                f"<RmtInf>{ustrd}</RmtInf></CdtTrfTxInf>"
            )
        parts.append("</PmtInf>")
    parts.append("</CstmrCdtTrfInitn></Document>")
    return "\n".join(parts).encode("utf-8")


def valid(document: str | bytes, message: str) -> etree._Element:
    """The document, after ISO's schema for `message` accepted it."""
    checker = etree.XMLSchema(etree.parse(str(XSD_DIR / f"{message}.xsd")))
    root = etree.fromstring(document.encode() if isinstance(document, str) else document)
    assert checker.validate(root), checker.error_log
    return root


def texts(root: etree._Element, message: str, path: str) -> list[str]:
    """The text of every element at `path` (steps in the message's namespace)."""
    ns = {"d": namespace(message)}
    return [str(e.text) for e in root.iterfind("/".join(f"d:{step}" for step in path.split("/")), ns)]
