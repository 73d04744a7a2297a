"""The guarded side effect: every resource-creating bank call of every flow (A1, A2, A3, B1, B2) goes
begin -> call -> disposition -> complete | ambiguous | fail.

    guard = Guarded(flow, row.key, Operation.CREATE_VRP)
    effect = await guard.begin(body)                     # 1. PENDING, the key and the request, committed
    if effect.done: ...                                  #    created before: use effect.resource_id, call nothing
    request = guard.request(body)                        #    what the first attempt sent (None: not reproducible)
    try:
        vrp = await guard.call(lambda refresh: bank.create_domestic_vrp(request, ...))
    except BankError as exc:                             # 2. the call failed: the one disposition decides
        return await guard.failed(row, owner, exc, refuse)  # retry | resolve (AMBIGUOUS) | refuse (FAILED)
    ... in the transaction of the flow's move:
        guard.complete(tx, vrp.domestic_vrp_id)          # 3. DONE with the resource, with the state change

A process that dies between 1 and 3 leaves the record PENDING and the row in its earlier state; the next `begin`
finds it (`effect.resumed`) and the handler resolves the outcome (the bytes first sent, under the same key, or a
read) instead of creating anything new. Nothing ever calls a creating operation with a new key, or another body
under its key, for the same flow; and a resumed call is ended FAILED or REJECTED only on the bank's answer to that
request or a read showing nothing was created (`unresolved`).

`call` makes the checkpoints `{operation}:before` and `{operation}:after` (where the crash tests abort), and
when the bank refuses the access token (`Disposition.REAUTHENTICATE`) repeats the call once with a refreshed
token (`attempt(True)`), with the same key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import structlog

from processor.bank.errors import BankError, Disposition, disposition
from processor.engine.leased import LeasedFlow, T
from processor.engine.tokens import TokenUnavailableError
from processor.store import Operation, SideEffect, StoreTx

log = structlog.get_logger("processor.engine.side_effect")

R = TypeVar("R")
V = TypeVar("V")
Q = TypeVar("Q", bytes, tuple[bytes, ...])

Request = bytes | tuple[bytes, ...]
"""A call's request body: bytes, or bytes in parts sent joined (a file is then not copied to be hashed)."""

Refusal = BankError | TokenUnavailableError
"""Why a creating call ended for good: the bank's refusal, or no token to make it with."""


class Guarded(Generic[T]):
    """One resource-creating call of one flow row (`scope_id`: its key)."""

    def __init__(self, flow: LeasedFlow[T], scope_id: str, operation: Operation) -> None:
        self.flow = flow
        self.ctx = flow.ctx
        self.scope_id = scope_id
        self.operation = operation
        self.effect: SideEffect | None = None
        self._digest = ""

    async def begin(self, request: Request, *, keep: bool = True) -> SideEffect:
        """Record the call before it is made (committed); see `SideEffects.begin`. `request`: the bytes the
        call sends, kept with the record (`keep=False`: only their hash, for a body too large to keep: a file,
        hashed part by part when given in parts)."""
        effect, _ = await self.begin_with(request, None, keep=keep)
        return effect

    async def begin_with(
        self,
        request: Request,
        also: Callable[[StoreTx, SideEffect], V] | None,
        *,
        keep: bool = True,
    ) -> tuple[SideEffect, V | None]:
        """`begin`, with `also(tx, effect)` written in the same transaction (e.g. the key on the row)."""
        now = self.flow.now()
        digest = _sha256(request)
        self._digest = digest
        body = (request if isinstance(request, bytes) else b"".join(request)) if keep else None

        def work(tx: StoreTx) -> tuple[SideEffect, V | None]:
            effect = tx.side_effects.begin(
                self.scope_id, self.operation, now=now, request_sha256=digest, request_body=body
            )
            return effect, None if also is None else also(tx, effect)

        effect, extra = await self.ctx.store.arun(work)
        self.effect = effect
        if effect.resumed:
            log.info(
                "resuming a call whose outcome is unknown; resolving it with the same key",
                kind=self.flow.kind.value,
                key=self.scope_id,
                operation=self.operation.value,
                previous=effect.previous_status,
                idempotency_key=effect.idempotency_key,
            )
        return effect, extra

    def request(self, rebuilt: Q) -> Q | bytes | None:
        """The bytes to send under the record's key: those the first attempt sent (kept with the record), or
        `rebuilt` (the request given to `begin`) when it is byte for byte what was first sent (same hash). None
        when the request changed since (a new configuration or code between attempts): sending it would be
        another request under the same key, so the call is not made and the outcome stays to be resolved."""
        effect = self.effect
        assert effect is not None, "begin first"
        if effect.request_body is not None:
            return effect.request_body
        if effect.request_sha256 is None or effect.request_sha256 == self._digest:
            return rebuilt
        return None

    async def call(self, attempt: Callable[[bool], Awaitable[R]]) -> R:
        """Make the call: `attempt(False)`, and `attempt(True)` once more when the bank refused the access token
        (the attempt refreshes it first). Bank errors are raised for `failed`."""
        self.ctx.checkpoint(f"{self.operation.value}:before", self.scope_id)
        try:
            result = await attempt(False)
        except BankError as exc:
            if disposition(exc) is not Disposition.REAUTHENTICATE:
                raise
            # Our clock said the token was fine, the bank's says not: refresh, then the same call again.
            log.info("access token refused by the bank; refreshing", key=self.scope_id, operation=self.operation.value)
            result = await attempt(True)
        self.ctx.checkpoint(f"{self.operation.value}:after", self.scope_id)
        return result

    def complete(self, tx: StoreTx, resource_id: str) -> None:
        """DONE with the created resource, in the transaction of the flow's move."""
        tx.side_effects.complete(self.scope_id, self.operation, resource_id, now=self.flow.now())

    def fail(self, tx: StoreTx, reason: str) -> None:
        """FAILED (the bank refused; nothing was created), in the transaction that ends the flow."""
        tx.side_effects.fail(self.scope_id, self.operation, reason, now=self.flow.now())

    async def failed(
        self,
        item: T,
        owner: str,
        error: Refusal,
        refuse: Callable[[Refusal], Awaitable[T]],
        *,
        nothing_created: Callable[[], Awaitable[bool]] | None = None,
    ) -> T:
        """Act on a failed call by its disposition: retry later, resolve later (recorded AMBIGUOUS), or `refuse`
        (the flow ends; it records `fail` in its transaction).

        No token to send the request with, or the token refused even after a refresh, is no answer to the
        request itself: it ends a first attempt, but a resumed call (an earlier attempt's outcome unknown) only
        when `nothing_created` reads the bank and shows that no resource exists; otherwise the call stays to be
        resolved and the flow is not ended."""
        if not isinstance(error, TokenUnavailableError):
            found = disposition(error)
            if found in (Disposition.RETRY, Disposition.RESOLVE):
                ambiguous = self.operation if found is Disposition.RESOLVE else None
                return await self.flow.retry_later(item, owner, error, ambiguous=ambiguous)
            if found is Disposition.REFUSE:
                return await refuse(error)
        # No token, or the token refused again: the bank never judged the request itself.
        return await self.unresolved(item, owner, str(error), end=lambda: refuse(error), check=nothing_created)

    async def unresolved(
        self,
        item: T,
        owner: str,
        reason: str,
        *,
        end: Callable[[], Awaitable[T]] | None = None,
        check: Callable[[], Awaitable[bool]] | None = None,
    ) -> T:
        """The call could not be made (`reason`). A first attempt (nothing sent before) ends the flow (`end`); a
        resumed one does only when `check` reads the bank and finds nothing created; otherwise the record is
        AMBIGUOUS and the flow tries again later, never ending FAILED or REJECTED while the bank may hold the
        resource."""
        effect = self.effect
        resumed = effect is not None and effect.resumed
        if end is not None and (not resumed or (check is not None and await check())):
            return await end()
        log.warning(
            "the outcome of an earlier attempt is unknown and cannot be resolved now; trying again later",
            kind=self.flow.kind.value,
            key=self.scope_id,
            operation=self.operation.value,
            reason=reason,
        )
        return await self.flow.retry_later(item, owner, reason, ambiguous=self.operation)


def _sha256(request: Request) -> str:
    digest = hashlib.sha256()
    for part in (request,) if isinstance(request, bytes) else request:
        digest.update(part)
    return digest.hexdigest()
