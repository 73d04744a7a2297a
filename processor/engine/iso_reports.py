"""The bank's results as ISO 20022 documents: a batch's `pain.002` status report for the ERP, and `camt.054`
debit notifications for the ledger. The data comes from the same per-transfer lines as the admin API and
`dispersion report` (`processor.engine.reporting.transfer_lines`); the XML is written by `processor.exports`.

A transfer that failed and was then paid (or failed again) by a retry batch (`ID.retry-N`) reports its final
outcome as `processor.engine.ledger.payroll_of` reads it (the console's and admin API's reading of a payroll) and
names the retry that paid it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from processor.domain.file_states import FlowState
from processor.domain.masking import mask_account
from processor.domain.outcomes import split_reason
from processor.engine.ledger import payroll_of
from processor.engine.reporting import transfer_lines
from processor.exports.camt054 import Entry, Notification, Notifications, PaidTransfer
from processor.exports.pain002 import StatusReport, TransferStatus
from processor.store import StoreTx
from processor.store.operator import BatchRow

_ISO_STATUS: dict[str, Literal["ACSC", "RJCT", "ACCP"]] = {"COMPLETED": "ACSC", "FAILED": "RJCT"}
_PAIN001 = re.compile(r"pain\.001\.001\.(03|09)")
_UNPAID_ENDS = (FlowState.REJECTED, FlowState.EXPIRED, FlowState.INVALID, FlowState.FAILED)


def report_message_id(kind: str, key: str, now: datetime) -> str:
    """`<kind><yyyymmddHHMMSS>-<8 hex of key>`: at most 35 characters, different per batch and second."""
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]
    return f"{kind}{now.strftime('%Y%m%d%H%M%S')}-{digest}"


def original_ids(batch_id: str, file_reference: str | None) -> tuple[str, str]:
    """(MsgId, PmtInfId) of the pain.001 a batch came from (`MsgId/PmtInfId`, the PmtInfId also its file
    reference); for a batch from another export, its batch id and file reference."""
    if file_reference and batch_id.endswith("/" + file_reference):
        return batch_id[: -len(file_reference) - 1], file_reference
    return batch_id, file_reference or batch_id


def ids_of(tx: StoreTx, row: BatchRow) -> tuple[str, str, str | None]:
    """`original_ids` of a stored batch, and the pain.001 version it was read from (`submit` names it in the
    batch's `source`; None for other exports). A retry batch (by its retry record) answers for its original."""
    original = row.retry_of or row.batch_id
    document = tx.flows.payload_document(original)
    document = document if isinstance(document, Mapping) else {}
    reference, source = document.get("file_reference"), str(document.get("source") or "")
    found = _PAIN001.search(source)
    ids = original_ids(original, reference if isinstance(reference, str) else None)
    return ids[0], ids[1], found.group(0) if found else None


def _status(line: Mapping[str, Any]) -> TransferStatus:
    return TransferStatus(
        end_to_end_id=line.get("employee_reference"),
        status=_ISO_STATUS.get(str(line["status"]), "ACCP"),
        reason_code=line.get("reason_code"),
        reason_text=line.get("reason_text"),
    )


def _ended_at(tx: StoreTx, batch_id: str | None) -> datetime | None:
    row = tx.operator.batch(batch_id) if batch_id else None
    return row.updated_at if row is not None and row.state in (FlowState.COMPLETED, FlowState.FAILED) else None


def _final(tx: StoreTx, batch_id: str, lines: list[dict[str, Any]]) -> list[TransferStatus]:
    """Each transfer's final outcome across the batch's retries (`processor.engine.ledger.payroll_of`, the one
    reading of a payroll that the console and the admin API use too)."""
    payroll = payroll_of(tx, batch_id)
    statuses: list[TransferStatus] = []
    for line in lines:
        outcome = payroll.outcomes.get(int(line["index"])) if payroll is not None else None
        reference = line.get("employee_reference")
        if outcome is None:
            mine = _status(line)
            statuses.append(TransferStatus(reference, mine.status, mine.reason_code, mine.reason_text))
            continue
        code, text = split_reason(outcome.reason)
        retried = outcome.by if outcome.by not in (None, batch_id) else None
        if outcome.final == "PAID":
            statuses.append(TransferStatus(reference, "ACSC", None, None, retried, _ended_at(tx, outcome.by)))
        elif outcome.final == "IN_PROGRESS":
            note = f"being retried in {retried}" if retried else None
            statuses.append(TransferStatus(reference, "ACCP", code, note))
        else:  # OUTSTANDING (the bank rejected it, and no retry paid it), NOT_PAID (the batch ended unpaid)
            statuses.append(TransferStatus(reference, "RJCT", code, text))
    return statuses


def status_report(tx: StoreTx, batch_id: str, now: datetime) -> StatusReport | None:
    """The `pain.002` content of a batch; None for an unknown batch. A retry batch asked for itself reports its
    own transfers; an original batch reports each transfer's final outcome across its retries."""
    row = tx.operator.batch(batch_id)
    if row is None:
        return None
    lines = transfer_lines(tx, row)
    if row.retry_of is not None:
        ended_at = _ended_at(tx, batch_id)
        statuses = [
            TransferStatus(s.end_to_end_id, s.status, s.reason_code, s.reason_text, None, ended_at)
            for s in map(_status, lines)
        ]
    else:
        statuses = _final(tx, batch_id, lines)
    message_id, block_id, version = ids_of(tx, row)
    total = sum((Decimal(str(line["amount"])) for line in lines), Decimal(0))
    note = f"the batch ended {row.state}" if row.state in _UNPAID_ENDS else None
    return StatusReport(
        message_id=report_message_id("PSR", batch_id, now),
        created_at=now,
        original_message_id=message_id,
        original_payment_information_id=block_id,
        original_message_name=version,
        control_sum=total,
        transfers=tuple(statuses),
        batch_note=note,
    )


def _paid(tx: StoreTx, batch_id: str, lines: list[dict[str, Any]], masked: bool) -> list[PaidTransfer]:
    document = tx.flows.payload_document(batch_id)
    listed = document.get("transactions") if isinstance(document, Mapping) else None
    # transfer_lines has a line per transfer object, in order (a retry's lines carry the original's numbers)
    items = [item for item in listed if isinstance(item, Mapping)] if isinstance(listed, list) else []
    paid: list[PaidTransfer] = []
    for line, item in zip(lines, items, strict=False):
        if line["status"] != "COMPLETED":
            continue
        destination = item.get("destination_account")
        account = str(destination.get("account_number", "")) if isinstance(destination, Mapping) else ""
        paid.append(
            PaidTransfer(
                end_to_end_id=line.get("employee_reference"),
                amount=Decimal(str(line["amount"])),
                account=mask_account(account) if masked else account,
                concept=str(item.get("concept") or ""),
            )
        )
    return paid


def debit_notifications(tx: StoreTx, since: datetime, until: datetime, now: datetime, *, masked: bool) -> Notifications:
    """The `camt.054` content of the batches that ended in [since, until), the window and batches of
    `dispersion report`: one notification per origin account and currency, one entry per batch that paid
    anything, one detail per paid transfer (its creditor account masked when `masked`)."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for row in tx.operator.ended_between(since, until):
        lines = transfer_lines(tx, row)
        paid = _paid(tx, row.batch_id, lines, masked)
        document = tx.flows.payload_document(row.batch_id)
        origin = document.get("origin_account") if isinstance(document, Mapping) else None
        if not paid or not isinstance(origin, Mapping):
            continue
        message_id, block_id, _ = ids_of(tx, row)
        key = (str(origin.get("account_number", "")), str(lines[0]["currency"] or origin.get("currency", "")))
        groups.setdefault(key, []).append(
            Entry(row.batch_id, message_id, block_id, row.updated_at, row.file_payment_id, tuple(paid))
        )
    return Notifications(
        message_id=report_message_id("DCN", f"{since.isoformat()}/{until.isoformat()}", now),
        created_at=now,
        since=since,
        until=until,
        notifications=tuple(
            Notification(account, currency, tuple(entries)) for (account, currency), entries in sorted(groups.items())
        ),
    )
