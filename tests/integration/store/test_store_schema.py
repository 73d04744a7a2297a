"""Migrations on both engines: applied once, idempotent, safe when instances start together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from store_fixtures import T0, StoreTarget

from processor.domain.ledger import BUCKETS
from processor.engine.ledger import payroll_of
from processor.store import MIGRATIONS, MigrationError, migrate
from processor.store.db import connect
from processor.store.money import MoneyReads
from processor.store.schema import Migration

TABLES = {
    "flows",
    "side_effects",
    "auth_attempts",
    "consent_tokens",
    "vrp_mandates",
    "vrp_payments",
    "outbox",
    "outbox_keys",
    "batch_attempts",
    "intake_verdicts",
    "transfer_sketches",
    "batch_money",
    "schema_migrations",
}


def _tables(target: StoreTarget) -> set[str]:
    with target.connect() as db, db.transaction(write=False) as tx:
        if tx.dialect == "sqlite":
            rows = tx.fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")
        else:
            rows = tx.fetchall(
                "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
    return {str(r["name"]) for r in rows}


def _applied(target: StoreTarget) -> dict[int, str]:
    """Version -> checksum of every migration the history table records (empty without the table)."""
    if "schema_migrations" not in _tables(target):
        return {}
    with target.connect() as db, db.transaction(write=False) as tx:
        rows = tx.fetchall("SELECT version, checksum FROM schema_migrations")
    return {int(r["version"]): str(r["checksum"]) for r in rows}


def test_migrate_applies_every_version_once(store_target: StoreTarget) -> None:
    with store_target.connect() as db:
        assert _applied(store_target) == {}
        assert migrate(db) == [m.version for m in MIGRATIONS]
        assert migrate(db) == []  # idempotent
        assert migrate(db) == []
        assert _applied(store_target) == {m.version: m.checksum for m in MIGRATIONS}
    assert _tables(store_target) >= TABLES


def test_store_open_migrates_and_reopening_keeps_data(store_target: StoreTarget) -> None:
    with store_target.open() as store, store.transaction() as tx:
        tx.flows.create("b-1", "bank", {"x": 1}, now=T0)
    with store_target.open() as store, store.transaction() as tx:
        assert tx.flows.require("b-1").integration == "bank"


def _together(work: Callable[[threading.Barrier], None], count: int = 4) -> list[BaseException]:
    """Run `work` on `count` threads that wait at one barrier (`work` waits where the race should start); the
    exceptions they raised. A thread that fails breaks the barrier, so the others do not wait for it forever."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run() -> None:
        try:
            work(start)
        except BaseException as exc:  # collected and asserted by the caller
            start.abort()
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def test_instances_starting_together_migrate_exactly_once(store_target: StoreTarget) -> None:
    results: list[list[int]] = []

    def run(start: threading.Barrier) -> None:
        with store_target.connect(pool_size=1) as db:
            start.wait(60)
            results.append(migrate(db))

    assert _together(run) == []
    assert sorted(results) == [[], [], [], [m.version for m in MIGRATIONS]]


def test_instances_opening_a_new_sqlite_file_together_all_open_it(tmp_path: Path) -> None:
    # Each connection switches the file to WAL; SQLite refuses that at once ("database is locked", no busy wait)
    # while another connection opening the same new file holds it. Many rounds, because the race is narrow.
    errors: list[BaseException] = []
    for round_ in range(60):
        url = f"sqlite:///{tmp_path / f'store-{round_}.db'}"

        def run(start: threading.Barrier, url: str = url) -> None:
            start.wait(60)
            connect(url, pool_size=1).close()

        errors += _together(run)
    assert errors == []


def test_an_edited_applied_migration_is_refused(store_target: StoreTarget) -> None:
    with store_target.connect() as db:
        migrate(db)
        first = MIGRATIONS[0]
        edited = Migration(first.version, first.name, (*first.statements, "CREATE INDEX extra ON flows (state)"))
        with pytest.raises(MigrationError, match="differs"):
            migrate(db, (edited, *MIGRATIONS[1:]))


def test_a_database_newer_than_the_code_is_refused(store_target: StoreTarget) -> None:
    future = Migration(MIGRATIONS[-1].version + 1, "future column", ("ALTER TABLE flows ADD COLUMN future TEXT",))
    with store_target.connect() as db:
        migrate(db)
        assert migrate(db, (*MIGRATIONS, future)) == [future.version]
        with pytest.raises(MigrationError, match="does not know"):
            migrate(db)


def test_a_failing_migration_leaves_no_trace(store_target: StoreTarget) -> None:
    broken = Migration(MIGRATIONS[-1].version + 1, "broken", ("CREATE TABLE half (x TEXT)", "NOT SQL AT ALL"))
    with store_target.connect() as db:
        migrate(db)
        with pytest.raises(Exception, match=r"(?i)syntax"):
            migrate(db, (*MIGRATIONS, broken))
        assert max(_applied(store_target)) == MIGRATIONS[-1].version
    assert "half" not in _tables(store_target)


def test_mandates_authorised_before_migration_14_are_watched_from_it(store_target: StoreTarget) -> None:
    # Yesterday's store: an AUTHORIZED mandate that nothing was scheduled for (AUTHORIZED had no step).
    with store_target.connect() as db:
        migrate(db, tuple(m for m in MIGRATIONS if m.version < 14))
        with db.transaction() as tx:
            tx.execute(
                "INSERT INTO vrp_mandates (mandate_id, integration, state, request, request_sha256, limits,"
                " approval_token, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ("m-old", "sandbox", "AUTHORIZED", "{}", "x", "{}", "token-old", T0, T0),
            )
        assert migrate(db) == [14]
    with store_target.open() as store, store.transaction(write=False) as tx:
        mandate = tx.mandates.require("m-old")
        assert mandate.next_action_at == mandate.updated_at  # due: its consent is read at the next worker round
        assert mandate.consent_read_at is None  # never read yet: a payment reads it first


def test_migration_12_books_the_money_of_batches_stored_before_it(store_target: StoreTarget) -> None:
    # Yesterday's store: a payroll whose failed transfer a retry paid, and a USD batch waiting for its approver.
    paid = '{"transaction_results": [{"index": 0, "amount": "100.00", "status": "COMPLETED"},'
    report = paid + ' {"index": 1, "amount": "50.25", "status": "FAILED", "reason": "AC04"}]}'
    retry_report = '{"transaction_results": [{"index": 0, "amount": "50.25", "status": "COMPLETED"}]}'
    rows = (
        ("pay-1", "COMPLETED", "GTQ", 2, "150.25", report),
        ("pay-1.retry-1", "COMPLETED", "GTQ", 1, "50.25", retry_report),
        ("usd-1", "AWAITING_AUTHORIZATION", "USD", 1, "10.00", None),
    )
    with store_target.connect() as db:
        migrate(db, tuple(m for m in MIGRATIONS if m.version < 12))
        with db.transaction() as tx:
            for batch_id, state, currency, count, control_sum, stored in rows:
                text = f'{{"batch_id": "{batch_id}", "origin_account": {{"currency": "{currency}"}}}}'
                tx.execute(
                    "INSERT INTO flows (batch_id, integration, state, payload, payload_sha256, approval_token,"
                    " number_of_transactions, control_sum, report, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        batch_id,
                        "sandbox",
                        state,
                        text,
                        "x",
                        f"t-{batch_id}",
                        count,
                        Decimal(control_sum),
                        stored,
                        T0,
                        T0,
                    ),
                )
            tx.execute(
                "INSERT INTO batch_retries (retry_batch_id, original_batch_id, number, transfer_indexes, requested_by,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?)",
                ("pay-1.retry-1", "pay-1", 1, "[1]", "ana", T0),
            )
        assert 12 in migrate(db)
    with store_target.open() as store, store.transaction(write=False) as tx:
        gtq, usd = MoneyReads(tx.raw).totals_created(T0 - timedelta(days=1), T0 + timedelta(days=1))
        assert (gtq.currency, gtq.batches, usd.currency, usd.batches) == ("GTQ", 2, "USD", 1)
        figures = {name: (getattr(gtq, name).transfers, getattr(gtq, name).amount) for name in BUCKETS}
        assert figures == {
            "paid": (2, Decimal("150.25")),
            "failed": (1, Decimal("50.25")),
            "outstanding": (0, Decimal("0.00")),
            "in_progress": (0, Decimal("0.00")),
            "scheduled": (0, Decimal("0.00")),
            "not_paid": (0, Decimal("0.00")),
        }
        assert (usd.in_progress.transfers, usd.in_progress.amount) == (1, Decimal("10.00"))
        # The SQL sums equal the payroll read transfer by transfer (the batch page's reading of the same results).
        payroll = payroll_of(tx, "pay-1")
        assert payroll is not None and payroll.totals == gtq
        assert payroll.outcomes[1].final == "PAID" and payroll.outcomes[1].by == "pay-1.retry-1"
