"""Test-only admin routes under `/__sandbox/`: move the clock, swap the fault plan, count documents.

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
from sandbox.errors import invalid_format
from sandbox.faults import FaultPlan
from sandbox.jsonutil import loads
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

    return [
        Route(f"{PREFIX}/clock", get_clock, methods=["GET"], name="admin.clock"),
        Route(f"{PREFIX}/clock", advance_clock, methods=["POST"], name="admin.clock.advance"),
        Route(f"{PREFIX}/faults", get_faults, methods=["GET"], name="admin.faults"),
        Route(f"{PREFIX}/faults", put_faults, methods=["PUT"], name="admin.faults.replace"),
        Route(f"{PREFIX}/counts", counts, methods=["GET"], name="admin.counts"),
    ]
