"""The admin API's ISO 20022 documents (docs/operations.md, "ISO 20022 for the ERP and the ledger"):

    GET /admin/batches/{batch_id}/pain002?version=03|10                    the batch's pain.002 status report
    GET /admin/camt054?since=T&until=T&version=02|08&accounts=clear|masked  debit notifications for the ledger

Both answer `application/xml`, valid against ISO's schema; errors are the admin API's JSON errors.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from processor.api.admin import BadRequestError, _error, _path_id, _single, window
from processor.domain.time import Clock
from processor.engine.iso_reports import debit_notifications, status_report
from processor.exports.camt054 import VERSIONS as CAMT054_VERSIONS
from processor.exports.camt054 import NothingPaidError, camt054
from processor.exports.pain002 import VERSIONS as PAIN002_VERSIONS
from processor.exports.pain002 import pain002
from processor.store import Store

Handler = Callable[[Request], Awaitable[Response]]
XML = "application/xml"


def _version(request: Request, known: dict[str, str], default: str) -> str:
    version = _single(request, "version") or default
    if version not in known:
        raise BadRequestError(f"version must be {' or '.join(known)}, not {version!r}")
    return version


def iso_routes(store: Store, clock: Clock, guarded: Callable[[Handler], Handler]) -> list[Route]:
    """The routes above, each behind the admin token (`guarded`)."""

    async def status(request: Request) -> Response:
        batch_id = _path_id(request, "batch_id")
        version = _version(request, PAIN002_VERSIONS, "03")
        found = await store.arun(lambda tx: status_report(tx, batch_id, clock.now()), write=False)
        if found is None:
            return _error(404, f"batch {batch_id} is unknown")
        document = pain002(found, "10" if version == "10" else "03")
        return Response(document, media_type=XML, headers={"Cache-Control": "no-store"})

    async def notifications(request: Request) -> Response:
        since, until = window(request)
        version = _version(request, CAMT054_VERSIONS, "08")
        accounts = _single(request, "accounts") or "masked"
        if accounts not in ("clear", "masked"):
            raise BadRequestError(f"accounts must be clear or masked, not {accounts!r}")
        found = await store.arun(
            lambda tx: debit_notifications(tx, since, until, clock.now(), masked=accounts == "masked"), write=False
        )
        try:
            document = camt054(found, "02" if version == "02" else "08")
        except NothingPaidError as exc:
            return _error(404, str(exc))
        return Response(document, media_type=XML, headers={"Cache-Control": "no-store"})

    return [
        Route("/batches/{batch_id:path}/pain002", guarded(status), methods=["GET"]),
        Route("/camt054", guarded(notifications), methods=["GET"]),
    ]
