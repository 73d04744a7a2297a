"""The store facade on both engines: bounded lock waits, retried transactions, use from asyncio."""

from __future__ import annotations

import weakref
from typing import Any

import pytest
from store_fixtures import T0, StoreTarget

from processor.store import Store, StoreBusyError, StoreTx
from processor.store.db import LARGE_VALUE


def test_a_lock_held_too_long_is_a_busy_error_not_a_hang(store_target: StoreTarget, store: Store) -> None:
    with store.transaction() as tx:
        tx.flows.create("b-1", "bank", "{}", now=T0)

    def bump(tx: StoreTx) -> int:
        tx.flows.require("b-1", for_update=True)
        return tx.raw.execute("UPDATE flows SET attempts = attempts + 1 WHERE batch_id = ?", ("b-1",))

    with store_target.open(migrate=False, busy_timeout_ms=200) as impatient, store.transaction() as holder:
        bump(holder)  # holds the row (PostgreSQL) or the write lock (SQLite) until the block ends
        with pytest.raises(StoreBusyError):
            impatient.run(bump, retries=1)
    with store.transaction(write=False) as tx:
        assert tx.flows.require("b-1").attempts == 1  # only the holder's change committed


def test_run_repeats_work_that_hit_contention(store: Store) -> None:
    calls: list[int] = []

    def work(tx: StoreTx) -> str:
        calls.append(1)
        tx.flows.create(f"b-{len(calls)}", "bank", "{}", now=T0)
        if len(calls) == 1:
            raise StoreBusyError("simulated deadlock")  # rolls the first attempt back
        return "ok"

    assert store.run(work) == "ok"
    assert len(calls) == 2
    with store.transaction(write=False) as tx:
        assert tx.flows.get("b-1") is None and tx.flows.get("b-2") is not None


async def test_arun_runs_a_transaction_off_the_event_loop(store: Store) -> None:
    created = await store.arun(lambda tx: tx.flows.create("b-1", "bank", "{}", now=T0).created)
    assert created
    again = await store.arun(lambda tx: tx.flows.create("b-1", "bank", "{}", now=T0).created)
    assert not again


async def test_arun_leaves_the_caller_the_only_reference_to_its_result(store: Store) -> None:
    """A step reads a large value and goes on computing without awaiting (the stored text of a 100,000-transfer
    batch, then its file): the value must go when the step drops it, not when the task next yields."""

    class Value:
        pass

    result = await store.arun(lambda tx: Value(), write=False)
    gone = weakref.ref(result)
    del result
    assert gone() is None


def test_a_connection_that_carried_megabytes_is_not_kept_in_the_pool(postgres_target: StoreTarget) -> None:
    """libpq keeps its buffers at the largest size they reached: after a transaction that sent or read a value of
    several MiB (a 100,000-transfer batch), the pool closes that connection and opens a fresh one."""
    with postgres_target.connect(pool_size=1) as db:

        def backend(tx: Any) -> int:
            return int(tx.scalar("SELECT pg_backend_pid()"))

        with db.transaction() as tx:
            first = backend(tx)
        with db.transaction() as tx:
            assert backend(tx) == first  # reused
            tx.scalar("SELECT length(?)", ("x" * 1000,))
        with db.transaction() as tx:
            assert backend(tx) == first  # a small value changes nothing
            assert tx.scalar("SELECT length(?)", ("x" * (LARGE_VALUE + 1),)) == LARGE_VALUE + 1
        with db.transaction() as tx:
            second = backend(tx)
            assert second != first  # the big one went through the first connection: closed
            tx.scalar("SELECT repeat('y', ?)", (LARGE_VALUE + 1,))  # a big result counts too
        with db.transaction() as tx:
            assert backend(tx) not in (first, second)


@pytest.mark.parametrize("client_encoding", ["UTF8", "LATIN1"])
def test_a_large_text_set_in_pieces_reads_back_in_any_client_encoding(
    postgres_target: StoreTarget, client_encoding: str
) -> None:
    """`Tx.set_text` sends a text over LARGE_VALUE through COPY, which reads it in the client's encoding; what was
    set reads back whole and exact, and a failure after it takes the text back with the row."""
    text = 'línea \\n\t"é" ' * (LARGE_VALUE // 10)
    with postgres_target.connect(pool_size=1) as db:
        with db.transaction() as tx:
            tx.execute(f"SET client_encoding TO '{client_encoding}'")
            tx.execute("CREATE TABLE texts (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
            tx.execute("INSERT INTO texts VALUES ('a', ''), ('b', '')")
            assert tx.sent_in_pieces(text)
            assert tx.set_text("texts", "v", "k", "a", text) == 1
            assert tx.set_text("texts", "v", "k", "b", text[::-1]) == 1  # twice in one transaction
            assert tx.scalar("SELECT v FROM texts WHERE k = 'a'") == text
            assert tx.scalar("SELECT v FROM texts WHERE k = 'b'") == text[::-1]

        def fails_after_setting() -> None:
            with db.transaction() as tx:
                tx.set_text("texts", "v", "k", "a", "x" * (LARGE_VALUE + 1))
                raise RuntimeError("after the text was set")

        with pytest.raises(RuntimeError):
            fails_after_setting()
        with db.transaction() as tx:
            assert tx.scalar("SELECT v FROM texts WHERE k = 'a'") == text
