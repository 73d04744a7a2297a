"""The repository of the file-payment flow (flow A): the `flows` table, one row per batch.

It works inside a transaction opened by `Store.transaction()` (see `processor.store.session`) and is reached
from it as `tx.flows`; what every flow shares lives beside it: `side_effects` (records of resource-creating bank
calls), `auth_attempts` (authorization `state` and PKCE verifiers) and `tokens` (per-consent tokens).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any, ClassVar, TypedDict, Unpack

from processor.domain.file_states import TERMINAL_FLOW_STATES, FlowState
from processor.domain.time import utc_ms
from processor.store.crypto import new_secret_token
from processor.store.money import MoneyBook
from processor.store.outbox import Outbox, StatusEvent
from processor.store.values import Kind, json_text, load_json, money, sha256_hex
from processor.store.work import RETRY_OF_SQL, WORK_COLUMNS, WORK_UPDATABLE, Created, WorkRepo


@dataclass(frozen=True)
class Flow:
    """One file-payment flow, keyed by the batch id.

    The batch payload and the per-transaction report can be large (100,000 transactions), so they are not part
    of this row: read them with `FlowRepo.payload` / `FlowRepo.report` when needed.
    """

    batch_id: str
    integration: str
    state: str
    payload_sha256: str
    file_reference: str | None
    file_hash: str | None
    number_of_transactions: int | None
    control_sum: Decimal | None
    consent_id: str | None
    file_payment_id: str | None
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
    traceparent: str | None = None  # W3C trace context of the batch's intake: later steps continue its trace
    execute_on: date | None = None  # a scheduled batch: the day its payment is made on (integration's zone)
    attempt: int = 1  # 2, 3, ...: a new attempt under the same batch id (processor.store.lifecycle)
    withdrawn_by: str | None = None
    withdrawn_at: datetime | None = None
    withdraw_reason: str | None = None
    duplicate_of: str | None = None  # held as a possible duplicate payroll of that batch (duplicate_note: figures)
    duplicate_note: str | None = None
    duplicate_confirmed_by: str | None = None
    duplicate_confirmed_at: datetime | None = None
    # The batch this one retries, from its retry record (`batch_retries`), never from its id: None for any batch
    # retry-failed did not make, whatever it is called.
    retry_of: str | None = None

    @property
    def key(self) -> str:
        """The flow's key (its batch id)."""
        return self.batch_id

    @property
    def terminal(self) -> bool:
        """Whether the flow has ended."""
        return self.state in TERMINAL_FLOW_STATES

    @property
    def duplicate_held(self) -> bool:
        """Held as a possible duplicate payroll and not confirmed yet: nothing may go to the bank."""
        return self.duplicate_of is not None and self.duplicate_confirmed_by is None


# The columns a batch's money share is computed from (`processor.store.money.MoneyBook`).
_MONEY_COLUMNS = frozenset({"state", "report", "control_sum", "number_of_transactions"})


class FlowFields(TypedDict, total=False):
    """Columns `FlowRepo.transition` may change besides the state (absent: unchanged; None: set NULL)."""

    next_action_at: datetime | None
    attempts: int
    bank_status: str | None
    last_error: str | None
    file_reference: str | None
    file_hash: str | None
    number_of_transactions: int | None
    control_sum: Decimal | None
    consent_id: str | None
    file_payment_id: str | None
    authorization_deadline: datetime | None
    report: Any
    withdrawn_by: str | None
    withdrawn_at: datetime | None
    withdraw_reason: str | None
    duplicate_confirmed_by: str | None
    duplicate_confirmed_at: datetime | None


class FlowChanges(FlowFields, total=False):
    """Columns `FlowRepo.update` may change."""

    state: str


class FlowRepo(WorkRepo[Flow]):
    """The `flows` table."""

    table: ClassVar[str] = "flows"
    key_column: ClassVar[str] = "batch_id"
    columns: ClassVar[Mapping[str, Kind]] = {
        "batch_id": "text",
        "integration": "text",
        "payload_sha256": "text",
        "file_reference": "text",
        "file_hash": "text",
        "number_of_transactions": "int",
        "control_sum": "money",
        "consent_id": "text",
        "file_payment_id": "text",
        "approval_token": "text",
        "authorization_deadline": "ts",
        **WORK_COLUMNS,
        "traceparent": "text",
        "execute_on": "date",
        "attempt": "int",
        "withdrawn_by": "text",
        "withdrawn_at": "ts",
        "withdraw_reason": "text",
        "duplicate_of": "text",
        "duplicate_note": "text",
        "duplicate_confirmed_by": "text",
        "duplicate_confirmed_at": "ts",
    }
    derived: ClassVar[Mapping[str, tuple[str, Kind]]] = {"retry_of": (RETRY_OF_SQL, "text")}
    write_only: ClassVar[Mapping[str, Kind]] = {"report": "json"}
    updatable: ClassVar[frozenset[str]] = WORK_UPDATABLE | {
        "file_reference",
        "file_hash",
        "number_of_transactions",
        "control_sum",
        "consent_id",
        "file_payment_id",
        "authorization_deadline",
        "report",
        "withdrawn_by",
        "withdrawn_at",
        "withdraw_reason",
        "duplicate_confirmed_by",
        "duplicate_confirmed_at",
    }
    row_type: ClassVar[type[Any]] = Flow

    def create(
        self,
        batch_id: str,
        integration: str,
        payload: str | bytes | Mapping[str, Any],
        *,
        now: datetime,
        state: str = FlowState.RECEIVED,
        file_reference: str | None = None,
        file_hash: str | None = None,
        number_of_transactions: int | None = None,
        control_sum: Decimal | None = None,
        authorization_deadline: datetime | None = None,
        next_action_at: datetime | None = None,
        approval_token: str | None = None,
        payload_checked: bool = False,
        content_sha256: str | None = None,
        traceparent: str | None = None,
        execute_on: date | None = None,
        transfer_keys: str | None = None,
        duplicate_of: str | None = None,
        duplicate_note: str | None = None,
    ) -> Created[Flow]:
        """Insert a flow unless its batch id exists. A duplicate changes nothing and comes back with
        `created=False` (and `same_document` telling whether it was the same batch).

        `content_sha256`: the hash of the batch's business content (`processor.domain.identity`), stored as
        `payload_sha256` and compared for a duplicate, so a resubmission that differs only in `requested_at` or
        `source` is the same batch; without it the payload text's hash is used.

        `payload_checked`: the payload text is known to be JSON (the caller parsed or produced it), so it is
        not parsed once more to check (for a 100,000-transfer batch that parse alone costs about 100 MiB).

        `traceparent`: the W3C trace context of the batch's intake, kept as text for the flow's later steps.
        `execute_on`: the day a scheduled batch is to be paid on (its payment is never created earlier).
        `transfer_keys`: one short hash per transfer (processor.domain.duplicates), for the duplicate-payroll guard;
        `duplicate_of` / `duplicate_note`: the batch it is held as a possible duplicate of, and the figures."""
        text = payload if payload_checked and isinstance(payload, str) else json_text(payload)
        digest = content_sha256 or sha256_hex(text)
        now = utc_ms(now)
        in_pieces = self.tx.sent_in_pieces(text)  # inserted empty, then set (a large batch, see `Tx.set_text`)
        row = self.tx.fetchone(
            "INSERT INTO flows (batch_id, integration, state, payload, payload_sha256, file_reference, file_hash,"  # noqa: S608
            " number_of_transactions, control_sum, approval_token, authorization_deadline, next_action_at,"
            " created_at, updated_at, traceparent, execute_on, transfer_keys, duplicate_of, duplicate_note)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            f" ON CONFLICT (batch_id) DO NOTHING RETURNING {self._cols()}",
            (
                batch_id,
                integration,
                str(state),
                "" if in_pieces else text,
                digest,
                file_reference,
                file_hash,
                number_of_transactions,
                None if control_sum is None else money(control_sum),
                approval_token or new_secret_token(),
                authorization_deadline,
                next_action_at,
                now,
                now,
                traceparent,
                None if execute_on is None else execute_on.isoformat(),
                transfer_keys,
                duplicate_of,
                duplicate_note,
            ),
        )
        if row is not None:
            if in_pieces:
                self.tx.set_text("flows", "payload", "batch_id", batch_id, text)
            MoneyBook(self.tx).book(batch_id, text=text)
            return Created(self._decode(row), True)
        existing = self.require(batch_id)
        return Created(existing, False, existing.payload_sha256 == digest)

    def update(
        self,
        batch_id: str,
        *,
        expected_version: int,
        now: datetime,
        owner: str | None = None,
        release_lease: bool = False,
        **changes: Unpack[FlowChanges],
    ) -> Flow:
        """Compare-and-set: apply `changes` if the row still has `expected_version` (and, with `owner`, that
        owner still holds the lease); bump the version. Otherwise raise `VersionConflictError`."""
        updated = self._update(
            batch_id,
            expected_version=expected_version,
            now=now,
            owner=owner,
            release_lease=release_lease,
            changes=dict(changes),
        )
        self._book(batch_id, changes)
        return updated

    def transition(
        self,
        flow: Flow,
        state: str,
        *,
        now: datetime,
        owner: str | None = None,
        event: StatusEvent | None = None,
        release_lease: bool = False,
        **changes: Unpack[FlowFields],
    ) -> Flow:
        """Move `flow` (as read, at its version) to `state` with `changes`, and append `event` to the outbox
        in the same transaction. A concurrent change raises `VersionConflictError`; a repeated or backward status
        event raises `StatusConflictError`; either way the caller's transaction rolls back as a whole."""
        updated = self._update(
            flow.batch_id,
            expected_version=flow.version,
            now=now,
            owner=owner,
            release_lease=release_lease,
            changes={**changes, "state": str(state)},
        )
        self._book(flow.batch_id, {**changes, "state": str(state)})
        if event is not None:
            Outbox(self.tx).emit(event, flow.batch_id, now=now)
        return updated

    def _book(self, batch_id: str, changes: Mapping[str, object]) -> None:
        """Keep the batch's money share (`batch_money`) when a change moves it, in this transaction."""
        if not _MONEY_COLUMNS.intersection(changes):
            return
        if "report" in changes:
            MoneyBook(self.tx).book(batch_id, report=changes["report"])
        else:
            MoneyBook(self.tx).book(batch_id)

    def payload(self, batch_id: str) -> str | None:
        """The batch payload's JSON text exactly as stored, or None for an unknown batch."""
        value = self.tx.scalar("SELECT payload FROM flows WHERE batch_id = ?", (batch_id,))
        return None if value is None else str(value)

    def payload_document(self, batch_id: str) -> Any:
        """The batch payload parsed (fractions as Decimal); None for an unknown batch."""
        text = self.payload(batch_id)
        return None if text is None else load_json(text)

    def report(self, batch_id: str) -> Any:
        """The per-transaction report stored with the flow (amounts as strings), or None."""
        value = self.tx.scalar("SELECT report FROM flows WHERE batch_id = ?", (batch_id,))
        return None if value is None else load_json(str(value))
