"""Repositories of flow B: VRP mandates (the consent, authorised once) and the payments made under them.

Both are leased work items like flows (`claim_due`, `acquire`, `update`, `transition`, see
`processor.store.work`). Payments under one mandate are checked against its limits by the engine; to keep two
concurrent payments from both passing a check that only one of them fits, the engine locks the mandate row
(`tx.mandates.get(mandate_id, for_update=True)`) in the transaction that sums the earlier payments
(`tx.vrp_payments.total`) and inserts the new one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar, TypedDict, Unpack

from processor.domain.time import utc_ms
from processor.domain.vrp_states import Mandate, Payment
from processor.store.console import BatchFilter
from processor.store.crypto import new_secret_token
from processor.store.db import in_clause
from processor.store.outbox import Outbox, StatusEvent
from processor.store.values import Kind, dump_json, json_text, money, read_money, sha256_hex
from processor.store.work import WORK_COLUMNS, WORK_UPDATABLE, Created, WorkRepo


@dataclass(frozen=True)
class VrpMandate:
    """A VRP mandate. `request` is the mandate request as received; `limits` the control parameters the
    client-side check uses (amounts as strings)."""

    mandate_id: str
    integration: str
    state: str
    request: str = field(repr=False)
    request_sha256: str
    consent_id: str | None
    currency: str | None
    limits: Any
    valid_from: datetime | None
    valid_to: datetime | None
    approval_token: str = field(repr=False)
    authorization_deadline: datetime | None
    next_action_at: datetime | None
    attempts: int
    version: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    bank_status: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    consent_read_at: datetime | None = None
    traceparent: str | None = None  # W3C trace context of its intake: its steps continue that trace

    @property
    def key(self) -> str:
        """The mandate's key."""
        return self.mandate_id


class MandateFields(TypedDict, total=False):
    """Columns `MandateRepo.transition` may change besides the state."""

    next_action_at: datetime | None
    attempts: int
    bank_status: str | None
    last_error: str | None
    consent_id: str | None
    limits: Any
    valid_from: datetime | None
    valid_to: datetime | None
    authorization_deadline: datetime | None
    approval_token: str
    consent_read_at: datetime | None


class MandateChanges(MandateFields, total=False):
    """Columns `MandateRepo.update` may change."""

    state: str


class MandateFilter(BatchFilter):
    """The mandates listing's filters (`BatchFilter`'s fields); `text` matches the mandate id or the consent id."""

    def clause(self, *, with_states: bool = True) -> tuple[str, list[Any]]:
        """The WHERE clause (or "") and its parameters."""
        return self.where(("mandate_id", "consent_id"), with_states=with_states)


class MandateRepo(WorkRepo[VrpMandate]):
    """The `vrp_mandates` table."""

    table: ClassVar[str] = "vrp_mandates"
    key_column: ClassVar[str] = "mandate_id"
    columns: ClassVar[Mapping[str, Kind]] = {
        "mandate_id": "text",
        "integration": "text",
        "request": "text",
        "request_sha256": "text",
        "consent_id": "text",
        "currency": "text",
        "limits": "json",
        "valid_from": "ts",
        "valid_to": "ts",
        "approval_token": "text",
        "authorization_deadline": "ts",
        **WORK_COLUMNS,
        "consent_read_at": "ts",
        "traceparent": "text",
    }
    updatable: ClassVar[frozenset[str]] = WORK_UPDATABLE | {
        "consent_id",
        "limits",
        "valid_from",
        "valid_to",
        "authorization_deadline",
        "approval_token",
        "consent_read_at",
    }
    row_type: ClassVar[type[Any]] = VrpMandate

    def create(
        self,
        mandate_id: str,
        integration: str,
        request: str | bytes | Mapping[str, Any],
        *,
        limits: Mapping[str, Any],
        now: datetime,
        currency: str | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        state: str = Mandate.RECEIVED,
        authorization_deadline: datetime | None = None,
        next_action_at: datetime | None = None,
        approval_token: str | None = None,
        content_sha256: str | None = None,
    ) -> Created[VrpMandate]:
        """Insert a mandate unless its id exists (a duplicate changes nothing: `created=False`).
        `content_sha256`: the request's business-content hash, compared for a duplicate (default: the text's)."""
        text = json_text(request)
        digest = content_sha256 or sha256_hex(text)
        now = utc_ms(now)
        row = self.tx.fetchone(
            "INSERT INTO vrp_mandates (mandate_id, integration, state, request, request_sha256, currency, limits,"  # noqa: S608
            " valid_from, valid_to, approval_token, authorization_deadline, next_action_at, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            f" ON CONFLICT (mandate_id) DO NOTHING RETURNING {self._cols()}",
            (
                mandate_id,
                integration,
                str(state),
                text,
                digest,
                currency,
                dump_json(limits),
                valid_from,
                valid_to,
                approval_token or new_secret_token(),
                authorization_deadline,
                next_action_at,
                now,
                now,
            ),
        )
        if row is not None:
            return Created(self._decode(row), True)
        existing = self.require(mandate_id)
        return Created(existing, False, existing.request_sha256 == digest)

    def listing(self, wanted: MandateFilter, *, offset: int = 0, limit: int = 50) -> list[VrpMandate]:
        """Matching mandates, newest first (then by id), one page."""
        clause, params = wanted.clause()
        rows = self.tx.fetchall(
            f"SELECT {self._cols()} FROM vrp_mandates{clause}"  # noqa: S608
            " ORDER BY created_at DESC, mandate_id DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [self._decode(row) for row in rows]

    def state_counts(self, wanted: MandateFilter) -> dict[str, int]:
        """How many mandates match the filter's other fields, per state."""
        clause, params = wanted.clause(with_states=False)
        rows = self.tx.fetchall(f"SELECT state, COUNT(*) AS n FROM vrp_mandates{clause} GROUP BY state", params)  # noqa: S608
        return {str(row["state"]): int(row["n"]) for row in rows}

    def integrations(self) -> list[str]:
        """The integrations mandates were stored for."""
        rows = self.tx.fetchall("SELECT DISTINCT integration FROM vrp_mandates ORDER BY integration")
        return [str(row["integration"]) for row in rows]

    def update(
        self,
        mandate_id: str,
        *,
        expected_version: int,
        now: datetime,
        owner: str | None = None,
        release_lease: bool = False,
        **changes: Unpack[MandateChanges],
    ) -> VrpMandate:
        """Compare-and-set on the version (see `FlowRepo.update`)."""
        return self._update(
            mandate_id,
            expected_version=expected_version,
            now=now,
            owner=owner,
            release_lease=release_lease,
            changes=dict(changes),
        )

    def transition(
        self,
        mandate: VrpMandate,
        state: str,
        *,
        now: datetime,
        owner: str | None = None,
        event: StatusEvent | None = None,
        release_lease: bool = False,
        **changes: Unpack[MandateFields],
    ) -> VrpMandate:
        """Move to `state` with `changes` and append `event` in the same transaction (see `FlowRepo.transition`)."""
        updated = self._update(
            mandate.mandate_id,
            expected_version=mandate.version,
            now=now,
            owner=owner,
            release_lease=release_lease,
            changes={**changes, "state": str(state)},
        )
        if event is not None:
            Outbox(self.tx).emit(event, mandate.mandate_id, now=now)
        return updated


@dataclass(frozen=True)
class VrpPayment:
    """A payment instruction under a mandate. `instruction` is the request as received (JSON text)."""

    payment_id: str
    mandate_id: str
    state: str
    amount: Decimal
    currency: str
    instruction: str = field(repr=False)
    request_sha256: str
    domestic_vrp_id: str | None
    idempotency_key: str | None
    next_action_at: datetime | None
    attempts: int
    version: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    bank_status: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    traceparent: str | None = None  # W3C trace context of its intake

    @property
    def key(self) -> str:
        """The payment's key."""
        return self.payment_id


class VrpPaymentFields(TypedDict, total=False):
    """Columns `VrpPaymentRepo.transition` may change besides the state."""

    next_action_at: datetime | None
    attempts: int
    bank_status: str | None
    last_error: str | None
    domestic_vrp_id: str | None
    idempotency_key: str | None


class VrpPaymentChanges(VrpPaymentFields, total=False):
    """Columns `VrpPaymentRepo.update` may change."""

    state: str


class VrpPaymentRepo(WorkRepo[VrpPayment]):
    """The `vrp_payments` table."""

    table: ClassVar[str] = "vrp_payments"
    key_column: ClassVar[str] = "payment_id"
    columns: ClassVar[Mapping[str, Kind]] = {
        "payment_id": "text",
        "mandate_id": "text",
        "amount": "money",
        "currency": "text",
        "instruction": "text",
        "request_sha256": "text",
        "domestic_vrp_id": "text",
        "idempotency_key": "text",
        **WORK_COLUMNS,
        "traceparent": "text",
    }
    updatable: ClassVar[frozenset[str]] = WORK_UPDATABLE | {"domestic_vrp_id", "idempotency_key"}
    row_type: ClassVar[type[Any]] = VrpPayment

    def create(
        self,
        payment_id: str,
        mandate_id: str,
        *,
        amount: Decimal,
        currency: str,
        instruction: str | bytes | Mapping[str, Any],
        now: datetime,
        state: str = Payment.RECEIVED,
        next_action_at: datetime | None = None,
        content_sha256: str | None = None,
    ) -> Created[VrpPayment]:
        """Insert a payment unless its id exists (a duplicate changes nothing: `created=False`). The mandate
        must exist (foreign key). `content_sha256`: the instruction's business-content hash, compared for a
        duplicate (default: the text's)."""
        text = json_text(instruction)
        digest = content_sha256 or sha256_hex(text)
        now = utc_ms(now)
        row = self.tx.fetchone(
            "INSERT INTO vrp_payments (payment_id, mandate_id, state, amount, currency, instruction, request_sha256,"  # noqa: S608
            " next_action_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            f" ON CONFLICT (payment_id) DO NOTHING RETURNING {self._cols()}",
            (payment_id, mandate_id, str(state), money(amount), currency, text, digest, next_action_at, now, now),
        )
        if row is not None:
            return Created(self._decode(row), True)
        existing = self.require(payment_id)
        return Created(existing, False, existing.request_sha256 == digest)

    def update(
        self,
        payment_id: str,
        *,
        expected_version: int,
        now: datetime,
        owner: str | None = None,
        release_lease: bool = False,
        **changes: Unpack[VrpPaymentChanges],
    ) -> VrpPayment:
        """Compare-and-set on the version (see `FlowRepo.update`)."""
        return self._update(
            payment_id,
            expected_version=expected_version,
            now=now,
            owner=owner,
            release_lease=release_lease,
            changes=dict(changes),
        )

    def transition(
        self,
        payment: VrpPayment,
        state: str,
        *,
        now: datetime,
        owner: str | None = None,
        event: StatusEvent | None = None,
        release_lease: bool = False,
        **changes: Unpack[VrpPaymentFields],
    ) -> VrpPayment:
        """Move to `state` with `changes` and append `event` in the same transaction. The event's key defaults
        to the payment id; pass `StatusEvent(key=mandate_id, ...)` to keep a mandate's events in one stream."""
        updated = self._update(
            payment.payment_id,
            expected_version=payment.version,
            now=now,
            owner=owner,
            release_lease=release_lease,
            changes={**changes, "state": str(state)},
        )
        if event is not None:
            Outbox(self.tx).emit(event, payment.payment_id, now=now)
        return updated

    def for_mandate(self, mandate_id: str, *, states: Collection[str] | None = None) -> list[VrpPayment]:
        """Payments of a mandate, oldest first, optionally only in some states."""
        sql = f"SELECT {self._cols()} FROM vrp_payments WHERE mandate_id = ?"  # noqa: S608
        params: list[object] = [mandate_id]
        if states is not None:
            if not states:
                return []
            sql += f" AND state IN {in_clause(list(states))}"
            params.extend(states)
        rows = self.tx.fetchall(sql + " ORDER BY created_at, payment_id", params)
        return [self._decode(r) for r in rows]

    def of_mandates(self, mandate_ids: Collection[str], *, states: Collection[str]) -> dict[str, list[VrpPayment]]:
        """The payments in `states` of several mandates at once (one query), oldest first per mandate."""
        found: dict[str, list[VrpPayment]] = {m: [] for m in mandate_ids}
        if not mandate_ids or not states:
            return found
        rows = self.tx.fetchall(
            f"SELECT {self._cols()} FROM vrp_payments WHERE mandate_id IN {in_clause(list(mandate_ids))}"  # noqa: S608
            f" AND state IN {in_clause(list(states))} ORDER BY created_at, payment_id",
            [*mandate_ids, *states],
        )
        for row in rows:
            payment = self._decode(row)
            found[payment.mandate_id].append(payment)
        return found

    def listing(
        self,
        *,
        mandate_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        offset: int = 0,
        limit: int = 500,
    ) -> list[VrpPayment]:
        """Payments created in `[since, until)` (of one mandate, when given), oldest first, one page."""
        where: list[str] = []
        params: list[object] = []
        for clause, value in (("mandate_id = ?", mandate_id), ("created_at >= ?", since), ("created_at < ?", until)):
            if value is not None:
                where.append(clause)
                params.append(utc_ms(value) if isinstance(value, datetime) else value)
        sql = f"SELECT {self._cols()} FROM vrp_payments"  # noqa: S608
        if where:
            sql += f" WHERE {' AND '.join(where)}"
        rows = self.tx.fetchall(sql + " ORDER BY created_at, payment_id LIMIT ? OFFSET ?", (*params, limit, offset))
        return [self._decode(r) for r in rows]

    def total(
        self,
        mandate_id: str,
        *,
        states: Collection[str],
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Decimal:
        """Exact sum of the amounts of a mandate's payments in `states` created in [since, until).

        Summed in Python from the stored decimals, so SQLite never adds amounts as floating point.
        """
        if not states:
            return Decimal("0.00")
        sql = f"SELECT amount FROM vrp_payments WHERE mandate_id = ? AND state IN {in_clause(list(states))}"  # noqa: S608
        params: list[object] = [mandate_id, *states]
        if since is not None:
            sql += " AND created_at >= ?"
            params.append(utc_ms(since))
        if until is not None:
            sql += " AND created_at < ?"
            params.append(utc_ms(until))
        total = Decimal("0.00")
        for row in self.tx.fetchall(sql, params):
            amount = read_money(row["amount"])
            assert amount is not None
            total += amount
        return total
