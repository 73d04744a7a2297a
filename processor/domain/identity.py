"""A submission's identity is its business content, not when or by whom it was sent (DESIGN.md, "Second phase").

The same export submitted twice differs only in `requested_at` (the moment of submission) and perhaps `source`
(which tool sent it); it is the same batch and must be recognised as such, not dead-lettered as a conflict. A
batch id reused with other transfers, another origin or another file reference is a different batch: a conflict.

    content_sha256(batch)                 # a parsed PayrollBatch
    document_content_sha256(document)     # any batch document (JSON or Avro form), parsed or not
    request_content_sha256(document)      # a VRP mandate request or payment instruction (normalised form)
    payroll_id(batch, submitted_at=...)   # the default batch id: what the payroll pays in which period, not bytes

Amounts are compared as numbers (`1.5` and `1.50` are the same amount); absent account types take their defaults
before hashing, so the JSON and Avro forms of one export hash alike. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Final

from processor.domain.batch import BatchParseError, PayrollBatch, batch_from_dict
from processor.domain.canonical import CanonicalizationError, canonicalize

# Fields of a submission that say when and by whom it was sent, not what it asks for.
VOLATILE_FIELDS: Final = frozenset({"requested_at", "source"})


def _amount(value: Decimal) -> str:
    """An amount's numeric value as text, the same for `1.5`, `1.50` and `1.500`."""
    normal = value.normalize()
    return format(normal if normal != 0 else Decimal(0), "f")


def content_document(batch: PayrollBatch) -> dict[str, Any]:
    """What identifies a batch: batch id, integration, origin, transfers (in order) and file reference, and its
    `execute_on` when it has one (the same transfers on another day are another instruction; a batch without
    one hashes as it always did)."""
    document: dict[str, Any] = {
        "batch_id": batch.batch_id,
        "integration": batch.integration,
        "file_reference": batch.file_reference,
        "origin": [batch.origin.number, batch.origin.type, batch.origin.currency],
        "transfers": [
            [t.account_number, t.account_type, t.currency, t.email, _amount(t.amount), t.concept, t.employee_reference]
            for t in batch.transactions
        ],
    }
    if batch.execute_on is not None:
        document["execute_on"] = batch.execute_on.isoformat()
    return document


def _digest(value: object) -> str:
    try:
        data = canonicalize(value)
    except (CanonicalizationError, TypeError):
        data = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def content_sha256(batch: PayrollBatch) -> str:
    """SHA-256 (hex) of the batch's business content (see `content_document`)."""
    return _digest(content_document(batch))


def _plain(value: Any) -> Any:
    """A document with amounts and instants as text, for hashing a document that is not a batch."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal):
        return _amount(value) if value.is_finite() else str(value)
    if isinstance(value, date):  # a datetime too
        return value.isoformat()
    if isinstance(value, float | bytes):
        return repr(value)
    return value


def document_content_sha256(document: Any) -> str:
    """The business-content hash of a batch document; for a document that is no readable batch (it will be
    INVALID), the hash of the document without its volatile fields, so a resubmission still matches itself."""
    if isinstance(document, Mapping):
        try:
            return content_sha256(batch_from_dict(document))
        except BatchParseError:
            return _digest(_plain({k: v for k, v in document.items() if k not in VOLATILE_FIELDS}))
    return _digest(_plain(document))


def request_content_sha256(document: Mapping[str, Any]) -> str:
    """The business-content hash of a VRP mandate request or payment instruction in its normalised form
    (`document()` of `processor.domain.vrp_requests`): everything but `requested_at` and `source`."""
    return _digest(_plain({k: v for k, v in document.items() if k not in VOLATILE_FIELDS}))


# The prefix of a batch id derived from what the payroll pays (`payroll_id`).
PAYROLL_ID_PREFIX: Final = "payroll-"


def pay_period(batch: PayrollBatch, submitted_at: datetime) -> str:
    """The pay period a batch's default id names: its `execute_on` day when it has one, else the UTC calendar
    month it is submitted in (`2026-11`). `submitted_at` is the submission's instant (aware), given by the caller."""
    if batch.execute_on is not None:
        return batch.execute_on.isoformat()
    return submitted_at.astimezone(UTC).strftime("%Y-%m")


def payroll_id(batch: PayrollBatch, *, submitted_at: datetime) -> str:
    """The default batch id of an export: `payroll-` and the first 16 hex digits of the SHA-256 of its origin
    account, its transfers and its pay period (`pay_period`), never of the file's bytes or name. A re-saved
    workbook, a re-run of the ERP's export or the same rows in another format in the same period give the same id
    (and so the same batch, paid at most once); another transfer, amount, origin or period gives another: next
    month's identical payroll is a new batch, which the duplicate-payroll guard holds until a person confirms it."""
    document: dict[str, Any] = {
        "origin": [batch.origin.number, batch.origin.type, batch.origin.currency],
        "transfers": content_document(batch)["transfers"],
    }
    period = pay_period(batch, submitted_at)
    if batch.execute_on is not None:
        document["execute_on"] = period  # the key ids of scheduled batches had before the month was added
    else:
        document["month"] = period
    return PAYROLL_ID_PREFIX + _digest(document)[:16]
