"""The store facade: one object the engine holds, transactions that expose every repository.

    store = Store.open("postgresql://...", cipher=load_cipher())   # connects and migrates
    with store.transaction() as tx:
        created = tx.flows.create(batch_id, "bank-a", payload, now=now, next_action_at=now)
        if not created.created:
            ...  # a duplicate batch event: nothing changed
    with store.transaction() as tx:
        due = tx.flows.claim_due(now=now, owner=instance_id, limit=50, lease_seconds=60)

Everything done through one `tx` commits or rolls back together: a state transition and its outbox event, a
side-effect outcome and the resource id it yields.

Store calls block. From asyncio code use `await store.arun(lambda tx: ...)`, which runs the transaction in a
worker thread: the store's own `threads` of them when it was opened with a number (the processor's
`[processor] store_threads`), else asyncio's default executor. Do not open a transaction while holding another
one in the same thread: on SQLite the second waits for the first's write lock and fails after the busy timeout.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import TypeVar

from processor.store.attempts import DeliveryAttempts
from processor.store.auth_attempts import AuthAttempts
from processor.store.crypto import Cipher, require_cipher
from processor.store.db import Database, Dialect, StoreBusyError, StoreError, Tx, connect
from processor.store.flows import FlowRepo
from processor.store.lifecycle import Lifecycle
from processor.store.observe import Observer
from processor.store.operator import OperatorRepo
from processor.store.outbox import Outbox
from processor.store.people import AuditTrail, ConsoleSessions, SignInFailures
from processor.store.refresh_claims import RefreshClaims
from processor.store.requests import PaidAccounts, Requests
from processor.store.schema import migrate
from processor.store.side_effects import SideEffects
from processor.store.tokens import TokenRepo
from processor.store.vrp import MandateRepo, VrpPaymentRepo

T = TypeVar("T")


class StoreTx:
    """One transaction with the repositories bound to it (created on first use)."""

    def __init__(self, tx: Tx, cipher: Cipher | None) -> None:
        self.raw = tx
        self._cipher = cipher

    @property
    def dialect(self) -> Dialect:
        """`sqlite` or `postgresql`."""
        return self.raw.dialect

    @property
    def flows(self) -> FlowRepo:
        """File-payment flows."""
        return FlowRepo(self.raw)

    @property
    def lifecycle(self) -> Lifecycle:
        """A batch id's attempts, withdrawal, duplicate-payroll hold and intake verdicts."""
        return Lifecycle(self.raw)

    @property
    def side_effects(self) -> SideEffects:
        """Records of resource-creating bank calls and their idempotency keys."""
        return SideEffects(self.raw)

    @property
    def auth(self) -> AuthAttempts:
        """Authorization attempts (`state` and encrypted PKCE verifier); needs the store key."""
        return AuthAttempts(self.raw, require_cipher(self._cipher))

    @property
    def tokens(self) -> TokenRepo:
        """Encrypted per-consent tokens; needs the store key."""
        return TokenRepo(self.raw, require_cipher(self._cipher))

    @property
    def refresh_claims(self) -> RefreshClaims:
        """Who refreshes a consent's tokens right now (one refresh at a time per consent)."""
        return RefreshClaims(self.raw)

    @property
    def mandates(self) -> MandateRepo:
        """VRP mandates."""
        return MandateRepo(self.raw)

    @property
    def vrp_payments(self) -> VrpPaymentRepo:
        """VRP payments."""
        return VrpPaymentRepo(self.raw)

    @property
    def outbox(self) -> Outbox:
        """Events waiting for the relay."""
        return Outbox(self.raw)

    @property
    def attempts(self) -> DeliveryAttempts:
        """How many times each consumed message was handed to its handler without being done."""
        return DeliveryAttempts(self.raw)

    @property
    def operator(self) -> OperatorRepo:
        """Batch listings, dead letters and their replays, retry batches (the admin API's)."""
        return OperatorRepo(self.raw)

    @property
    def audit(self) -> AuditTrail:
        """The append-only audit trail of people's actions."""
        return AuditTrail(self.raw)

    @property
    def sessions(self) -> ConsoleSessions:
        """Console sessions (server-side, ended at sign-out)."""
        return ConsoleSessions(self.raw)

    @property
    def sign_in_failures(self) -> SignInFailures:
        """Failed sign-ins per operator and per address, and their locks."""
        return SignInFailures(self.raw)

    @property
    def requests(self) -> Requests:
        """Requests that wait for a second person's decision."""
        return Requests(self.raw)

    @property
    def paid_accounts(self) -> PaidAccounts:
        """The account each employee reference was last paid to."""
        return PaidAccounts(self.raw)


class Store:
    """The durable store of the flow engine."""

    def __init__(self, db: Database, cipher: Cipher | None = None, *, threads: int | None = None) -> None:
        if threads is not None and threads < 1:
            raise ValueError("a store needs at least one thread")
        self.db = db
        self.cipher = cipher
        self.observer: Observer | None = None  # told of transactions and events (processor.store.observe)
        self.threads = threads
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(
        cls,
        url: str,
        *,
        cipher: Cipher | None = None,
        schema: str | None = None,
        migrate_schema: bool = True,
        pool_size: int = 4,
        busy_timeout_ms: int = 15_000,
        threads: int | None = None,
    ) -> Store:
        """Connect to `url` (see `processor.store.db`) and, unless told not to, apply pending migrations.

        `cipher` may be None for parts that never touch secrets (e.g. the outbox relay); the repositories of
        secrets then raise `StoreKeyError`. `threads`: how many transactions `arun` runs at once (None: asyncio's
        default executor).
        """
        db = connect(url, schema=schema, pool_size=pool_size, busy_timeout_ms=busy_timeout_ms)
        try:
            if migrate_schema:
                migrate(db)
        except BaseException:
            db.close()
            raise
        return cls(db, cipher, threads=threads)

    @property
    def dialect(self) -> Dialect:
        """`sqlite` or `postgresql`."""
        return self.db.dialect

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[StoreTx]:
        """A transaction exposing the repositories; commits at the end of the block, rolls back on error."""
        observer = self.observer
        watched = nullcontext() if observer is None else observer.transaction(write=write, dialect=self.dialect)
        with watched, self.db.transaction(write=write) as tx:
            tx.observer = observer
            yield StoreTx(tx, self.cipher)

    def run(self, work: Callable[[StoreTx], T], *, write: bool = True, retries: int = 2) -> T:
        """Run `work` in a transaction and return its result; on `StoreBusyError` (rolled back, so safe to
        repeat) run it again up to `retries` times. `work` must therefore touch nothing but the store."""
        attempt = 0
        while True:
            try:
                with self.transaction(write=write) as tx:
                    return work(tx)
            except StoreBusyError:
                attempt += 1
                if attempt > retries:
                    raise

    async def arun(self, work: Callable[[StoreTx], T], *, write: bool = True, retries: int = 2) -> T:
        """`run` in a worker thread, so an event loop never blocks on a lock wait or a disk sync.

        The result is handed over in a list, not as the thread's result: asyncio keeps a finished future (and its
        result) alive until the awaiting task next yields to the loop, so a result returned that way outlived
        whatever the caller did without awaiting (a 100,000-transfer batch's stored text, 23 MiB, lived on
        through the whole file build). Taken from the list, the caller holds the only reference."""
        out: list[T] = []

        def run() -> None:
            out.append(self.run(work, write=write, retries=retries))

        if self.threads is None:
            await asyncio.to_thread(run)
        else:
            # As `asyncio.to_thread` does: the caller's context (trace span, log fields) goes with the work.
            context = contextvars.copy_context()
            try:
                pending = asyncio.get_running_loop().run_in_executor(self._pool(), context.run, run)
            except RuntimeError:  # closed between taking the threads and handing them the work
                raise StoreError("the store is closed") from None
            await pending
        return out.pop()

    def _pool(self) -> ThreadPoolExecutor:
        """The store's worker threads, started on first use. Fewer threads than transactions in flight make the
        rest queue, but also fewer threads contend for the GIL with the event loop each time a statement's answer
        arrives: at month end the mean bank call went from 3.8-4.0x the bank's latency with asyncio's six default
        threads to 2.4x with two and 2.1x with one (docs/benchmarks.md, sixth pass)."""
        with self._executor_lock:
            if self._closed:
                raise StoreError("the store is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="store")
            return self._executor

    def close(self) -> None:
        """Wait for the transactions running in the store's threads, then close the connections."""
        with self._executor_lock:
            executor, self._executor, self._closed = self._executor, None, True
        if executor is not None:
            executor.shutdown(wait=True)
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
