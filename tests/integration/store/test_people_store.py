"""The people's tables of migration 11 on both engines: the audit trail refuses UPDATE and DELETE whoever runs
them; a request is decided once; failed sign-ins count up and clear; a paid account is replaced only by a later
payment."""

from __future__ import annotations

from datetime import timedelta

import pytest
from engine_support import batch
from store_fixtures import T0

from processor.domain.batch import batch_from_dict
from processor.engine.accounts import remember_paid
from processor.store import Store, StoreError


def test_the_audit_trail_is_append_only(store: Store) -> None:
    store.run(lambda tx: tx.audit.record("sign_in", actor="ana", role="operator", now=T0, address="10.0.0.1"))
    for statement in ("UPDATE audit_trail SET actor = 'mallory'", "DELETE FROM audit_trail"):
        with pytest.raises(StoreError, match="append-only"):
            store.run(lambda tx, sql=statement: tx.raw.execute(sql))
    (entry,) = store.run(lambda tx: tx.audit.since(T0), write=False)
    assert (entry.actor, entry.role, entry.action, entry.address) == ("ana", "operator", "sign_in", "10.0.0.1")


def test_requests_are_decided_once_and_paid_accounts_move_forward(store: Store) -> None:
    made = store.run(lambda tx: tx.requests.create("retry", "B-1", by="ana", now=T0, detail={"accounts": {}}))
    assert store.run(lambda tx: tx.requests.decide(made.id, "APPROVED", by="bob", now=T0, outcome="B-1.retry-1"))
    assert not store.run(lambda tx: tx.requests.decide(made.id, "DECLINED", by="eve", now=T0, outcome=None))
    decided = store.run(lambda tx: tx.requests.get(made.id), write=False)
    assert decided is not None and (decided.state, decided.decided_by) == ("APPROVED", "bob")

    def paid(digest: str, last4: str, when: timedelta) -> None:
        store.run(lambda tx: tx.paid_accounts.paid_many("O-1", [("E-1", digest, last4)], batch_id="B", now=T0 + when))

    paid("new", "2222", timedelta(days=30))
    paid("old", "1111", timedelta(days=0))  # an older payment recorded late does not replace the newer one
    last = store.run(lambda tx: tx.paid_accounts.last("O-1", ["E-1", "E-2"]), write=False)
    assert list(last) == ["E-1"] and last["E-1"].account_last4 == "2222"


def test_paid_accounts_of_a_large_batch_are_all_written_and_a_repeated_reference_keeps_its_last(
    store: Store,
) -> None:
    rows = [(f"E-{i}", f"sha-{i}", f"{i % 10000:04d}") for i in range(1203)]
    rows.append(("E-7", "sha-again", "9999"))  # the same employee twice in one batch: the later transfer wins
    store.run(lambda tx: tx.paid_accounts.paid_many("O-2", rows, batch_id="B-2", now=T0))
    last = store.run(lambda tx: tx.paid_accounts.last("O-2", [r[0] for r in rows]), write=False)
    assert len(last) == 1203
    assert (last["E-7"].account_sha256, last["E-7"].account_last4) == ("sha-again", "9999")
    assert (last["E-1202"].account_sha256, last["E-1202"].batch_id) == ("sha-1202", "B-2")


def test_failed_sign_ins_count_and_clear(store: Store) -> None:
    for _ in range(3):
        store.run(lambda tx: tx.sign_in_failures.failed("operator:ana", now=T0, locked_until=None))
    assert store.run(lambda tx: tx.sign_in_failures.get("operator:ana"), write=False).failures == 3
    store.run(lambda tx: tx.sign_in_failures.clear("operator:ana"))
    assert store.run(lambda tx: tx.sign_in_failures.get("operator:ana"), write=False).failures == 0


def test_a_completed_batch_records_where_each_paid_employee_was_paid_a_chunk_at_a_time(store: Store) -> None:
    """`remember_paid` writes 5,000 rows per statement: every paid transfer of a batch over that is recorded,
    failed ones are not, and an employee paid twice in the batch keeps the later transfer (across chunks)."""
    count = 5003
    document = batch("B-BIG", [(f"{3000000 + i}", "1.00") for i in range(count)])
    document["transactions"][5002]["employee_reference"] = document["transactions"][1]["employee_reference"]
    paid_batch = batch_from_dict(document)
    results = [{"index": i, "status": "FAILED" if i == 4 else "COMPLETED"} for i in range(count)]
    written = store.run(lambda tx: remember_paid(tx, paid_batch, results, batch_id="B-BIG", now=T0))
    assert written == count - 1
    references = [t.employee_reference or "" for t in paid_batch.transactions]
    last = store.run(lambda tx: tx.paid_accounts.last(paid_batch.origin.number, references), write=False)
    assert len(last) == count - 2  # one failed, one employee twice
    assert references[4] not in last
    assert last[references[1]].account_last4 == "5002" and last[references[5001]].account_last4 == "5001"
