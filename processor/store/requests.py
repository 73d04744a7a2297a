"""Requests that wait for a second person (`tx.requests`), and the account each employee was last paid to
(`tx.paid_accounts`), for four eyes on where money goes (issue 19).

A request is `PENDING` until someone decides it (`APPROVED` or `DECLINED`, once: the decision is a conditional
update, so two approvers at the same moment cannot both decide it). Its `detail` is JSON: what is asked (a retry's
corrections, a batch's changed accounts), masked where it is shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from processor.domain.time import utc_ms
from processor.store.db import Row, Tx, to_datetime

PENDING, APPROVED, DECLINED = "PENDING", "APPROVED", "DECLINED"


@dataclass(frozen=True)
class RequestRow:
    """One request for a second person's decision."""

    id: int
    kind: str  # "retry" (corrected destination accounts) or "changed_accounts" (a batch held at intake)
    batch_id: str
    state: str
    requested_by: str
    requested_at: datetime
    detail: Mapping[str, Any]
    decided_by: str | None
    decided_at: datetime | None
    outcome: str | None


def _request(row: Row) -> RequestRow:
    at = to_datetime(row["requested_at"])
    assert at is not None
    return RequestRow(
        int(row["id"]),
        str(row["kind"]),
        str(row["batch_id"]),
        str(row["state"]),
        str(row["requested_by"]),
        at,
        json.loads(row["detail"]),
        row["decided_by"],
        to_datetime(row["decided_at"]),
        row["outcome"],
    )


class Requests:
    """The `approval_requests` table."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def create(self, kind: str, batch_id: str, *, by: str, now: datetime, detail: Mapping[str, Any]) -> RequestRow:
        """A new pending request."""
        row = self.tx.fetchone(
            "INSERT INTO approval_requests (kind, batch_id, state, requested_by, requested_at, detail)"
            " VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
            (kind, batch_id, PENDING, by, utc_ms(now), json.dumps(dict(detail), ensure_ascii=False, sort_keys=True)),
        )
        assert row is not None
        return _request(row)

    def get(self, request_id: int) -> RequestRow | None:
        """One request, or None."""
        row = self.tx.fetchone("SELECT * FROM approval_requests WHERE id = ?", (request_id,))
        return None if row is None else _request(row)

    def listed(
        self, *, states: Iterable[str] = (), after_id: int = 0, limit: int = 100, newest_first: bool = False
    ) -> list[RequestRow]:
        """Requests in `states` (every state when empty) after `after_id`, oldest first (or the newest first)."""
        wanted = tuple(states)
        where = f" AND state IN ({', '.join('?' * len(wanted))})" if wanted else ""
        order = "DESC" if newest_first else "ASC"
        rows = self.tx.fetchall(
            f"SELECT * FROM approval_requests WHERE id > ?{where} ORDER BY id {order} LIMIT ?",  # noqa: S608
            (after_id, *wanted, limit),
        )
        return [_request(row) for row in rows]

    def pending_for(self, batch_id: str, kind: str) -> RequestRow | None:
        """The pending request of `kind` about `batch_id`, if any."""
        row = self.tx.fetchone(
            "SELECT * FROM approval_requests WHERE batch_id = ? AND kind = ? AND state = ? ORDER BY id LIMIT 1",
            (batch_id, kind, PENDING),
        )
        return None if row is None else _request(row)

    def of_batch(self, batch_id: str) -> list[RequestRow]:
        """Every request about `batch_id`, oldest first."""
        rows = self.tx.fetchall("SELECT * FROM approval_requests WHERE batch_id = ? ORDER BY id", (batch_id,))
        return [_request(row) for row in rows]

    def decide(self, request_id: int, state: str, *, by: str, now: datetime, outcome: str | None) -> bool:
        """Move a pending request to `state`; False when it was no longer pending (someone decided first)."""
        changed = self.tx.execute(
            "UPDATE approval_requests SET state = ?, decided_by = ?, decided_at = ?, outcome = ?"
            " WHERE id = ? AND state = ?",
            (state, by, utc_ms(now), outcome, request_id, PENDING),
        )
        return changed > 0


@dataclass(frozen=True)
class PaidAccount:
    """Where an employee of an origin account was last paid: a hash of the account number, its last four
    characters (to show it masked), the batch and when."""

    account_sha256: str
    account_last4: str
    batch_id: str
    paid_at: datetime


_PAID_ROW = {
    "origin_account": "text",
    "employee_reference": "text",
    "account_sha256": "text",
    "account_last4": "text",
    "batch_id": "text",
    "paid_at": "timestamptz",
}


class PaidAccounts:
    """The `paid_accounts` table."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def last(self, origin_account: str, references: Iterable[str]) -> dict[str, PaidAccount]:
        """The last paid account of each of `references` (those with one)."""
        wanted = sorted(set(references))
        found: dict[str, PaidAccount] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            which, values = self.tx.among("employee_reference", chunk)
            rows = self.tx.fetchall(
                f"SELECT * FROM paid_accounts WHERE origin_account = ? AND {which}",  # noqa: S608
                (origin_account, *values),
            )
            for row in rows:
                paid = to_datetime(row["paid_at"])
                assert paid is not None
                found[str(row["employee_reference"])] = PaidAccount(
                    str(row["account_sha256"]), str(row["account_last4"]), str(row["batch_id"]), paid
                )
        return found

    def paid_many(
        self, origin_account: str, paid: Sequence[tuple[str, str, str]], *, batch_id: str, now: datetime
    ) -> None:
        """Record that each (employee reference, account SHA-256, last 4) of one batch was paid to that account
        now, replacing an older record; one `executemany` (one round trip on PostgreSQL)."""
        stamp = utc_ms(now)
        # An employee paid twice in the batch: the later transfer's account, as row-by-row upserts kept it (one
        # statement may not change a row twice). In the references' order, so that two batches paying the same
        # employees at once lock their rows in one order.
        last = {reference: (digest, last4) for reference, digest, last4 in paid}
        self.tx.insert_many(
            "paid_accounts",
            _PAID_ROW,
            [
                (origin_account, reference, digest, last4, batch_id, stamp)
                for reference, (digest, last4) in sorted(last.items())
            ],
            conflict=" ON CONFLICT (origin_account, employee_reference) DO UPDATE SET"
            " account_sha256 = excluded.account_sha256, account_last4 = excluded.account_last4,"
            " batch_id = excluded.batch_id, paid_at = excluded.paid_at WHERE paid_accounts.paid_at <= excluded.paid_at",
        )
