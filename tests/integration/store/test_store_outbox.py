"""The outbox on both engines: per-key sequence, forward-only statuses, relays that keep per-key order."""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import datetime

import pytest
from store_fixtures import T0, StoreTarget, at

from processor.store import ConstraintError, NewEvent, StatusConflictError, Store

TOPIC = "dispersion.status"


def test_events_get_a_sequence_per_key(store: Store) -> None:
    with store.transaction() as tx:
        for n, key in enumerate(["b-1", "b-2", "b-1", "b-1", "b-2"]):
            tx.outbox.append("audit", key, {"n": n}, now=at(n))
        first = tx.outbox.events("audit", "b-1")
        second = tx.outbox.events("audit", "b-2")
    assert [(e.seq, e.payload["n"]) for e in first] == [(1, 0), (2, 2), (3, 3)]
    assert [(e.seq, e.payload["n"]) for e in second] == [(1, 1), (2, 4)]
    assert len({e.event_id for e in first + second}) == 5


def test_append_many_continues_the_keys_sequence_and_the_relay_drains_it(store: Store) -> None:
    with store.transaction() as tx:
        tx.outbox.append("t", "k", {"n": -1}, now=T0)
        added = [NewEvent({"n": n}, {"ce_id": f"e-{n}"}, f"e-{n}") for n in range(7)]
        assert tx.outbox.append_many("t", "k", iter(added), now=at(1), chunk=3) == 7  # three round trips
        tx.outbox.append("t", "k", {"n": 7}, now=at(2))
        assert tx.outbox.append_many("t", "k", [], now=at(2)) == 0
        events = tx.outbox.events("t", "k")
        assert tx.outbox.backlog() == (9, T0)
    assert [(e.seq, e.payload["n"]) for e in events] == [(n + 2, n) for n in range(-1, 8)]
    assert [(e.event_id, e.headers, e.status) for e in events[1:8]] == [
        (f"e-{n}", {"ce_id": f"e-{n}"}, None) for n in range(7)
    ]
    with store.transaction() as tx:
        claimed = tx.outbox.claim(owner="r1", now=at(3), limit=100, lease_seconds=30)
        assert [e.seq for e in claimed] == list(range(1, 10))
        assert tx.outbox.mark_published([e.id for e in claimed], now=at(4)) == 9
        assert tx.outbox.backlog() == (0, None)


def test_statuses_only_move_forward_and_each_is_emitted_once(store: Store) -> None:
    with store.transaction() as tx:
        tx.outbox.append_status(TOPIC, "b-1", "AUTHORIZATION_REQUIRED", {}, now=T0)
        tx.outbox.append_status(TOPIC, "b-1", "AUTHORIZED", {}, now=at(1))
    for status, message in [("AUTHORIZED", "already emitted"), ("AUTHORIZATION_REQUIRED", "not after AUTHORIZED")]:
        with pytest.raises(StatusConflictError, match=message), store.transaction() as tx:
            tx.outbox.append_status(TOPIC, "b-1", status, {}, now=at(2))
    with store.transaction() as tx:
        tx.outbox.append_status(TOPIC, "b-1", "INITIATED", {}, now=at(3))
        tx.outbox.append_status(TOPIC, "b-1", "COMPLETED", {}, now=at(4))
        tx.outbox.append("audit", "b-1", {"non-status events are not ranked": True}, now=at(4))
    for late in ("FAILED", "REJECTED", "COMPLETED"):  # nothing after a terminal status
        with pytest.raises(StatusConflictError), store.transaction() as tx:
            tx.outbox.append_status(TOPIC, "b-1", late, {}, now=at(5))
    with store.transaction(write=False) as tx:
        assert tx.outbox.statuses(TOPIC, "b-1") == ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
    with store.transaction() as tx, pytest.raises(ValueError, match="rank"):
        tx.outbox.append_status("vrp.status", "m-1", "MANDATE_ACTIVE", {}, now=T0)
    with store.transaction() as tx:  # other topics bring their own ranks
        tx.outbox.append_status("vrp.status", "m-1", "MANDATE_ACTIVE", {}, now=T0, rank=1)


def test_the_unique_status_constraint_backs_the_check_up(store: Store) -> None:
    with store.transaction() as tx:
        event = tx.outbox.append_status(TOPIC, "b-1", "AUTHORIZED", {}, now=T0)
    with pytest.raises(ConstraintError), store.transaction() as tx:  # bypassing the repository
        tx.raw.execute(
            "INSERT INTO outbox (event_id, topic, event_key, seq, status, status_rank, payload, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ("other-id", TOPIC, "b-1", event.seq + 1, "AUTHORIZED", 20, "{}", T0),
        )


def test_claim_returns_each_keys_events_in_order_and_publishing_drains(store: Store) -> None:
    with store.transaction() as tx:
        for n in range(4):
            tx.outbox.append("t", "k-a", {"n": n}, now=at(n))
            tx.outbox.append("t", "k-b", {"n": n}, now=at(n))
    with store.transaction() as tx:
        assert tx.outbox.backlog() == (8, T0)
        events = tx.outbox.claim(owner="r1", now=at(10), limit=100, lease_seconds=30)
    by_key: dict[str, list[int]] = defaultdict(list)
    for e in events:
        by_key[e.key].append(e.seq)
    assert by_key == {"k-a": [1, 2, 3, 4], "k-b": [1, 2, 3, 4]}
    with store.transaction() as tx:
        assert tx.outbox.mark_published([e.id for e in events[:5]], now=at(11)) == 5
        assert tx.outbox.mark_published([e.id for e in events[:5]], now=at(11)) == 0  # already marked
        rest = tx.outbox.claim(owner="r1", now=at(12), limit=100, lease_seconds=30)
        assert [e.id for e in rest] == [e.id for e in events[5:]]
        # the events a relay has in flight are not built again (they still count towards the limit)
        known = {events[5].id, events[7].id}
        assert [e.id for e in tx.outbox.claim(owner="r1", now=at(12), limit=2, lease_seconds=30, known=known)] == [
            events[6].id
        ]
        tx.outbox.mark_published([e.id for e in rest], now=at(13))
        assert tx.outbox.backlog() == (0, None)
        assert tx.outbox.claim(owner="r1", now=at(14), limit=100, lease_seconds=30) == []
        # drained keys were released at once: a new event can go to any relay
        tx.outbox.append("t", "k-a", {"n": 99}, now=at(15))
        assert [e.seq for e in tx.outbox.claim(owner="r2", now=at(16), limit=100, lease_seconds=30)] == [5]


def test_a_leased_key_is_not_handed_to_another_relay_until_the_lease_runs_out(store: Store) -> None:
    with store.transaction() as tx:
        tx.outbox.append("t", "k", {"n": 1}, now=T0)
        tx.outbox.append("t", "other", {"n": 1}, now=at(1))
    with store.transaction() as tx:
        first = tx.outbox.claim(owner="r1", now=at(2), limit=1, lease_seconds=30)
    assert [e.key for e in first] == ["k"]
    with store.transaction() as tx:
        tx.outbox.append("t", "k", {"n": 2}, now=at(3))
        second = tx.outbox.claim(owner="r2", now=at(4), limit=10, lease_seconds=30)
    assert [e.key for e in second] == ["other"]  # k stays with r1, new event included
    with store.transaction() as tx:
        assert [e.seq for e in tx.outbox.claim(owner="r1", now=at(5), limit=10, lease_seconds=30)] == [1, 2]
    with store.transaction() as tx:  # r1 died: after its lease, r2 takes k over from the first unpublished event
        taken = tx.outbox.claim(owner="r2", now=at(5 + 31), limit=10, lease_seconds=30)
    assert [(e.key, e.seq) for e in taken if e.key == "k"] == [("k", 1), ("k", 2)]
    with store.transaction() as tx:
        assert tx.outbox.release(owner="r2") == 2
        assert len(tx.outbox.claim(owner="r3", now=at(37), limit=10, lease_seconds=30)) == 3


def _run_threads(targets: list[threading.Thread]) -> None:
    for t in targets:
        t.start()
    for t in targets:
        t.join(120)
        assert not t.is_alive()


def test_concurrent_appends_to_one_key_get_gapless_sequence_numbers(store_target: StoreTarget, store: Store) -> None:
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            with store_target.open(migrate=False, pool_size=1) as mine:
                for n in range(25):
                    with mine.transaction() as tx:
                        tx.outbox.append("t", "hot", {"writer": w, "n": n}, now=at(n))
        except BaseException as exc:  # asserted below
            errors.append(exc)

    _run_threads([threading.Thread(target=writer, args=(w,)) for w in range(4)])
    assert errors == []
    with store.transaction(write=False) as tx:
        events = tx.outbox.events("t", "hot")
    assert [e.seq for e in events] == list(range(1, 101))
    for w in range(4):  # each writer's own events keep their order
        assert [e.payload["n"] for e in events if e.payload["writer"] == w] == list(range(25))


def test_several_relays_keep_per_key_order_while_writers_append(store_target: StoreTarget, store: Store) -> None:
    keys = [f"b-{n}" for n in range(12)]
    per_key = 15
    published: list[tuple[str, int, str]] = []
    log_lock = threading.Lock()
    writers_done = threading.Event()
    errors: list[BaseException] = []
    clock = [at(0)]

    def now() -> datetime:
        return clock[0]

    def writer(part: list[str]) -> None:
        try:
            with store_target.open(migrate=False, pool_size=1) as mine:
                for n in range(per_key):
                    for key in part:
                        with mine.transaction() as tx:
                            tx.outbox.append("t", key, {"n": n}, now=now())
        except BaseException as exc:  # asserted below
            errors.append(exc)

    def relay(name: str) -> None:
        try:
            with store_target.open(migrate=False, pool_size=1) as mine:
                idle = 0
                while idle < 5:
                    with mine.transaction() as tx:
                        batch = tx.outbox.claim(owner=name, now=now(), limit=7, lease_seconds=600)
                    if not batch:
                        idle = idle + 1 if writers_done.is_set() else 0
                        continue
                    idle = 0
                    with log_lock:  # "publishing" in the order given
                        published.extend((e.key, e.seq, name) for e in batch)
                    with mine.transaction() as tx:
                        tx.outbox.mark_published([e.id for e in batch], now=now())
        except BaseException as exc:  # asserted below
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(keys[i::3],)) for i in range(3)]
    relays = [threading.Thread(target=relay, args=(f"relay-{i}",)) for i in range(3)]
    for t in relays + writers:
        t.start()
    for t in writers:
        t.join(120)
    writers_done.set()
    for t in relays:
        t.join(120)
    assert errors == []
    seen: dict[str, list[int]] = defaultdict(list)
    for key, seq, _ in published:
        seen[key].append(seq)
    # every event exactly once, and for each key in sequence order, whichever relays carried it
    assert {k: v for k, v in seen.items()} == {k: list(range(1, per_key + 1)) for k in keys}
    with store.transaction(write=False) as tx:
        assert tx.outbox.backlog()[0] == 0


def test_a_key_handed_by_a_relay_that_died_is_a_handover_for_the_next_owner(store: Store) -> None:
    with store.transaction() as tx:
        first = tx.outbox.append("t", "k", {"n": 1}, now=T0)
        second = tx.outbox.append("t", "k", {"n": 2}, now=at(1))
        tx.outbox.append("t", "quiet", {"n": 1}, now=at(1))
    with store.transaction() as tx:  # r1 hands k's events to its producer, then dies before marking any
        assert len(tx.outbox.claim(owner="r1", now=at(2), limit=10, lease_seconds=30)) == 3
        assert tx.outbox.handovers(owner="r1", now=at(2)) == []  # its own keys are no handover for r1
    with store.transaction() as tx:
        taken = tx.outbox.claim(owner="r2", now=at(40), limit=10, lease_seconds=30)
        handed = tx.outbox.handovers(owner="r2", now=at(40))
    assert len(taken) == 3
    assert [(h.key, h.since, h.previous_owner) for h in handed] == [("k", at(2), "r1"), ("quiet", at(2), "r1")]
    with store.transaction() as tx:  # r2 found k's first event in Kafka: it is marked, the second is r2's
        adoption = tx.outbox.adopt(owner="r2", keys=[("t", "k")], published_event_ids={first.event_id}, now=at(41))
        assert (adoption.marked, adoption.keys) == (1, (("t", "k"),))
        assert [(h.key, h.previous_owner) for h in tx.outbox.handovers(owner="r2", now=at(41))] == [("quiet", "r1")]
        assert [e.id for e in tx.outbox.claim(owner="r2", now=at(42), limit=10, lease_seconds=30)] == [
            second.id,
            *[e.id for e in taken if e.key == "quiet"],
        ]
        assert [e.published_at for e in tx.outbox.events("t", "k")] == [at(41), None]


def test_a_key_fully_published_forgets_who_handed_it(store: Store) -> None:
    with store.transaction() as tx:
        tx.outbox.append("t", "k", {"n": 1}, now=T0)
    with store.transaction() as tx:
        (event,) = tx.outbox.claim(owner="r1", now=at(1), limit=10, lease_seconds=30)
        tx.outbox.mark_published([event.id], now=at(2))
        tx.outbox.append("t", "k", {"n": 2}, now=at(3))
    with store.transaction() as tx:  # a later event of the key, claimed by another relay: nothing to check
        assert len(tx.outbox.claim(owner="r2", now=at(4), limit=10, lease_seconds=30)) == 1
        assert tx.outbox.handovers(owner="r2", now=at(4)) == []


def test_a_handover_starts_at_the_oldest_unpublished_event_and_adopting_needs_the_lease(store: Store) -> None:
    with store.transaction() as tx:
        tx.outbox.append("t", "k", {"n": 1}, now=T0)
    with store.transaction() as tx:  # r1 hands k at 1, then k's first event is published ...
        (first,) = tx.outbox.claim(owner="r1", now=at(1), limit=10, lease_seconds=30)
        tx.outbox.append("t", "k", {"n": 2}, now=at(20))  # ... after a second one was written at 20
        tx.outbox.mark_published([first.id], now=at(21))
    with store.transaction() as tx:
        tx.outbox.claim(owner="r2", now=at(60), limit=10, lease_seconds=30)
        (handed,) = tx.outbox.handovers(owner="r2", now=at(60))
        assert handed.since == at(20)  # nothing unpublished can have been produced before it was written
        # r3 has no lease on k: adopting changes nothing and names no key it may produce
        adoption = tx.outbox.adopt(owner="r3", keys=[("t", "k")], published_event_ids=set(), now=at(61))
        assert adoption.keys == ()
        assert [h.key for h in tx.outbox.handovers(owner="r2", now=at(61))] == ["k"]


def test_a_suspected_key_is_a_handover_for_its_own_relay(store: Store) -> None:
    with store.transaction() as tx:
        tx.outbox.append("t", "k", {"n": 1}, now=T0)
    with store.transaction() as tx:
        tx.outbox.claim(owner="r1", now=at(1), limit=10, lease_seconds=30)
        assert tx.outbox.handovers(owner="r1", now=at(1)) == []
        assert tx.outbox.suspect(owner="r1", keys={("t", "k")}) == 1  # a delivery failed: maybe written
        (handed,) = tx.outbox.handovers(owner="r1", now=at(2))
        assert (handed.key, handed.previous_owner, handed.since) == ("k", "r1#unacknowledged", at(1))
        assert tx.outbox.adopt(owner="r1", keys=[("t", "k")], published_event_ids=set(), now=at(3)).keys == (
            ("t", "k"),
        )
        assert tx.outbox.handovers(owner="r1", now=at(3)) == []
