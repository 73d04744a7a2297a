"""Changed-account review (issue 19 point 3): payroll diversion is an employee's account changed to someone else's
just before payday, so a transfer whose destination differs from where the same employee reference (of the same
origin account) was last paid is worth a second person's look.

- When a batch COMPLETES, each paid transfer with an employee reference records where that employee was paid
  (`paid_accounts`: a hash of the account number and its last four characters, never the number itself).
- At intake, a new batch's transfers are compared with those records younger than `[controls]
  account_history_days` (default 400). Under `changed_accounts = "hold"` (default) a batch with a changed account
  waits, RECEIVED but not due, as a request (`kind` "changed_accounts") on the requests page: approving it makes
  the worker create its consent; declining it ends it FAILED before anything reaches the bank. Under `"flag"` the
  transfers are only marked (a request in state FLAGGED, shown with the batch and in the audit trail); `"off"`
  compares nothing. The batch's AUTHORIZATION_REQUIRED status event (its FAILED one, when declined) carries the
  changed transfers, masked, and who reviewed them (`changed_accounts`, `reviewed_by`: status v3).
  Retry batches are not compared: a corrected retry had its own second pair of eyes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from processor.domain.batch import PayrollBatch
from processor.domain.masking import mask_account
from processor.domain.roles import ChangedAccounts, Controls
from processor.domain.time import iso_ms
from processor.store import Flow, StoreTx

CHANGED_ACCOUNTS = "changed_accounts"  # the kind of the request a changed account makes
INTAKE = "dispersion-intake"  # who "asks" for the review of a held batch (the intake, not a person)
FLAGGED = "FLAGGED"  # a request state that needs no decision (`changed_accounts = "flag"`)
_PAID_CHUNK = 5000  # paid accounts recorded per `paid_many` (one round trip each on PostgreSQL)


def account_digest(number: str) -> str:
    """The hash `paid_accounts` keeps of an account number."""
    return hashlib.sha256(number.encode("utf-8")).hexdigest()


def remember_paid(
    tx: StoreTx,
    batch: PayrollBatch,
    results: Sequence[Mapping[str, Any]] | None,
    *,
    batch_id: str,
    now: datetime,
) -> int:
    """Record where each paid transfer's employee was paid (a COMPLETED batch; `results` None: every transfer
    paid); how many records."""
    failed = {int(r["index"]) for r in results or () if r.get("status") != "COMPLETED"}
    paid = (
        (transfer.employee_reference, account_digest(transfer.account_number), transfer.account_number[-4:])
        for index, transfer in enumerate(batch.transactions)
        if index not in failed and transfer.employee_reference
    )
    count = 0
    # A chunk at a time: the rows of 100,000 transfers and their statement parameters were about 30 MiB at once.
    while chunk := list(islice(paid, _PAID_CHUNK)):
        tx.paid_accounts.paid_many(batch.origin.number, chunk, batch_id=batch_id, now=now)
        count += len(chunk)
    return count


def changed_transfers(tx: StoreTx, batch: PayrollBatch, *, days: int, now: datetime) -> list[dict[str, Any]]:
    """The transfers of a batch whose destination differs from the employee's last paid account (paid within
    `days`), as the requests page shows them (accounts masked)."""
    references = [t.employee_reference for t in batch.transactions if t.employee_reference]
    known = tx.paid_accounts.last(batch.origin.number, references)
    del references
    since = now - timedelta(days=days)
    changed = []
    for index, transfer in enumerate(batch.transactions):
        reference = transfer.employee_reference
        last = known.get(reference) if reference else None
        if last is None or last.paid_at < since:
            continue
        number = transfer.account_number
        if account_digest(number) == last.account_sha256:
            continue
        changed.append(
            {
                "index": index,
                "employee_reference": reference,
                "amount": str(transfer.amount),
                "currency": transfer.currency,
                "old_account": "****" + last.account_last4,
                "new_account": mask_account(number),
                "last_paid_at": iso_ms(last.paid_at),
                "last_batch_id": last.batch_id,
            }
        )
    return changed


def review_at_intake(tx: StoreTx, flow: Flow, batch: PayrollBatch, controls: Controls, *, now: datetime) -> str | None:
    """Compare a just-stored batch (as parsed for its validation: its stored text is not parsed again) with where
    its employees were paid; hold or flag it (see the module docstring). The request's state (PENDING when held,
    FLAGGED), or None when nothing changed or it is off."""
    if controls.changed_accounts == ChangedAccounts.OFF:
        return None
    if flow.retry_of is not None:  # a retry made by retry-failed (its record; never a field of the document)
        return None
    changed = changed_transfers(tx, batch, days=controls.account_history_days, now=now)
    if not changed:
        return None
    request = tx.requests.create(CHANGED_ACCOUNTS, flow.batch_id, by=INTAKE, now=now, detail={"changed": changed})
    hold = controls.changed_accounts == ChangedAccounts.HOLD
    if hold:  # RECEIVED but not due: the worker creates no consent until an approver releases it
        tx.flows.update(flow.batch_id, expected_version=flow.version, now=now, next_action_at=None)
    else:
        tx.requests.decide(request.id, FLAGGED, by=INTAKE, now=now, outcome=None)
    tx.audit.record(
        "changed_accounts_held" if hold else "changed_accounts_flagged",
        actor=INTAKE,
        role=None,
        now=now,
        subject=flow.batch_id,
        detail={"via": "intake", "request": request.id, "changed": changed},
    )
    return "PENDING" if hold else FLAGGED


def review_fields(tx: StoreTx, batch_id: str, *, reviewed_by: str | None = None) -> dict[str, Any]:
    """The status event's `changed_accounts` and `reviewed_by` for a batch with a changed-account request (empty
    when it has none): the flagged transfers, masked, and who approved or declined them."""
    for request in tx.requests.of_batch(batch_id):
        changed = request.detail.get("changed")
        if request.kind != CHANGED_ACCOUNTS or not changed:
            continue
        decided = request.decided_by if request.state in ("APPROVED", "DECLINED") else None
        return {
            "changed_accounts": [
                {
                    "index": int(item["index"]),
                    "employee_reference": item.get("employee_reference"),
                    "previous_account": str(item["old_account"]),
                    "account": str(item["new_account"]),
                }
                for item in changed
            ],
            "reviewed_by": reviewed_by or decided,
        }
    return {}
