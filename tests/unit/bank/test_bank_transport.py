"""The bank client's transport: idle pooled connections are checked with one poll of their socket, and a
connection the server closed while idle is never reused (real sockets on loopback)."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from processor.bank.transport import CheapIdleCheck, bank_transport, socket_readable


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


async def _server(close_after_first: bool) -> tuple[asyncio.AbstractServer, list[int]]:
    """An HTTP/1.1 server answering 200 with keep-alive; optionally closing each connection after its first
    answer, while the client holds it idle in its pool. Counts connections."""
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"GET ")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
                await writer.drain()
                if close_after_first:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, connections


@pytest.mark.parametrize("close_after_first", [False, True])
async def test_pooled_connections_are_reused_until_the_server_closes_them(close_after_first: bool) -> None:
    server, connections = await _server(close_after_first)
    port = server.sockets[0].getsockname()[1]
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    transport = bank_transport(limits)
    assert transport is not None
    async with server, httpx.AsyncClient(transport=transport) as client:
        for _ in range(3):
            answer = await client.get(f"http://127.0.0.1:{port}/")
            assert answer.text == "ok"
            await asyncio.sleep(0.05)  # the server's close (if any) reaches our socket while it is idle
    assert len(connections) == (3 if close_after_first else 1)


def test_the_transport_uses_the_cheap_check_unless_proxies_are_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    transport = bank_transport(httpx.Limits(max_connections=2))
    assert transport is not None
    assert isinstance(transport._pool._network_backend, CheapIdleCheck)  # the wiring this module exists for
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert bank_transport(httpx.Limits(max_connections=2)) is None  # httpx's default then honours the proxy
