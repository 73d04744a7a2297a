"""The store facade on both engines: bounded lock waits, retried transactions, use from asyncio."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
import weakref
from typing import Any

import pytest
from store_fixtures import T0, StoreTarget

from processor.store import Store, StoreBusyError, StoreError, StoreTx
from processor.store.db import LARGE_VALUE, to_datetime


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


def test_among_selects_the_listed_values_in_one_statement_text_for_any_count(
    store_target: StoreTarget, store: Store
) -> None:
    with store.transaction() as tx:
        for number in range(6):
            tx.flows.create(f"b-{number}", "bank", "{}", now=T0)

    def chosen(tx: StoreTx, wanted: list[str]) -> tuple[str, list[str]]:
        which, values = tx.raw.among("batch_id", wanted)
        rows = tx.raw.fetchall(f"SELECT batch_id FROM flows WHERE {which} ORDER BY batch_id", values)
        return which, [str(row["batch_id"]) for row in rows]

    with store.transaction(write=False) as tx:
        one, found_one = chosen(tx, ["b-2"])
        many, found_many = chosen(tx, ["b-5", "b-1", "b-3", "b-9"])
        with pytest.raises(ValueError, match="at least one"):
            tx.raw.among("batch_id", [])
    assert found_one == ["b-2"]
    assert found_many == ["b-1", "b-3", "b-5"]
    if store_target.dialect == "postgresql":
        assert one == many  # the same text whatever the count: converted and prepared once
    else:
        assert many.count("?") == 4


def test_insert_many_refuses_a_float_and_keeps_times_to_the_millisecond(store: Store) -> None:
    columns = {"event_id": "text", "topic": "text", "event_key": "text", "seq": "bigint", "payload": "text"}
    columns["created_at"] = "timestamptz"
    with store.transaction() as tx, pytest.raises(TypeError, match="float"):
        tx.raw.insert_many("outbox", columns, [("e-1", "t", "k", 1, "{}", T0), ("e-2", "t", "k", 2.5, "{}", T0)])
    late = T0.replace(microsecond=123_456)
    with store.transaction() as tx:
        tx.raw.execute("INSERT INTO outbox_keys (topic, event_key) VALUES (?, ?)", ("t", "k"))
        tx.raw.insert_many("outbox", columns, [("e-1", "t", "k", 1, "{}", late), ("e-2", "t", "k", 2, "{}", T0)])
        rows = tx.raw.fetchall("SELECT event_id, created_at FROM outbox ORDER BY id")
    assert [(r["event_id"], to_datetime(r["created_at"])) for r in rows] == [
        ("e-1", T0.replace(microsecond=123_000)),
        ("e-2", T0),
    ]


def test_insert_many_writes_every_row_in_order_with_nulls_and_a_conflict_clause(store: Store) -> None:
    columns = {
        "event_id": "text",
        "topic": "text",
        "event_key": "text",
        "seq": "bigint",
        "payload": "text",
        "headers": "text",
        "created_at": "timestamptz",
    }
    first = [(f"e-{n}", "t", "k", 70_000 + n, f'{{"n": {n}, "note": "50%"}}', None, T0) for n in range(3)]
    with store.transaction() as tx:
        tx.raw.execute("INSERT INTO outbox_keys (topic, event_key) VALUES (?, ?)", ("t", "k"))
        tx.raw.insert_many("outbox", columns, first)
        tx.raw.insert_many("outbox", columns, [])  # nothing to write
        rows = tx.raw.fetchall("SELECT event_id, seq, payload, headers, created_at FROM outbox ORDER BY id")
    assert [(r["event_id"], int(r["seq"]), r["headers"]) for r in rows] == [
        ("e-0", 70_000, None),
        ("e-1", 70_001, None),
        ("e-2", 70_002, None),
    ]
    assert rows[2]["payload"] == '{"n": 2, "note": "50%"}'
    paid = dict.fromkeys(
        ("origin_account", "employee_reference", "account_sha256", "account_last4", "batch_id"), "text"
    )
    paid["paid_at"] = "timestamptz"
    keep_newer = (
        " ON CONFLICT (origin_account, employee_reference) DO UPDATE SET batch_id = excluded.batch_id"
        " WHERE paid_accounts.paid_at <= excluded.paid_at"
    )
    with store.transaction() as tx:
        tx.raw.insert_many("paid_accounts", paid, [("O", "E-1", "a" * 64, "1111", "b-1", T0)], conflict=keep_newer)
        tx.raw.insert_many(
            "paid_accounts",
            paid,
            [("O", "E-1", "b" * 64, "2222", "b-2", T0), ("O", "E-2", "c" * 64, "3333", "b-2", T0)],
            conflict=keep_newer,
        )
        found = tx.raw.fetchall("SELECT employee_reference, batch_id FROM paid_accounts ORDER BY employee_reference")
    assert [(r["employee_reference"], r["batch_id"]) for r in found] == [("E-1", "b-2"), ("E-2", "b-2")]


async def test_a_store_with_threads_runs_that_many_transactions_at_once_with_the_callers_context(
    store_target: StoreTarget,
) -> None:

    asked: contextvars.ContextVar[str] = contextvars.ContextVar("asked", default="none")
    store = store_target.open(migrate=False, threads=1)
    running: list[int] = []
    most = 0

    def work(tx: StoreTx) -> tuple[str, str]:
        nonlocal most
        running.append(1)
        most = max(most, len(running))
        tx.raw.fetchall("SELECT 1 AS one")
        time.sleep(0.02)  # long enough for the others to start, were there a second thread
        running.pop()
        return threading.current_thread().name, asked.get()

    async def one(name: str) -> tuple[str, str]:
        asked.set(name)
        return await store.arun(work, write=False)  # reads: SQLite too would run them side by side

    try:
        results = await asyncio.gather(*(one(f"caller-{n}") for n in range(4)))
    finally:
        store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.arun(work)
    assert store._executor is None  # no threads started again after the close
    assert most == 1  # one thread: the four transactions ran one after another
    assert {thread.split("_")[0] for thread, _ in results} == {"store"}
    assert [seen for _, seen in results] == [f"caller-{n}" for n in range(4)]


def test_closing_a_store_waits_for_the_transaction_in_its_thread(store_target: StoreTarget) -> None:

    store = store_target.open(migrate=False, threads=2)
    started = threading.Event()
    finished: list[bool] = []

    def slow(tx: StoreTx) -> None:
        started.set()
        tx.raw.fetchall("SELECT 1 AS one")
        threading.Event().wait(0.2)
        finished.append(True)

    async def start() -> None:
        task = asyncio.ensure_future(store.arun(slow))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()  # the caller gives up; the transaction in the thread still runs to its end

    asyncio.run(start())
    store.close()
    assert finished == [True]
    with pytest.raises(ValueError, match="at least one thread"):
        Store(store.db, threads=0)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE flows SET attempts = attempts + 1 WHERE batch_id = 'b-1'",
        "DELETE FROM flows",
        "  insert into flows (batch_id) values ('b-2')",
        "SELECT batch_id FROM flows WHERE batch_id = 'b-1' FOR UPDATE",
        "SELECT batch_id FROM flows WHERE batch_id = 'b-1' for  no key update",
        "WITH gone AS (DELETE FROM flows RETURNING batch_id) SELECT batch_id FROM gone",
    ],
)
def test_a_read_only_transaction_refuses_writes_and_row_locks(store: Store, statement: str) -> None:
    with store.transaction() as tx:
        tx.flows.create("b-1", "bank", "{}", now=T0)
    with store.transaction(write=False) as tx, pytest.raises(StoreError, match="read-only"):
        tx.raw.execute(statement)
    with store.transaction(write=False) as tx:
        with pytest.raises(StoreError, match="read-only"):
            tx.raw.insert_many("flows", {"batch_id": "text"}, [("b-3",)])
        with pytest.raises(StoreError, match="read-only"):
            tx.raw.executemany("DELETE FROM flows WHERE batch_id = ?", [("b-1",)])
        assert [row["batch_id"] for row in tx.raw.fetchall("SELECT batch_id FROM flows")] == ["b-1"]


def test_a_read_on_postgresql_runs_each_select_on_its_own(store_target: StoreTarget, store: Store) -> None:
    """No BEGIN and COMMIT around a read's SELECTs: each is its own transaction, as the statement's and the
    transaction's start times show; a write's statements still share one."""
    if store_target.dialect != "postgresql":
        pytest.skip("SQLite keeps its deferred read transaction (one snapshot in WAL mode)")
    own = "SELECT statement_timestamp() = transaction_timestamp() AS own"
    with store.transaction(write=False) as tx:
        assert tx.raw.scalar(own) is True
        assert tx.raw.scalar(own) is True
    with store.transaction() as tx:
        assert tx.raw.scalar(own) is False  # the block began with BEGIN, before this statement


def test_a_write_on_postgresql_is_read_committed_whatever_the_session_default(store_target: StoreTarget) -> None:
    """The claims and the reads are written for READ COMMITTED: a connection whose default says otherwise (a
    server, database or role setting; here the session's own) still begins each block at that level."""
    if store_target.dialect != "postgresql":
        pytest.skip("SQLite has one isolation (serializable transactions)")
    with store_target.open(migrate=False, pool_size=1) as one:
        with one.transaction() as tx:
            tx.raw.execute("SET default_transaction_isolation = 'serializable'")  # kept by the session
        with one.transaction() as tx:
            assert tx.raw.scalar("SHOW default_transaction_isolation") == "serializable"
            assert tx.raw.scalar("SHOW transaction_isolation") == "read committed"
