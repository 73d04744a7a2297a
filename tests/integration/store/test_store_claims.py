"""Claiming work on both engines: one owner per flow under real concurrency, leases that expire, CAS."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from datetime import timedelta

import pytest
from store_fixtures import T0, StoreTarget, at, worker_claim_all

from processor.domain.file_states import FlowState
from processor.store import Store, VersionConflictError


def _flows(store: Store, count: int, *, due_in: float = 0) -> None:
    with store.transaction() as tx:
        for n in range(count):
            tx.flows.create(f"b-{n:04d}", "bank", "{}", now=T0, next_action_at=at(due_in + n % 7))


def test_claim_takes_only_due_flows_with_a_free_lease(store: Store) -> None:
    with store.transaction() as tx:
        tx.flows.create("due", "bank", "{}", now=T0, next_action_at=at(0))
        tx.flows.create("later", "bank", "{}", now=T0, next_action_at=at(60))
        tx.flows.create("waiting", "bank", "{}", now=T0, next_action_at=None)  # e.g. waiting for the redirect
        tx.flows.create("other-state", "bank", "{}", now=T0, next_action_at=at(0), state="AUTHORIZED")
    with store.transaction() as tx:
        claimed = tx.flows.claim_due(now=at(1), owner="a", limit=10, lease_seconds=30, states=["RECEIVED"])
        assert [f.batch_id for f in claimed] == ["due"]
        assert claimed[0].lease_owner == "a" and claimed[0].lease_expires_at == at(31)
        assert claimed[0].version == 1  # claiming is not a change of the flow
        again = tx.flows.claim_due(now=at(2), owner="b", limit=10, lease_seconds=30)
        assert [f.batch_id for f in again] == ["other-state"]
        assert tx.flows.claim_due(now=at(3), owner="c", limit=0, lease_seconds=30) == []


def test_claims_come_in_due_order_and_respect_the_limit(store: Store) -> None:
    with store.transaction() as tx:
        for n, offset in enumerate([5, 1, 3, 2, 4]):
            tx.flows.create(f"b-{n}", "bank", "{}", now=T0, next_action_at=at(offset))
    with store.transaction() as tx:
        first = tx.flows.claim_due(now=at(10), owner="a", limit=3, lease_seconds=30)
        rest = tx.flows.claim_due(now=at(10), owner="b", limit=3, lease_seconds=30)
    assert [f.next_action_at for f in first] == [at(1), at(2), at(3)]
    assert [f.next_action_at for f in rest] == [at(4), at(5)]


def test_threads_never_share_a_flow(store_target: StoreTarget, store: Store) -> None:
    total = 240
    _flows(store, total)
    got: dict[str, list[str]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def claimer(owner: str) -> None:
        try:
            start.wait()
            got[owner] = worker_claim_all(store_target, owner, at(10).isoformat(), 5)
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(f"owner-{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    everything = [b for ids in got.values() for b in ids]
    assert len(everything) == total and len(set(everything)) == total  # each flow once, none lost
    with store.transaction(write=False) as tx:
        owners = Counter(tx.flows.require(batch_id).lease_owner for batch_id in everything)
    assert owners == Counter({owner: len(ids) for owner, ids in got.items() if ids})


def test_processes_never_share_a_flow(store_target: StoreTarget, store: Store) -> None:
    total = 180
    _flows(store, total)
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        results = pool.starmap(worker_claim_all, [(store_target, f"proc-{i}", at(10).isoformat(), 4) for i in range(3)])
    everything = [b for ids in results for b in ids]
    assert len(everything) == total and len(set(everything)) == total
    with store.transaction(write=False) as tx:
        for owner, ids in zip([f"proc-{i}" for i in range(3)], results, strict=True):
            for batch_id in ids[:5]:
                assert tx.flows.require(batch_id).lease_owner == owner


def test_an_expired_lease_lets_another_owner_take_over_and_fences_the_old_one(store: Store) -> None:
    with store.transaction() as tx:
        tx.flows.create("b-1", "bank", "{}", now=T0, next_action_at=T0)
    with store.transaction() as tx:
        (mine,) = tx.flows.claim_due(now=at(1), owner="a", limit=1, lease_seconds=30)
    with store.transaction() as tx:
        assert tx.flows.claim_due(now=at(30), owner="b", limit=1, lease_seconds=30) == []  # still a's
        assert tx.flows.acquire("b-1", owner="b", now=at(30), lease_seconds=30) is None
    with store.transaction() as tx:  # a stalled; its lease ran out at 31 s
        (taken,) = tx.flows.claim_due(now=at(31), owner="b", limit=1, lease_seconds=30)
    assert taken.lease_owner == "b" and taken.version == mine.version
    with store.transaction() as tx, pytest.raises(VersionConflictError):  # a wakes up: fenced by the lease
        tx.flows.transition(mine, FlowState.CONSENT_CREATED, now=at(32), owner="a", consent_id="pay-fi-a")
    with store.transaction() as tx:
        assert not tx.flows.renew("b-1", owner="a", now=at(32), lease_seconds=30)
        assert tx.flows.renew("b-1", owner="b", now=at(32), lease_seconds=60)
        done = tx.flows.transition(
            taken, FlowState.CONSENT_CREATED, now=at(33), owner="b", consent_id="pay-fi-b", release_lease=True
        )
    assert (done.consent_id, done.lease_owner, done.lease_expires_at) == ("pay-fi-b", None, None)


def test_acquire_and_release(store: Store) -> None:
    with store.transaction() as tx:
        tx.flows.create("b-1", "bank", "{}", now=T0)
        tx.flows.create("b-2", "bank", "{}", now=T0)
        assert tx.flows.acquire("b-404", owner="a", now=T0, lease_seconds=30) is None
        held = tx.flows.acquire("b-1", owner="a", now=T0, lease_seconds=30)
        assert held is not None and held.lease_owner == "a"
        assert tx.flows.acquire("b-1", owner="a", now=at(10), lease_seconds=30) is not None  # renewing is fine
        assert tx.flows.acquire("b-1", owner="b", now=at(20), lease_seconds=30) is None
        assert not tx.flows.release("b-1", owner="b")
        assert tx.flows.release("b-1", owner="a")
        assert tx.flows.acquire("b-1", owner="b", now=at(21), lease_seconds=30) is not None
        assert tx.flows.acquire("b-2", owner="b", now=at(21), lease_seconds=30) is not None


def test_two_writers_from_the_same_version_one_wins(store_target: StoreTarget, store: Store) -> None:
    with store.transaction() as tx:
        flow = tx.flows.create("b-1", "bank", "{}", now=T0).row
    outcomes: list[str] = []
    start = threading.Barrier(4)

    def write(n: int) -> None:
        with store_target.open(migrate=False, pool_size=1) as mine:
            start.wait()
            try:
                with mine.transaction() as tx:
                    tx.flows.transition(flow, FlowState.CONSENT_CREATED, now=at(n), consent_id=f"pay-fi-{n}")
                outcomes.append("won")
            except VersionConflictError:
                outcomes.append("conflict")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["conflict", "conflict", "conflict", "won"]
    with store.transaction(write=False) as tx:
        assert tx.flows.require("b-1").version == 2


def test_postgres_claimers_skip_rows_locked_by_an_open_claim(postgres_target: StoreTarget) -> None:
    with postgres_target.open() as store:
        _flows(store, 10)
        with store.transaction() as slow:  # a claim whose transaction is still open
            held = slow.flows.claim_due(now=at(10), owner="slow", limit=4, lease_seconds=60)
            with postgres_target.open(migrate=False, busy_timeout_ms=2000) as other, other.transaction() as tx:
                rest = tx.flows.claim_due(now=at(10), owner="fast", limit=10, lease_seconds=60)
        assert len(held) == 4 and len(rest) == 6  # no wait, no overlap
        assert not {f.batch_id for f in held} & {f.batch_id for f in rest}


def test_sqlite_claimers_wait_for_the_open_claim_and_see_its_leases(sqlite_target: StoreTarget) -> None:
    with sqlite_target.open() as store:
        _flows(store, 10)
        result: list[int] = []
        with store.transaction() as slow:
            held = slow.flows.claim_due(now=at(10), owner="slow", limit=4, lease_seconds=60)

            def other_claim() -> None:
                with sqlite_target.open(migrate=False) as other, other.transaction() as tx:
                    result.append(len(tx.flows.claim_due(now=at(10), owner="fast", limit=10, lease_seconds=60)))

            thread = threading.Thread(target=other_claim)
            thread.start()
            thread.join(0.3)
            assert thread.is_alive()  # blocked on the write lock, not reading stale leases
        thread.join(30)
        assert len(held) == 4 and result == [6]


def test_due_time_in_store_precision(store: Store) -> None:
    with store.transaction() as tx:
        tx.flows.create("b-1", "bank", "{}", now=T0, next_action_at=T0 + timedelta(microseconds=999))
        # truncated to the millisecond, so due exactly at T0
        assert [f.batch_id for f in tx.flows.claim_due(now=T0, owner="a", limit=1, lease_seconds=1)] == ["b-1"]
