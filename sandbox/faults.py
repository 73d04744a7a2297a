"""Fault injection per operation (latency, 5xx, 429, dropped connections, commit-then-fail).

Placeholder: passes every call through. Filled in by the fault-injection work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

Handler = Callable[[Request], Awaitable[Response]]


class FaultPlan:
    """The faults configured for a run."""

    async def run(self, operation: str, request: Request, handler: Handler) -> Response:
        """Run the handler for `operation`, applying any fault configured for it."""
        return await handler(request)

    @classmethod
    def from_json(cls, data: object) -> FaultPlan:
        """Build a plan from its JSON form."""
        return cls()
