"""The leased-flow base every flow runs on (file payments, VRP mandates, VRP payments): claim, renew, release,
the step loop that dispatches on the kind's state table, retries and the reschedule after a crash.

    class FileFlow(LeasedFlow[Flow]):
        kind = Kind.FILE
        def repo(self, tx) -> WorkRows[Flow]: return tx.flows
        def steps(self) -> dict[str, Step[Flow]]: return {"create_consent": self.create_consent, ...}
        async def create_consent(self, flow, owner): ...      # the handler FILE_TABLE names for RECEIVED

The state table names each state's handler; `steps` maps those names to the flow's methods, type-checked, and the
base turns that into a map from state to handler when the flow is made (a name without a method fails there).

A flow is a row of a work table (`processor.store.work`): a `state`, a `version`, `next_action_at` and a lease.
A worker (`processor.engine.worker.Worker`) claims due rows in the states whose rule has a handler, and calls
`run`: the handler of the row's state takes one step (writing the row with a compare-and-set that also checks
the lease), and `run` goes on while the row stays due and leased to this owner. The lease is given back at the
end. A lost compare-and-set (someone else moved the row, e.g. the approver's redirect) stops the run; any other
error (a bug, the database) is recorded as `last_error` and the row retried later, while a crash of the process
leaves the lease to run out so another instance takes the row over.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import structlog

from processor.bank.errors import BankError, BankHTTPError
from processor.domain.kinds import Kind
from processor.domain.steps import Rule, Wait, handled_states
from processor.domain.time import utc_ms
from processor.engine.context import EngineContext
from processor.engine.tracing import continued
from processor.store import Operation, Store, StoreTx, VersionConflictError

log = structlog.get_logger("processor.engine.leased")


class WorkItem(Protocol):
    """What the base reads of a work row (`Flow`, `VrpMandate`, `VrpPayment`)."""

    @property
    def key(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def attempts(self) -> int: ...
    @property
    def next_action_at(self) -> datetime | None: ...
    @property
    def lease_owner(self) -> str | None: ...


T = TypeVar("T", bound=WorkItem)
Step = Callable[[T, str], Awaitable[T]]  # a handler: the leased row and its owner -> the row as written


class WorkRows(Protocol[T]):
    """What the base uses of a kind's repository (`processor.store.work.WorkRepo` and its `update`)."""

    def get(self, key: str, *, for_update: bool = False) -> T | None: ...
    def claim_due(
        self, *, now: datetime, owner: str, limit: int, lease_seconds: float, states: list[str]
    ) -> list[T]: ...
    def acquire(self, key: str, *, owner: str, now: datetime, lease_seconds: float) -> T | None: ...
    def renew(self, key: str, *, owner: str, now: datetime, lease_seconds: float) -> bool: ...
    def release(self, key: str, *, owner: str) -> bool: ...
    def update(
        self,
        key: str,
        /,
        *,
        expected_version: int,
        now: datetime,
        owner: str | None = None,
        release_lease: bool = False,
        attempts: int = ...,
        last_error: str | None = ...,
        next_action_at: datetime | None = ...,
    ) -> T: ...


class LeasedFlow(Generic[T]):
    """A kind of flow as leased work (`processor.engine.worker.WorkSource`). Subclasses set `kind`, give
    `repo`, and map every handler their state table names to a method (`steps`)."""

    kind: ClassVar[Kind]

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        named = self.steps()
        missing = sorted({r.handler for r in self.kind.table.values() if r.handler and r.handler not in named})
        if missing:
            raise TypeError(f"{type(self).__name__} has no step for {', '.join(missing)} ({self.kind.value} table)")
        self.handlers: dict[str, Step[T]] = {
            str(state): named[rule.handler] for state, rule in self.kind.table.items() if rule.handler is not None
        }

    def repo(self, tx: StoreTx) -> WorkRows[T]:
        """The kind's repository in `tx` (`tx.flows`, `tx.mandates`, `tx.vrp_payments`)."""
        raise NotImplementedError

    def steps(self) -> Mapping[str, Step[T]]:
        """The flow's step handlers by the name the state table gives them."""
        raise NotImplementedError

    def now(self) -> datetime:
        """The engine's clock, in store precision."""
        return utc_ms(self.ctx.clock.now())

    def rule(self, state: str) -> Rule[Any] | None:
        """The state table's row for `state` (None for a state the table does not know)."""
        return self.kind.table.get(state)

    # -- leases -------------------------------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store its rows live in."""
        return self.ctx.store

    def claim_in(self, tx: StoreTx, *, owner: str, limit: int) -> list[T]:
        """Lease up to `limit` due rows in a state the engine has a step for, in the caller's transaction (a
        worker claims every kind of work in one)."""
        lease = self.ctx.settings.lease_seconds
        states = list(handled_states(self.kind.table))
        return self.repo(tx).claim_due(now=self.now(), owner=owner, limit=limit, lease_seconds=lease, states=states)

    async def acquire(self, key: str, *, owner: str) -> T | None:
        """Lease one row if it exists, is due and is free; else None (single-flow mode, `advance`)."""
        now = self.now()
        lease = self.ctx.settings.lease_seconds

        def work(tx: StoreTx) -> T | None:
            repo = self.repo(tx)
            current = repo.get(key)
            if current is None or current.next_action_at is None or current.next_action_at > now:
                return None
            leased: T | None = repo.acquire(key, owner=owner, now=now, lease_seconds=lease)
            return leased

        return await self.ctx.store.arun(work)

    async def renew(self, key: str, *, owner: str) -> bool:
        """Extend a held lease while a step runs; False when it was lost."""
        now = self.now()
        lease = self.ctx.settings.lease_seconds
        renewed = await self.ctx.store.arun(
            lambda tx: self.repo(tx).renew(key, owner=owner, now=now, lease_seconds=lease)
        )
        return bool(renewed)

    async def release(self, key: str, *, owner: str) -> None:
        """Give a lease back."""
        await self.ctx.store.arun(lambda tx: self.repo(tx).release(key, owner=owner))

    async def get(self, key: str) -> T | None:
        """The row as stored, or None."""
        item: T | None = await self.ctx.store.arun(lambda tx: self.repo(tx).get(key), write=False)
        return item

    async def advance(self, key: str, *, owner: str) -> T | None:
        """Take the row's due steps now if it is free (as `run`); the row as stored when it is not due or another
        owner holds it; None when it does not exist."""
        leased = await self.acquire(key, owner=owner)
        if leased is None:
            return await self.get(key)
        return await self.run(leased, owner=owner)

    # -- running ------------------------------------------------------------------------------------------------

    async def run(self, item: T, *, owner: str) -> T:
        """Advance a leased row step by step while it stays due (until it waits for the approver, the bank or a
        retry, or ends), then give the lease back. Returns the row as last written or read."""
        current = item
        try:
            while True:
                current = await self.traced_step(current, owner=owner)
                rule = self.rule(current.state)
                if rule is None or rule.handler is None or current.lease_owner != owner:
                    break
                if current.next_action_at is None or current.next_action_at > self.now():
                    break
        except VersionConflictError:
            log.info("changed under this step; leaving it", kind=self.kind.value, key=current.key, state=current.state)
            current = await self._reread(current)
        except Exception as exc:  # a bug or the database: keep the row, try again later
            log.exception("flow step crashed", kind=self.kind.value, key=current.key, state=current.state)
            await self._reschedule_after_error(current, owner, f"internal error: {type(exc).__name__}: {exc}")
            return await self._reread(current)
        if current.lease_owner == owner:
            await self.release(current.key, owner=owner)
        return current

    async def traced_step(self, item: T, *, owner: str) -> T:
        """`step` as a span named by the kind and the handler (`file create_consent`), continuing the trace whose
        context is kept with the row (a file flow's: its batch's), whichever instance runs it and when."""
        rule = self.rule(item.state)
        handler = rule.handler if rule is not None and rule.handler else "settle"
        attributes = {"dispersion.kind": self.kind.value, "dispersion.key": item.key, "dispersion.state": item.state}
        with continued(f"{self.kind.value} {handler}", getattr(item, "traceparent", None), attributes=attributes):
            return await self.step(item, owner=owner)

    async def step(self, item: T, *, owner: str) -> T:
        """Run the handler the state table names for the row's state; a state without one has nothing to do
        (it is made not due, so it is not looked at again)."""
        handler = self.handlers.get(item.state)
        if handler is None:
            if item.next_action_at is None:
                return item
            return await self.update(item, owner, next_action_at=None, release_lease=True)
        return await handler(item, owner)

    # -- writing ------------------------------------------------------------------------------------------------

    async def update(self, item: T, owner: str, *, release_lease: bool = False, **changes: Any) -> T:
        """Compare-and-set `changes` on the row as read (its version, and this owner's lease)."""
        now = self.now()
        updated: T = await self.ctx.store.arun(
            lambda tx: self.repo(tx).update(
                item.key,
                expected_version=item.version,
                now=now,
                owner=owner,
                release_lease=release_lease,
                **changes,
            )
        )
        return updated

    def next_look(
        self,
        state: str,
        now: datetime,
        *,
        attempt: int = 0,
        deadline: datetime | None = None,
        not_before: datetime | None = None,
    ) -> datetime:
        """When a row waiting in `state` is looked at again, by the table's `wait` for it: a pending payment
        after doubling waits (`attempt`), a check every `poll_max` (a consent awaiting its approver: every
        `consent_watch_interval`, an authorised mandate's every `mandate_watch_interval`) never past the
        `deadline`, or (a scheduled payment) `not_before`, the start of its day."""
        rule = self.rule(state)
        wait = None if rule is None else rule.wait
        settings = self.ctx.settings
        if wait is Wait.EXECUTE_ON:
            return now if not_before is None else max(now, not_before)
        if wait is Wait.POLL:
            return now + timedelta(seconds=settings.poll_delay(attempt))
        every = settings.poll_max
        if wait is Wait.WATCH:
            every = settings.consent_watch_interval
        elif wait is Wait.MANDATE:
            every = settings.mandate_watch_interval
        later = now + timedelta(seconds=every)
        return later if deadline is None else min(later, deadline)

    async def retry_later(
        self,
        item: T,
        owner: str,
        error: BankError | str,
        *,
        ambiguous: Operation | None = None,
    ) -> T:
        """A bank call failed (or could not be made: `error` says why) in a way trying again can cure: the row
        stays in its state, due again after the retry back-off (never before the bank's `Retry-After`);
        `ambiguous` names a creating call that may have taken effect, recorded AMBIGUOUS in the same transaction
        (resolved before anything new is created)."""
        now = self.now()
        told = error.retry_after if isinstance(error, BankHTTPError) and error.retry_after else 0.0
        wait = max(told, self.ctx.settings.retry_delay(item.attempts))
        reason = (error if isinstance(error, str) else f"{type(error).__name__}: {error}")[:2000]

        def work(tx: StoreTx) -> T:
            if ambiguous is not None and tx.side_effects.get(item.key, ambiguous) is not None:
                tx.side_effects.mark_ambiguous(item.key, ambiguous, reason, now=now)
            updated: T = self.repo(tx).update(
                item.key,
                expected_version=item.version,
                now=now,
                owner=owner,
                release_lease=True,
                attempts=item.attempts + 1,
                last_error=reason,
                next_action_at=now + timedelta(seconds=wait),
            )
            return updated

        updated = await self.ctx.store.arun(work)
        log.warning(
            "bank call failed; will try again",
            kind=self.kind.value,
            key=item.key,
            operation=ambiguous.value if ambiguous else None,
            error=reason,
            retry_in=wait,
        )
        return updated

    async def _reread(self, item: T) -> T:
        try:
            current = await self.get(item.key)
        except Exception:  # the database is down: the caller gets what it had
            logging.getLogger(__name__).debug("could not read the row again", exc_info=True)
            return item
        return item if current is None else current

    async def _reschedule_after_error(self, item: T, owner: str, reason: str) -> None:
        now = self.now()

        def work(tx: StoreTx) -> None:
            repo = self.repo(tx)
            current = repo.get(item.key)
            rule = None if current is None else self.rule(current.state)
            if current is None or current.lease_owner != owner or (rule is not None and rule.terminal):
                return
            repo.update(
                item.key,
                expected_version=current.version,
                now=now,
                owner=owner,
                release_lease=True,
                attempts=current.attempts + 1,
                last_error=reason[:2000],
                next_action_at=now + timedelta(seconds=self.ctx.settings.retry_delay(current.attempts)),
            )

        try:
            await self.ctx.store.arun(work)
        except Exception:  # the lease will run out and another run will pick the row up
            log.exception("could not reschedule after a crashed step", kind=self.kind.value, key=item.key)
