"""The admin API's requests about a batch id's life beyond its steps (issue 18), mounted by `processor.api.admin`:

    POST /admin/batches/{batch_id}/withdraw            {"reason": "...", "withdrawn_by": "ana"}  -> the batch, WITHDRAWN
    POST /admin/batches/{batch_id}/confirm-duplicate   {"confirmed_by": "ana"}  -> the batch, on its way to the bank
    GET  /admin/intake?topic=T&partition=P&offset=O     the processor's verdict on that message (`dispersion submit`)

Refusals: 404 unknown batch (or no verdict yet), 400 bad input, 409 not possible now (the message says why and
what to do instead).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from processor.domain.time import Clock, iso_ms
from processor.engine.withdrawal import confirm_duplicate, lifecycle_detail, withdraw_batch
from processor.store import Store

Handler = Callable[[Request], Awaitable[Response]]
Text = Callable[..., str | None]
Ok = Callable[..., Response]


def lifecycle_routes(
    store: Store,
    *,
    guarded: Callable[[Handler], Handler],
    time: Clock,
    body_of: Callable[[Request], Awaitable[dict[str, Any]]],
    text: Text,
    ok: Ok,
    bad: type[Exception],
) -> list[Route]:
    """The routes, with the admin API's own guard, body reader, text check and answers."""

    def actor(body: dict[str, Any], name: str) -> str:
        value = text(body.get(name, "admin-api"), name, limit=100)
        assert value is not None
        return value

    def fields(body: dict[str, Any], allowed: set[str]) -> None:
        unknown = set(body) - allowed
        if unknown:
            raise bad(f"unknown field(s) {', '.join(sorted(unknown))}")

    async def withdraw(request: Request) -> Response:
        batch_id = str(text(request.path_params.get("batch_id"), "batch_id"))
        body = await body_of(request)
        fields(body, {"reason", "withdrawn_by"})
        reason = text(body.get("reason"), "reason", limit=500)
        assert reason is not None
        by = actor(body, "withdrawn_by")
        flow = await asyncio.to_thread(withdraw_batch, store, batch_id, by=by, reason=reason, now=time.now())
        detail = await store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)
        return ok({"batch_id": flow.batch_id, "status": flow.state, **detail})

    async def confirm(request: Request) -> Response:
        batch_id = str(text(request.path_params.get("batch_id"), "batch_id"))
        body = await body_of(request)
        fields(body, {"confirmed_by"})
        by = actor(body, "confirmed_by")
        flow = await asyncio.to_thread(confirm_duplicate, store, batch_id, by=by, now=time.now())
        detail = await store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)
        return ok({"batch_id": flow.batch_id, "status": flow.state, **detail})

    async def intake(request: Request) -> Response:
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
        Route("/batches/{batch_id:path}/withdraw", guarded(withdraw), methods=["POST"]),
        Route("/batches/{batch_id:path}/confirm-duplicate", guarded(confirm), methods=["POST"]),
        Route("/intake", guarded(intake), methods=["GET"]),
    ]
