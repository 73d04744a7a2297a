"""The admin API's requests about a batch id's life beyond its steps (issue 18), mounted by `processor.api.admin`:

    POST /admin/batches/{batch_id}/withdraw            {"reason": "..."}  -> the batch, WITHDRAWN (role operator+)
    POST /admin/batches/{batch_id}/confirm-duplicate   {}  -> the batch, on its way to the bank (role approver+)
    GET  /admin/intake?topic=T&partition=P&offset=O     the processor's verdict on that message (`dispersion submit`)

The token's name is who acts (recorded with the batch and in the audit trail). Refusals: 404 unknown batch (or no
verdict yet), 400 bad input, 403 a role that may not, 409 not possible now (the message says why and what to do
instead).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from processor.domain.roles import Action, Actor
from processor.domain.time import Clock, iso_ms
from processor.engine.requests import Where
from processor.engine.withdrawal import act_audit, confirm_duplicate, lifecycle_detail, withdraw_batch
from processor.store import Store

Handler = Callable[[Request, Actor], Awaitable[Response]]
Guard = Callable[[Handler, Action], Callable[[Request], Awaitable[Response]]]
Text = Callable[..., str | None]
Ok = Callable[..., Response]


def lifecycle_routes(
    store: Store,
    *,
    guarded: Guard,
    where: Callable[[Request], Where],
    time: Clock,
    body_of: Callable[[Request], Awaitable[dict[str, Any]]],
    text: Text,
    ok: Ok,
    bad: type[Exception],
) -> list[Route]:
    """The routes, with the admin API's own guard, body reader, text check and answers."""

    def fields(body: dict[str, Any], allowed: set[str]) -> None:
        unknown = set(body) - allowed
        if unknown:
            raise bad(f"unknown field(s) {', '.join(sorted(unknown))}")

    async def withdraw(request: Request, actor: Actor) -> Response:
        batch_id = str(text(request.path_params.get("batch_id"), "batch_id"))
        body = await body_of(request)
        fields(body, {"reason"})
        reason = text(body.get("reason"), "reason", limit=500)
        assert reason is not None
        now = time.now()
        audit = act_audit("withdraw", actor, where(request), now, reason=reason)
        flow = await asyncio.to_thread(
            withdraw_batch, store, batch_id, by=actor.name, reason=reason, now=now, audit=audit
        )
        detail = await store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)
        return ok({"batch_id": flow.batch_id, "status": flow.state, **detail})

    async def confirm(request: Request, actor: Actor) -> Response:
        batch_id = str(text(request.path_params.get("batch_id"), "batch_id"))
        fields(await body_of(request), set())
        now = time.now()
        audit = act_audit("confirm-duplicate", actor, where(request), now)
        flow = await asyncio.to_thread(confirm_duplicate, store, batch_id, by=actor.name, now=now, audit=audit)
        detail = await store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)
        return ok({"batch_id": flow.batch_id, "status": flow.state, **detail})

    async def intake(request: Request, actor: Actor) -> Response:
        topic = text(request.query_params.get("topic"), "topic")
        partition, offset = (request.query_params.get(name, "") for name in ("partition", "offset"))
        if not partition.isdigit() or not offset.isdigit() or len(partition) > 9 or len(offset) > 18:
            raise bad("partition and offset must be whole numbers")
        assert topic is not None
        found = await store.arun(lambda tx: tx.lifecycle.verdict(topic, int(partition), int(offset)), write=False)
        if found is None:
            return ok({"error": f"no verdict yet on {topic}/{partition}/{offset}"}, 404)
        return ok(
            {
                "topic": found.topic,
                "partition": found.partition,
                "offset": found.offset,
                "batch_id": found.batch_id,
                "verdict": found.verdict,
                "detail": found.detail,
                "attempt": found.attempt,
                "decided_at": iso_ms(found.decided_at),
            }
        )

    return [
        Route("/batches/{batch_id:path}/withdraw", guarded(withdraw, Action.WITHDRAW), methods=["POST"]),
        Route("/batches/{batch_id:path}/confirm-duplicate", guarded(confirm, Action.CONFIRM), methods=["POST"]),
        Route("/intake", guarded(intake, Action.READ), methods=["GET"]),
    ]
