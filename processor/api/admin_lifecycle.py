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

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from processor.api.admin_bodies import EmptyBody, WithdrawBody, read_body
from processor.api.admin_input import BadRequestError, guarded, ok, path_id, state, text, where
from processor.domain.roles import Action, Actor
from processor.domain.time import iso_ms
from processor.engine.withdrawal import act_audit, confirm_duplicate, lifecycle_detail, withdraw_batch


async def withdraw(request: Request, actor: Actor) -> Response:
    """POST /admin/batches/{batch_id}/withdraw: the batch, WITHDRAWN."""
    admin = state(request)
    batch_id = path_id(request, "batch_id")
    body = await read_body(request, WithdrawBody, actor)
    now = admin.clock.now()
    audit = act_audit("withdraw", actor, where(request), now, reason=body.reason)
    flow = await asyncio.to_thread(
        withdraw_batch, admin.store, batch_id, by=actor.name, reason=body.reason, now=now, audit=audit
    )
    detail = await admin.store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)
    return ok({"batch_id": flow.batch_id, "status": flow.state, **detail})


async def confirm(request: Request, actor: Actor) -> Response:
    """POST /admin/batches/{batch_id}/confirm-duplicate: the batch, on its way to the bank."""
    admin = state(request)
    batch_id = path_id(request, "batch_id")
    await read_body(request, EmptyBody, actor)
    now = admin.clock.now()
    audit = act_audit("confirm-duplicate", actor, where(request), now)
    flow = await asyncio.to_thread(confirm_duplicate, admin.store, batch_id, by=actor.name, now=now, audit=audit)
    detail = await admin.store.arun(lambda tx: lifecycle_detail(tx, batch_id), write=False)
    return ok({"batch_id": flow.batch_id, "status": flow.state, **detail})


async def intake(request: Request, actor: Actor) -> Response:
    """GET /admin/intake: the processor's verdict on one message (404 while there is none)."""
    topic = text(request.query_params.get("topic"), "topic")
    partition, offset = (request.query_params.get(name, "") for name in ("partition", "offset"))
    if not partition.isdigit() or not offset.isdigit() or len(partition) > 9 or len(offset) > 18:
        raise BadRequestError("partition and offset must be whole numbers")
    assert topic is not None
    found = await state(request).store.arun(
        lambda tx: tx.lifecycle.verdict(topic, int(partition), int(offset)), write=False
    )
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


LIFECYCLE_ROUTES = [
    Route("/batches/{batch_id:path}/withdraw", guarded(withdraw, Action.WITHDRAW), methods=["POST"]),
    Route("/batches/{batch_id:path}/confirm-duplicate", guarded(confirm, Action.CONFIRM), methods=["POST"]),
    Route("/intake", guarded(intake, Action.READ), methods=["GET"]),
]
