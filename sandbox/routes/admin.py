"""Test-only admin routes under `/__sandbox/`: move the clock, swap the fault plan, count documents, and do what
the bank's customer does in their banking app (revoke a VRP consent, revoke the refresh tokens of its grants).

Served only when the bank runs with `admin` on (`dispersion sandbox --admin`); never in front of users.
Route names start with `admin.`, which the fault plan always passes straight through.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Protocol, runtime_checkable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from sandbox.clock import iso_ms
from sandbox.consents import VRP_KIND, set_status
from sandbox.errors import invalid_consent_status, invalid_format, not_found
from sandbox.faults import FaultPlan
from sandbox.jsonutil import loads
from sandbox.oauth.grants import revoke_consent_grants, revoke_refresh_tokens
from sandbox.oauth.params import AUTHORISED, REVOKED
from sandbox.routes.http import json_response, parse_json_object, read_body
from sandbox.state import Bank

PREFIX = "/__sandbox"
COUNTED_KINDS: tuple[str, ...] = ("file_consent", "file_payment", "vrp_consent", "domestic_vrp", "access_token")
MAX_ADVANCE_SECONDS = 10 * 365 * 24 * 3600


@runtime_checkable
class AdjustableClock(Protocol):
    """A clock that can be moved forward (SystemClock can, and so can the tests' ManualClock)."""

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds`."""
        ...


def _clock_body(bank: Bank) -> dict[str, object]:
    return {"now": iso_ms(bank.now()), "epoch": bank.now().timestamp()}


def _authorised_vrp_consent(bank: Bank, consent_id: str) -> None:
    """400 NotFound for an unknown id (or a file consent's), InvalidConsentStatus unless it is Authorised."""
    doc = bank.store.get(VRP_KIND, consent_id)
    if doc is None:
        raise not_found(f"no VRP consent {consent_id}", "ConsentId")
    if doc["status"] != AUTHORISED:
        raise invalid_consent_status(
            f"invalid_consent_status: consent {consent_id} is {doc['status']}; only an {AUTHORISED} one can be revoked"
        )


def revoke_vrp_consent(bank: Bank, consent_id: str) -> dict[str, object]:
    """The customer revokes an authorised VRP consent: it reads `Revoked` from now on (StatusUpdateDateTime
    stamped) and every token of its grants is revoked."""
    _authorised_vrp_consent(bank, consent_id)
    doc = set_status(bank, VRP_KIND, consent_id, REVOKED)
    tokens = revoke_consent_grants(bank, consent_id)
    return {
        "ConsentId": consent_id,
        "Status": doc["status"],
        "StatusUpdateDateTime": doc["updated"],
        "revoked_tokens": tokens,
    }


def routes(bank: Bank) -> list[BaseRoute]:
    """The admin routes of one bank."""

    async def get_clock(request: Request) -> Response:
        return json_response(_clock_body(bank), request=request)

    async def advance_clock(request: Request) -> Response:
        data = parse_json_object(await read_body(bank, request))
        seconds = data.get("advance_seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | Decimal):
            raise invalid_format("advance_seconds must be a number", "advance_seconds")
        if seconds < 0 or seconds > MAX_ADVANCE_SECONDS:
            raise invalid_format(f"advance_seconds must be between 0 and {MAX_ADVANCE_SECONDS}", "advance_seconds")
        clock = bank.clock
        if not isinstance(clock, AdjustableClock):
            raise invalid_format("this bank's clock cannot be moved")
        clock.advance(float(seconds))
        return json_response(_clock_body(bank), request=request)

    async def get_faults(request: Request) -> Response:
        return json_response(bank.faults.stats(), request=request)

    async def put_faults(request: Request) -> Response:
        raw = await read_body(bank, request)
        try:
            plan = FaultPlan.from_json(loads(raw) if raw.strip() else None)
        except (ValueError, RecursionError) as exc:
            raise invalid_format(str(exc)) from None
        bank.faults = plan
        return json_response(plan.stats(), request=request)

    async def counts(request: Request) -> Response:
        kinds = list(COUNTED_KINDS)
        for kind in request.query_params.getlist("kind"):
            if kind and kind not in kinds:
                kinds.append(kind)
        return json_response({kind: bank.store.count(kind) for kind in kinds}, request=request)

    async def revoke_consent(request: Request) -> Response:
        return json_response(revoke_vrp_consent(bank, request.path_params["consent_id"]), request=request)

    async def revoke_refresh(request: Request) -> Response:
        consent_id = request.path_params["consent_id"]
        _authorised_vrp_consent(bank, consent_id)
        revoked = revoke_refresh_tokens(bank, consent_id)
        return json_response({"ConsentId": consent_id, "revoked_refresh_tokens": revoked}, request=request)

    consent = f"{PREFIX}/vrp-consents/{{consent_id}}"
    return [
        Route(f"{consent}/revoke", revoke_consent, methods=["POST"], name="admin.consent.revoke"),
        Route(f"{consent}/revoke-refresh-token", revoke_refresh, methods=["POST"], name="admin.refresh.revoke"),
        Route(f"{PREFIX}/clock", get_clock, methods=["GET"], name="admin.clock"),
        Route(f"{PREFIX}/clock", advance_clock, methods=["POST"], name="admin.clock.advance"),
        Route(f"{PREFIX}/faults", get_faults, methods=["GET"], name="admin.faults"),
        Route(f"{PREFIX}/faults", put_faults, methods=["PUT"], name="admin.faults.replace"),
        Route(f"{PREFIX}/counts", counts, methods=["GET"], name="admin.counts"),
    ]
