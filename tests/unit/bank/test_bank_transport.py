"""The bank client's transport: which httpx error each aiohttp failure becomes (only a failure before a byte was
sent may say "not sent"), the idle-connection check, and the fallback to httpx's own transport behind a proxy.
Over real loopback HTTP: tests/integration/bank/test_bank_transport.py."""

from __future__ import annotations

import socket

import aiohttp
import httpx
import pytest
from aiohttp.client_reqrep import ConnectionKey

from processor.bank.client import _transport_error
from processor.bank.transport import AiohttpTransport, CookielessClient, bank_transport, mapped_error, socket_readable

KEY = ConnectionKey("bank.example", 443, True, True, None, None, None)
REFUSED = OSError(111, "Connection refused")

# Every aiohttp failure the transport can meet, the httpx error it becomes and whether the bank client then
# counts the request as possibly acted on.
CASES: list[tuple[BaseException, type[httpx.TransportError], bool]] = [
    (aiohttp.ConnectionTimeoutError("connect or pool wait"), httpx.ConnectTimeout, False),
    (aiohttp.ClientConnectorError(KEY, REFUSED), httpx.ConnectError, False),
    (aiohttp.ClientConnectorDNSError(KEY, OSError(-2, "Name or service not known")), httpx.ConnectError, False),
    (aiohttp.ClientConnectorCertificateError(KEY, ValueError("unknown issuer")), httpx.ConnectError, False),
    (aiohttp.ClientConnectorSSLError(KEY, OSError(1, "handshake")), httpx.ConnectError, False),
    (aiohttp.InvalidURL("bank.example"), httpx.UnsupportedProtocol, False),
    (aiohttp.SocketTimeoutError("sock_read"), httpx.ReadTimeout, True),
    (aiohttp.ServerTimeoutError("read"), httpx.ReadTimeout, True),
    (aiohttp.ServerDisconnectedError(), httpx.RemoteProtocolError, True),
    (aiohttp.ClientPayloadError("truncated body"), httpx.RemoteProtocolError, True),
    (aiohttp.ClientOSError(104, "Connection reset by peer"), httpx.ReadError, True),
    (aiohttp.ClientConnectionResetError("Cannot write to closing transport"), httpx.ReadError, True),
    (aiohttp.ClientConnectionError("Connection closed"), httpx.ReadError, True),
    (aiohttp.ClientError("anything else"), httpx.ReadError, True),
]


@pytest.mark.parametrize(("error", "mapped", "ambiguous"), CASES, ids=[type(case[0]).__name__ for case in CASES])
def test_only_errors_before_sending_are_not_ambiguous(
    error: BaseException, mapped: type[httpx.TransportError], ambiguous: bool
) -> None:
    request = httpx.Request("POST", "https://bank.example/open-banking/v3.1/pisp/file-payment-consents")
    result = mapped_error(error, request)
    assert type(result) is mapped
    assert result.request is request
    assert _transport_error(result, "A1", "interaction").ambiguous is ambiguous


def test_a_socket_is_readable_when_data_or_the_end_is_waiting() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert not socket_readable(ours)
        theirs.sendall(b"x")
        assert socket_readable(ours)
        ours.recv(1)
        assert not socket_readable(ours)
        theirs.close()
        assert socket_readable(ours)  # the end of the stream: the pool must drop the connection
    assert socket_readable(None)
    closed = socket.socket()
    closed.close()
    assert socket_readable(closed)


def test_the_transport_is_aiohttps_unless_proxies_are_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    transport = bank_transport(httpx.Limits(max_connections=2))
    assert isinstance(transport, AiohttpTransport)
    assert transport.ssl_context.verify_mode.name == "CERT_REQUIRED" and transport.ssl_context.check_hostname
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert bank_transport(httpx.Limits(max_connections=2)) is None  # httpx's default then honours the proxy


async def test_the_bank_clients_jar_stays_empty() -> None:
    with pytest.raises(TypeError, match="no cookies"):
        CookielessClient(cookies={"affinity": "node-7"})
    async with CookielessClient() as client:
        for put in (
            lambda: client.cookies.set("affinity", "node-7"),
            lambda: client.cookies.update({"affinity": "node-7"}),
            lambda: client.cookies.__setitem__("affinity", "node-7"),
        ):
            with pytest.raises(TypeError, match="no cookies"):
                put()
        with pytest.raises(TypeError, match="no cookies"):
            client.cookies = {"affinity": "node-7"}
        assert len(client.cookies) == 0
