"""Leased work items: the shared machinery of flows, VRP mandates and VRP payments.

A work item is a row with a `state`, a `version` and these scheduling columns:

- `next_action_at`: when an engine should look at it again (NULL: nothing to do until an outside event, such
  as the authorization redirect, or never again for a terminal state);
- `lease_owner` / `lease_expires_at`: which instance works on it now. A lease is free when
  `lease_expires_at` is NULL or in the past, so a crashed instance's work is taken over after the lease runs out;
- `version`: bumped by every `update`, which is a compare-and-set on it (optimistic concurrency).

`claim_due` hands each due item to exactly one owner: on PostgreSQL a `SELECT ... FOR UPDATE SKIP LOCKED`
picks rows no other claimer holds; on SQLite the claim is one `UPDATE ... RETURNING` inside the write lock of
`BEGIN IMMEDIATE`. Claiming does not bump `version`; `update(owner=...)` additionally requires that the
caller still holds the lease, so a worker whose lease was taken over cannot write a stale result.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, TypeVar

from processor.domain.time import utc_ms
from processor.store.db import StoreError, Tx, in_clause
from processor.store.values import Kind, decode, encode

T = TypeVar("T")

WORK_COLUMNS: dict[str, Kind] = {
    "state": "text",
    "next_action_at": "ts",
    "attempts": "int",
    "version": "int",
    "lease_owner": "text",
    "lease_expires_at": "ts",
    "bank_status": "text",
    "last_error": "text",
    "created_at": "ts",
    "updated_at": "ts",
}
# Columns `update` may change on every work table (besides each table's own).
WORK_UPDATABLE = frozenset({"state", "next_action_at", "attempts", "bank_status", "last_error"})
# A flow's `retry_of` (a `WorkRepo.derived` value, and a column of the listings): the original batch its retry
# record names (`batch_retries`), never read from its id. `{row}`: the flows table's name or alias.
RETRY_OF_SQL = "SELECT r.original_batch_id FROM batch_retries r WHERE r.retry_batch_id = {row}.batch_id"


class NotFoundError(StoreError):
    """The row asked for does not exist."""


class VersionConflictError(StoreError):
    """A compare-and-set found the row changed by someone else (or the lease taken over); re-read and decide."""

    def __init__(self, table: str, key: str, expected_version: int, owner: str | None) -> None:
        who = f" held by {owner}" if owner else ""
        super().__init__(f"{table} {key!r}: version {expected_version}{who} is no longer current")
        self.table = table
        self.key = key
        self.expected_version = expected_version


@dataclass(frozen=True)
class Created(Generic[T]):
    """The outcome of an insert that recognises duplicates: the stored row and whether this call created it.

    `same_document` tells, for a duplicate, whether it carried the same document as the stored one.
    """

    row: T
    created: bool
    same_document: bool = True


class WorkRepo(Generic[T]):
    """Lease, claim and compare-and-set operations over one work table. Subclasses set the class variables."""

    table: ClassVar[str]
    key_column: ClassVar[str]
    columns: ClassVar[Mapping[str, Kind]]  # read into the row type
    # Values read with every row from other tables: name -> (SQL expression, `{row}` standing for the row's table
    # or alias, kind); read into the row type like the columns, never written through this repo.
    derived: ClassVar[Mapping[str, tuple[str, Kind]]] = {}
    write_only: ClassVar[Mapping[str, Kind]] = {}  # large columns `update` may set, read by their own method
    updatable: ClassVar[frozenset[str]]
    row_type: ClassVar[type[Any]]

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    # -- reading --------------------------------------------------------------------------------------------

    def _cols(self, prefix: str = "") -> str:
        row = prefix.rstrip(".") or self.table
        extra = [f"({sql.format(row=row)}) AS {name}" for name, (sql, _) in self.derived.items()]
        return ", ".join([*(prefix + name for name in self.columns), *extra])

    def _decode(self, row: Mapping[str, Any]) -> T:
        values = {name: decode(kind, row[name]) for name, kind in self.columns.items()}
        values.update((name, decode(kind, row[name])) for name, (_, kind) in self.derived.items())
        item: T = self.row_type(**values)
        return item

    def get(self, key: str, *, for_update: bool = False) -> T | None:
        """The item, or None. `for_update` locks the row until the transaction ends (PostgreSQL; SQLite's
        `BEGIN IMMEDIATE` already holds the database write lock)."""
        lock = " FOR UPDATE" if for_update and self.tx.dialect == "postgresql" else ""
        row = self.tx.fetchone(
            f"SELECT {self._cols()} FROM {self.table} WHERE {self.key_column} = ?{lock}",  # noqa: S608
            (key,),
        )
        return None if row is None else self._decode(row)

    def require(self, key: str, *, for_update: bool = False) -> T:
        """The item; `NotFoundError` when absent."""
        item = self.get(key, for_update=for_update)
        if item is None:
            raise NotFoundError(f"{self.table} {key!r} does not exist")
        return item

    def count_by_state(self) -> dict[str, int]:
        """How many items are in each state (for metrics)."""
        rows = self.tx.fetchall(f"SELECT state, COUNT(*) AS n FROM {self.table} GROUP BY state")  # noqa: S608
        return {str(r["state"]): int(r["n"]) for r in rows}

    # -- leases ---------------------------------------------------------------------------------------------

    def claim_due(
        self,
        *,
        now: datetime,
        owner: str,
        limit: int,
        lease_seconds: float,
        states: Collection[str] | None = None,
    ) -> list[T]:
        """Take the lease of up to `limit` items whose `next_action_at <= now` and whose lease is free or expired.

        Returns them ordered by `next_action_at`. No item is handed to two owners while its lease lasts.
        """
        if limit <= 0:
            return []
        now = utc_ms(now)
        expires = now + timedelta(seconds=lease_seconds)
        where = "next_action_at <= ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)"
        params: list[object] = [now, now]
        if states is not None:
            if not states:
                return []
            where += f" AND state IN {in_clause(list(states))}"
            params.extend(states)
        k = self.key_column
        if self.tx.dialect == "postgresql":
            sql = (
                f"UPDATE {self.table} AS w SET lease_owner = ?, lease_expires_at = ?"  # noqa: S608
                f" FROM (SELECT {k} FROM {self.table} WHERE {where} ORDER BY next_action_at LIMIT ?"
                f" FOR UPDATE SKIP LOCKED) AS due WHERE w.{k} = due.{k} RETURNING {self._cols('w.')}"
            )
        else:
            sql = (
                f"UPDATE {self.table} SET lease_owner = ?, lease_expires_at = ?"  # noqa: S608
                f" WHERE {k} IN (SELECT {k} FROM {self.table} WHERE {where} ORDER BY next_action_at LIMIT ?)"
                f" RETURNING {self._cols()}"
            )
        rows = self.tx.fetchall(sql, (owner, expires, *params, limit))
        items = [self._decode(r) for r in rows]
        items.sort(key=lambda it: (getattr(it, "next_action_at"), getattr(it, k)))  # noqa: B009
        return items

    def acquire(self, key: str, *, owner: str, now: datetime, lease_seconds: float) -> T | None:
        """Take (or renew) the lease of one item, e.g. when a redirect for it arrives; None when another owner
        holds an unexpired lease or the item does not exist."""
        now = utc_ms(now)
        row = self.tx.fetchone(
            f"UPDATE {self.table} SET lease_owner = ?, lease_expires_at = ?"  # noqa: S608
            f" WHERE {self.key_column} = ? AND (lease_expires_at IS NULL OR lease_expires_at <= ? OR lease_owner = ?)"
            f" RETURNING {self._cols()}",
            (owner, now + timedelta(seconds=lease_seconds), key, now, owner),
        )
        return None if row is None else self._decode(row)

    def renew(self, key: str, *, owner: str, now: datetime, lease_seconds: float) -> bool:
        """Extend a lease this owner still holds (a heartbeat during a long step); False when it was lost."""
        changed = self.tx.execute(
            f"UPDATE {self.table} SET lease_expires_at = ? WHERE {self.key_column} = ? AND lease_owner = ?",  # noqa: S608
            (utc_ms(now) + timedelta(seconds=lease_seconds), key, owner),
        )
        return changed == 1

    def release(self, key: str, *, owner: str) -> bool:
        """Give a lease back (only if this owner still holds it); False when it did not."""
        changed = self.tx.execute(
            f"UPDATE {self.table} SET lease_owner = NULL, lease_expires_at = NULL"  # noqa: S608
            f" WHERE {self.key_column} = ? AND lease_owner = ?",
            (key, owner),
        )
        return changed == 1

    # -- compare and set ------------------------------------------------------------------------------------

    def _update(
        self,
        key: str,
        *,
        expected_version: int,
        now: datetime,
        owner: str | None,
        release_lease: bool,
        changes: Mapping[str, object],
    ) -> T:
        unknown = set(changes) - self.updatable
        if unknown:
            raise ValueError(f"{self.table}: columns {sorted(unknown)} cannot be updated")
        sets = ["version = version + 1", "updated_at = ?"]
        params: list[object] = [utc_ms(now)]
        # A large write-only value (a 100,000-line report) is set after the compare-and-set, in pieces (`Tx.set_text`);
        # the row returned does not hold it.
        large: dict[str, str] = {}
        for name, value in changes.items():
            kind = self.columns[name] if name in self.columns else self.write_only[name]
            encoded = encode(kind, value)
            if name in self.write_only and isinstance(encoded, str) and self.tx.sent_in_pieces(encoded):
                large[name] = encoded
                continue
            sets.append(f"{name} = ?")
            params.append(encoded)
        if release_lease:
            sets.append("lease_owner = NULL")
            sets.append("lease_expires_at = NULL")
        where = f"{self.key_column} = ? AND version = ?"
        params += [key, expected_version]
        if owner is not None:
            where += " AND lease_owner = ?"
            params.append(owner)
        row = self.tx.fetchone(
            f"UPDATE {self.table} SET {', '.join(sets)} WHERE {where} RETURNING {self._cols()}",  # noqa: S608
            params,
        )
        if row is None:
            raise VersionConflictError(self.table, key, expected_version, owner)
        for name, text in large.items():
            self.tx.set_text(self.table, name, self.key_column, key, text)
        return self._decode(row)
