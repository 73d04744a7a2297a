"""The admin API's ISO 20022 documents (docs/operations.md, "ISO 20022 for the ERP and the ledger"):

    GET /admin/batches/{batch_id}/pain002?version=03|10                    the batch's pain.002 status report
    GET /admin/camt054?since=T&until=T&version=02|08&accounts=clear|masked  debit notifications for the ledger

Both answer `application/xml`, valid against ISO's schema; errors are the admin API's JSON errors. Creditor
accounts in clear (`accounts=clear`) need the operator role or higher (a viewer gets 403; masked stays open to every
role), and each such export is recorded in the audit trail (`camt054_clear_accounts`).
"""

from __future__ import annotations

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from processor.api.admin_input import BadRequestError, error, guarded, path_id, single, state, where, window
from processor.domain.roles import Action, Actor
from processor.domain.time import iso_ms
from processor.engine.iso_reports import debit_notifications, status_report
from processor.engine.requests import record_action
from processor.exports.camt054 import VERSIONS as CAMT054_VERSIONS
from processor.exports.camt054 import NothingPaidError, camt054
from processor.exports.pain002 import VERSIONS as PAIN002_VERSIONS
from processor.exports.pain002 import pain002

XML = "application/xml"
log = structlog.get_logger("processor.api.admin")


def _version(request: Request, known: dict[str, str], default: str) -> str:
    version = single(request, "version") or default
    if version not in known:
        raise BadRequestError(f"version must be {' or '.join(known)}, not {version!r}")
    return version


async def status(request: Request, actor: Actor) -> Response:
    """GET /admin/batches/{batch_id}/pain002: the batch's status report."""
    admin = state(request)
    batch_id = path_id(request, "batch_id")
    version = _version(request, PAIN002_VERSIONS, "03")
    found = await admin.store.arun(lambda tx: status_report(tx, batch_id, admin.clock.now()), write=False)
    if found is None:
        return error(404, f"batch {batch_id} is unknown")
    document = pain002(found, "10" if version == "10" else "03")
    return Response(document, media_type=XML, headers={"Cache-Control": "no-store"})


async def notifications(request: Request, actor: Actor) -> Response:
    """GET /admin/camt054: debit notifications for the ledger."""
    admin = state(request)
    since, until = window(request)
    version = _version(request, CAMT054_VERSIONS, "08")
    accounts = single(request, "accounts") or "masked"
    if accounts not in ("clear", "masked"):
        raise BadRequestError(f"accounts must be clear or masked, not {accounts!r}")
    clear = accounts == "clear"
    if clear and not actor.may(Action.CLEAR_ACCOUNTS):
        log.info("admin_refused_role", actor=actor.name, role=str(actor.role), path=request.url.path, accounts="clear")
        return error(
            403,
            f"{actor.name} has the {actor.role} role: creditor accounts in clear need the operator, approver or "
            "admin role; accounts=masked is open to every role",
        )
    found = await admin.store.arun(
        lambda tx: debit_notifications(tx, since, until, admin.clock.now(), masked=not clear), write=False
    )
    try:
        document = camt054(found, "02" if version == "02" else "08")
    except NothingPaidError as exc:
        return error(404, str(exc))
    if clear:  # account numbers leave in clear: who, when, which window (recorded before they are sent)
        detail = {"since": iso_ms(since), "until": iso_ms(until), "version": version}
        now = admin.clock.now()
        await admin.store.arun(
            lambda tx: record_action(tx, "camt054_clear_accounts", actor, now, where(request), None, detail)
        )
    return Response(document, media_type=XML, headers={"Cache-Control": "no-store"})


ISO_ROUTES = [
    Route("/batches/{batch_id:path}/pain002", guarded(status), methods=["GET"]),
    Route("/camt054", guarded(notifications), methods=["GET"]),
]
