"""A worker's claim round leases every kind of due work in one transaction of the store the kinds share, each kind
taking what the kinds before it left of the free slots; after a failed claim the next round tries again.
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from engine_support import worker_round

from processor.domain.kinds import Kind
from processor.engine.worker import Worker
from processor.store import Store, StoreError, StoreTx


@dataclass
class Item:
    key: str


@dataclass
class Source:
    """A kind of work with `due` items; records the transaction and limit of each claim."""

    kind: Kind
    store: Store
    due: list[str]
    fail: bool = False
    claims: list[tuple[Any, int]] = field(default_factory=list)  # (the transaction, limit)
    ran: list[str] = field(default_factory=list)

    def claim_in(self, tx: StoreTx, *, owner: str, limit: int) -> list[Item]:
        tx.raw.fetchone("SELECT 1 AS one")  # the transaction is real and open
        self.claims.append((tx.raw, limit))
        if self.fail:
            raise StoreError("the claim failed")
        taken, self.due = self.due[:limit], self.due[limit:]
        return [Item(key) for key in taken]

    async def acquire(self, key: str, *, owner: str) -> Any | None:
        return None

    async def renew(self, key: str, *, owner: str) -> bool:
        return True

    async def release(self, key: str, *, owner: str) -> None:
        return None

    async def run(self, item: Item, *, owner: str) -> None:
        await asyncio.sleep(0)
        self.ran.append(item.key)


async def test_one_transaction_leases_every_kind_within_the_free_slots(store: Store) -> None:
    files = Source(Kind.FILE, store, ["b-1", "b-2"])
    mandates = Source(Kind.MANDATE, store, ["m-1", "m-2", "m-3"])
    payments = Source(Kind.VRP_PAYMENT, store, ["p-1"])
    worker = Worker([files, mandates, payments], concurrency=3)
    assert await worker_round(worker) == 3
    assert files.ran == ["b-1", "b-2"] and mandates.ran == ["m-1"] and payments.ran == []
    assert [limit for _, limit in files.claims + mandates.claims] == [3, 1]
    assert payments.claims == []  # no slot left: not asked
    assert files.claims[0][0] is mandates.claims[0][0]  # the same transaction
    assert await worker_round(worker) == 3  # the next round: what is still due
    assert mandates.ran == ["m-1", "m-2", "m-3"] and payments.ran == ["p-1"]


async def test_after_a_failed_claim_the_next_round_claims_again(store: Store) -> None:
    files = Source(Kind.FILE, store, ["b-1"], fail=True)
    worker = Worker([files], concurrency=2)
    assert await worker_round(worker) == 0
    files.fail = False
    assert await worker_round(worker) == 1 and files.ran == ["b-1"]
