"""What the bank client's operation groups share: the reply of one exchange, and the calls they make.

`BankClient` (processor.bank.client) owns the transport, the retries and the client's authentication; the
operation groups (`file_payments.FilePayments`, `vrp_payments.VrpPayments`, `authorization.Authorization`)
are written against `BankCalls`, a `Protocol` naming the part of the client they use (the groups subclass it
for its two URL and header helpers; mypy checks that `BankClient`, which inherits the groups, provides the rest).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import httpx

from processor.bank import errors
from processor.bank.auth import ClientAssertions
from processor.bank.integration import Integration
from processor.bank.models import Discovery, loads

T = TypeVar("T")
FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
PISP = "/open-banking/v3.1/pisp"


@dataclass(frozen=True)
class Reply:
    """A successful HTTP exchange: status, headers, body and the interaction id we sent (a large body is the
    bytearray it was read into, not copied into bytes)."""

    status: int
    headers: httpx.Headers
    body: bytes | bytearray
    interaction_id: str
    sent_at: datetime

    def json(self, operation: str, loader: Callable[[bytes | bytearray], Any] = loads) -> Any:
        """The body as JSON (Decimal fractions); ProtocolError when it is not JSON."""
        try:
            return loader(self.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise errors.ProtocolError(
                "response body is not valid JSON",
                status=self.status,
                operation=operation,
                interaction_id=self.interaction_id,
            ) from None

    def json_object(self, operation: str, loader: Callable[[bytes | bytearray], Any] = loads) -> dict[str, Any]:
        """The body as a JSON object."""
        value = self.json(operation, loader)
        if not isinstance(value, dict):
            raise errors.ProtocolError(
                "response body is not a JSON object",
                status=self.status,
                operation=operation,
                interaction_id=self.interaction_id,
            )
        return value


Parts = tuple[bytes, ...]
"""A request body in parts, sent one after the other (with their total as Content-Length) and never joined."""

Body = bytes | Callable[[], Awaitable[bytes | Parts]] | None


class BankCalls(Protocol):
    """The part of the bank client an operation group uses: its settings and its calls (see `BankClient`)."""

    integration: Integration
    assertions: ClientAssertions

    async def request(
        self,
        operation: str,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: Body = None,
        idempotency_key: str | None = None,
    ) -> Reply:
        """One logical call, retried per the policy; a 2xx Reply or a BankError."""
        ...

    async def discovery(self) -> Discovery:
        """The discovery document, read once."""
        ...

    def _parse(
        self,
        operation: str,
        reply: Reply,
        reader: Callable[[dict[str, Any]], T],
        loader: Callable[[bytes | bytearray], Any] = loads,
    ) -> T:
        """The reply's JSON object read by `reader`; ProtocolError when it does not fit."""
        ...

    async def _token_request(self, op: str, endpoint: str, form: Mapping[str, str]) -> Reply:
        """POST a token form with the client's authentication."""
        ...

    async def _resource(
        self,
        op: str,
        method: str,
        path: str,
        *,
        fapi: bool,
        body: Body = None,
        idempotency_key: str | None = None,
        token: str | None = None,
        customer_ip: str | None = None,
    ) -> Reply:
        """A resource-server call with a Bearer token: the given one, or the cached client-credentials token."""
        ...

    def _rs(self, path: str) -> str:
        return self.integration.resource_server.rstrip("/") + path

    def _basic(self) -> str:
        return f"Basic {self.integration.basic_credential().reveal()}"


def path_segment(value: str) -> str:
    """A path segment, escaped."""
    return quote(value, safe="")


def bare_text(body: bytes | bytearray) -> str:
    """A text answer that some servers wrap as a JSON string: unwrapped and stripped."""
    text = body.decode("utf-8", errors="replace").strip()
    if text.startswith('"'):
        try:
            value = loads(text)
        except ValueError:
            return text.strip('"')
        if isinstance(value, str):
            return value.strip()
    return text
