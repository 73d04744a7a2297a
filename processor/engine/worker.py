"""The worker: an asyncio loop that claims due work with a lease and runs it concurrently, bounded.

    worker = Worker([FileFlow(ctx)], concurrency=32)
    task = asyncio.create_task(worker.run())
    ...
    await worker.stop()          # no new claims; in-flight steps finish (or are cancelled after a grace period)

Many workers (in one process or many, on one PostgreSQL) share the work safely: a claim leases each due item to
exactly one owner (`FOR UPDATE SKIP LOCKED` on PostgreSQL), every write is a compare-and-set that also checks
the lease, and a worker that dies simply lets its leases run out. While a step runs its lease is renewed, so a
slow bank does not let a second worker take the item over.

Polling backs off per item through `next_action_at` (set by the flow: doubling waits for a pending payment, for
a failed bank call); the loop itself waits `idle_interval` when nothing is due, or less when `wake()` is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import uuid
from collections.abc import Collection, Sequence
from typing import Any, Protocol

import structlog

from processor.domain.kinds import Kind
from processor.store import Store, StoreTx

log = structlog.get_logger("processor.engine.worker")


class WorkSource(Protocol):
    """A kind of leased work (file flows, VRP mandates, ...). Items have a `key` attribute."""

    @property
    def kind(self) -> Kind:
        """The kind of its items (their keys are named `kind.log_field` in log lines: batch_id, mandate_id...)."""
        ...

    @property
    def store(self) -> Store:
        """The store its items live in."""
        ...

    def claim_in(self, tx: StoreTx, *, owner: str, limit: int) -> Sequence[Any]:
        """Lease up to `limit` due items, in the caller's transaction."""
        ...

    async def acquire(self, key: str, *, owner: str) -> Any | None:
        """Lease one item if it is due and free, else None."""
        ...

    async def renew(self, key: str, *, owner: str) -> bool:
        """Extend a held lease; False when it was lost."""
        ...

    async def release(self, key: str, *, owner: str) -> None:
        """Give a lease back."""
        ...

    async def run(self, item: Any, *, owner: str) -> Any:
        """Advance a leased item as far as it can go now (must not raise for the item's own failures)."""
        ...


def new_owner_id() -> str:
    """A lease owner id naming this host and process, unique per worker."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Worker:
    """Runs due work from `sources` with at most `concurrency` items at once.

    With `keys`, only those items are looked at (single-flow mode, used by `dispersion pay-file`).
    """

    def __init__(
        self,
        sources: Sequence[WorkSource],
        *,
        owner: str | None = None,
        concurrency: int = 32,
        idle_interval: float = 0.5,
        lease_seconds: float = 120.0,
        keys: Collection[str] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.sources = list(sources)
        self.owner = owner or new_owner_id()
        self.concurrency = concurrency
        self.idle_interval = idle_interval
        self.heartbeat = max(0.05, lease_seconds / 3)
        self.keys = None if keys is None else list(keys)
        self._running: dict[asyncio.Task[None], tuple[WorkSource, str]] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self.steps = 0  # items run so far
        self.errors = 0  # runs that raised (a bug: flows catch their own failures)

    # -- control ------------------------------------------------------------------------------------------------

    def wake(self) -> None:
        """Look for due work now instead of after the idle interval (e.g. a redirect authorised a flow)."""
        self._wake.set()

    @property
    def in_flight(self) -> int:
        """Items being run now."""
        return len(self._running)

    async def run(self) -> None:
        """Claim and run due work until `stop()`."""
        log.info("worker started", owner=self.owner, concurrency=self.concurrency)
        try:
            while not self._stopping:
                self._wake.clear()
                started = await self._claim_round()
                if self._stopping:
                    break
                if started and self.in_flight < self.concurrency:
                    continue  # there may be more due right now
                await self._idle()
        finally:
            log.info("worker stopping", owner=self.owner, in_flight=self.in_flight)

    async def stop(self, grace: float = 30.0) -> None:
        """Stop claiming; let in-flight items finish for up to `grace` seconds, then cancel them; give every
        lease still held back. Safe: a cancelled step leaves its side-effect record for the next owner."""
        self._stopping = True
        self._wake.set()
        await self.drain(grace)

    async def drain(self, grace: float = 30.0) -> None:
        """Wait for in-flight items (cancelling them after `grace` seconds) and release their leases."""
        tasks = list(self._running)
        if not tasks:
            return
        held = dict(self._running)
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for task in pending:
            source, key = held[task]
            with contextlib.suppress(Exception):
                await source.release(key, owner=self.owner)

    # -- internals ----------------------------------------------------------------------------------------------

    async def _claim_round(self) -> int:
        if self.keys is not None:
            return await self._acquire_round(self.keys)
        claimed = await self._claim_due()
        for source, item in claimed:
            self._start(source, item)
        return len(claimed)

    async def _claim_due(self) -> list[tuple[WorkSource, Any]]:
        """Lease due items of every source, each taking what the ones before left of the free slots, in one
        transaction per store (the sources share one: one hand-off to a worker thread and one commit per round,
        not one per kind of work)."""
        free = self.concurrency - self.in_flight
        if free <= 0 or self._stopping:
            return []
        by_store: dict[int, tuple[Store, list[WorkSource]]] = {}
        for source in self.sources:
            by_store.setdefault(id(source.store), (source.store, []))[1].append(source)
        claimed: list[tuple[WorkSource, Any]] = []
        for store, sources in by_store.values():
            left = free - len(claimed)
            try:
                claimed += await store.arun(functools.partial(self._claim_in, sources=sources, limit=left))
            except Exception:
                log.exception("claiming failed", kinds=[str(source.kind) for source in sources])
        return claimed

    def _claim_in(self, tx: StoreTx, sources: list[WorkSource], limit: int) -> list[tuple[WorkSource, Any]]:
        found: list[tuple[WorkSource, Any]] = []
        for source in sources:
            if len(found) >= limit:
                break
            found += [(source, item) for item in source.claim_in(tx, owner=self.owner, limit=limit - len(found))]
        return found

    async def _acquire_round(self, keys: list[str]) -> int:
        """Single-flow mode: lease the given items that are due."""
        started = 0
        for source in self.sources:
            free = self.concurrency - self.in_flight
            if free <= 0 or self._stopping:
                break
            try:
                items = await self._acquire(source, keys, free)
            except Exception:
                log.exception("claiming failed", kind=source.kind)
                continue
            for item in items:
                self._start(source, item)
                started += 1
        return started

    async def _acquire(self, source: WorkSource, keys: list[str], limit: int) -> list[Any]:
        busy = {key for _, key in self._running.values()}
        found: list[Any] = []
        for key in keys:
            if len(found) >= limit:
                break
            if key in busy:
                continue
            item = await source.acquire(key, owner=self.owner)
            if item is not None:
                found.append(item)
        return found

    def _start(self, source: WorkSource, item: Any) -> None:
        key = str(item.key)
        task = asyncio.create_task(self._run_item(source, item, key), name=f"{source.kind}:{key}")
        self._running[task] = (source, key)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)
        self._wake.set()

    async def _run_item(self, source: WorkSource, item: Any, key: str) -> None:
        beat = asyncio.create_task(self._keep_lease(source, key))
        # This task runs one item: every line it logs, the bank client's included, names the item.
        structlog.contextvars.bind_contextvars(**{source.kind.log_field: key})
        try:
            await source.run(item, owner=self.owner)
            self.steps += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            self.errors += 1
            log.exception("work item crashed", kind=source.kind, key=key)
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _keep_lease(self, source: WorkSource, key: str) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                if not await source.renew(key, owner=self.owner):
                    return  # released by the step itself, or lost: nothing to keep
            except Exception:
                log.warning("lease renewal failed", kind=source.kind, key=key)

    async def _idle(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=self.idle_interval)
