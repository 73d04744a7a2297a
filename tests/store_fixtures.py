"""Database fixtures for the store, on both engines (loaded from tests/conftest.py as a pytest plugin).

- `store_target`: parametrised over SQLite (a temp file) and PostgreSQL (a fresh schema, dropped afterwards),
  so a test using it runs once per engine. PostgreSQL comes from `DISPERSION_TEST_POSTGRES_DSN`; when unset its
  cases are skipped, or fail when `DISPERSION_REQUIRE_POSTGRES=1`.
- `sqlite_target` / `postgres_target`: one engine only.
- `store`: an open, migrated `Store` with a random key on `store_target`; `store_cipher`: that key.
- `store_now`: a fixed instant; tests move time by passing later instants, never by sleeping.

A `StoreTarget` is plain data (URL and schema), so it can be handed to another process, which opens its own
connections with `target.open()`. The `worker_*` functions below are module level so that
`multiprocessing` (spawn) can run them in child processes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from processor.store import Cipher, Database, Operation, Store, connect, generate_key

POSTGRES_ENV = "DISPERSION_TEST_POSTGRES_DSN"
REQUIRE_POSTGRES_ENV = "DISPERSION_REQUIRE_POSTGRES"
SCHEMA_PREFIX = "store_test_"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class StoreTarget:
    """Where a test database lives: enough to connect from any thread or process."""

    dialect: str
    url: str
    schema: str | None = None

    def connect(self, *, pool_size: int = 4, busy_timeout_ms: int = 15_000) -> Database:
        """A raw `Database` on the target."""
        return connect(self.url, schema=self.schema, pool_size=pool_size, busy_timeout_ms=busy_timeout_ms)

    def open(
        self,
        cipher: Cipher | None = None,
        *,
        migrate: bool = True,
        pool_size: int = 4,
        busy_timeout_ms: int = 15_000,
        threads: int | None = None,
    ) -> Store:
        """A `Store` on the target (migrated unless told otherwise)."""
        return Store.open(
            self.url,
            cipher=cipher,
            schema=self.schema,
            migrate_schema=migrate,
            pool_size=pool_size,
            busy_timeout_ms=busy_timeout_ms,
            threads=threads,
        )


def postgres_dsn_or_skip() -> str:
    """The PostgreSQL DSN for tests; skip without one, or fail when CI demands PostgreSQL."""
    dsn = os.environ.get(POSTGRES_ENV, "").strip()
    if dsn:
        return dsn
    if os.environ.get(REQUIRE_POSTGRES_ENV, "") == "1":
        pytest.fail(f"{REQUIRE_POSTGRES_ENV}=1 but {POSTGRES_ENV} is not set")
    pytest.skip(f"PostgreSQL not configured ({POSTGRES_ENV} unset)")


@pytest.fixture(scope="session")
def store_postgres_dsn() -> str:
    """The PostgreSQL DSN (skips or fails as `postgres_dsn_or_skip`)."""
    return postgres_dsn_or_skip()


@pytest.fixture
def postgres_target(store_postgres_dsn: str) -> Iterator[StoreTarget]:
    """A fresh PostgreSQL schema for one test, dropped with everything in it afterwards."""
    schema = SCHEMA_PREFIX + uuid.uuid4().hex[:16]
    with psycopg.connect(store_postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield StoreTarget("postgresql", store_postgres_dsn, schema)
    finally:
        with psycopg.connect(store_postgres_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def sqlite_target(tmp_path: Path) -> StoreTarget:
    """A SQLite database file in the test's temporary directory."""
    return StoreTarget("sqlite", f"sqlite:///{tmp_path / 'store.db'}")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> StoreTarget:
    """The test database, once per engine."""
    if request.param == "sqlite":
        target: StoreTarget = request.getfixturevalue("sqlite_target")
    else:
        target = request.getfixturevalue("postgres_target")
    return target


@pytest.fixture
def store_cipher() -> Cipher:
    """A cipher with a fresh random key."""
    return Cipher.from_text(generate_key())


@pytest.fixture
def store(store_target: StoreTarget, store_cipher: Cipher) -> Iterator[Store]:
    """A migrated store on the test database."""
    opened = store_target.open(store_cipher)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def sqlite_store(sqlite_target: StoreTarget, store_cipher: Cipher) -> Iterator[Store]:
    """A migrated store on SQLite only (tests whose subject is not the database)."""
    opened = sqlite_target.open(store_cipher)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def store_now() -> datetime:
    """A fixed instant for tests (2026-11-02T09:00:00.000Z)."""
    return T0


def at(seconds: float) -> datetime:
    """`T0` plus some seconds."""
    return T0 + timedelta(seconds=seconds)


# -- child-process workers (module level for multiprocessing's spawn) ---------------------------------------------


def worker_claim_all(target: StoreTarget, owner: str, now_iso: str, batch: int) -> list[str]:
    """Claim due flows in small batches until none is left; return the batch ids this owner got."""
    now = datetime.fromisoformat(now_iso)
    store = target.open(migrate=False, pool_size=1)
    got: list[str] = []
    try:
        empty_rounds = 0
        while empty_rounds < 3:
            with store.transaction() as tx:
                claimed = tx.flows.claim_due(now=now, owner=owner, limit=batch, lease_seconds=3600)
            if claimed:
                got.extend(f.batch_id for f in claimed)
                empty_rounds = 0
            else:
                empty_rounds += 1
    finally:
        store.close()
    return got


def worker_begin_then_die(target: StoreTarget, key: str, scope_id: str, now_iso: str) -> None:
    """Record a side effect as begun, commit, then die abruptly before recording its outcome."""
    store = target.open(Cipher.from_text(key), migrate=False, pool_size=1)
    with store.transaction() as tx:
        tx.side_effects.begin(scope_id, Operation.CREATE_CONSENT, now=datetime.fromisoformat(now_iso))
    os._exit(17)  # no cleanup, no rollback of anything committed: like a SIGKILL after the commit
