"""An answer that does not match the spec, over real HTTP: one ProtocolError naming the operation and the path.

The sandbox is strict and never answers out of shape, so a small ASGI app on loopback plays a bank whose
discovery document is off (a member missing, a member of the wrong type).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from bank_support import free_port, make_integration, uvicorn_thread

from processor.bank import errors
from processor.bank.client import BankClient

Send = Callable[[dict[str, Any]], Awaitable[None]]


def _bank(document: dict[str, Any]) -> Callable[[dict[str, Any], Any, Send], Awaitable[None]]:
    async def app(scope: dict[str, Any], receive: Any, send: Send) -> None:
        body = orjson.dumps(document)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"token_endpoint": None}, "token_endpoint: must be a string"),
        ({"grant_types_supported": "client_credentials"}, "grant_types_supported: must be a list"),
    ],
)
async def test_a_discovery_document_out_of_shape_is_one_protocol_error(change: dict[str, Any], problem: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    document = {
        "issuer": base,
        "token_endpoint": f"{base}/token",
        "authorization_endpoint": f"{base}/authorize",
        "pushed_authorization_request_endpoint": f"{base}/par",
        **change,
    }
    with uvicorn_thread(_bank(document), port), pytest.raises(errors.ProtocolError) as raised:
        await BankClient.start(make_integration(base))
    assert str(raised.value).startswith(f"E1 discovery: unexpected response: {problem} [interaction ")
    assert raised.value.status == 200
