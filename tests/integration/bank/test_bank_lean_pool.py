"""The bank client's HTTP transport (`processor.bank.transport`) against a real server on loopback: the lean pool
reuses its connections, queues requests beyond `max_connections`, and never hands out a connection the server
has closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from processor.bank import transport as bank_transport_module
from processor.bank.transport import LeanPool, bank_transport


@dataclass
class Server:
    """A keep-alive HTTP/1.1 server answering `ok` after `delay`; with `close_idle_after`, it closes each
    connection that long after answering (without saying so, as a server's keep-alive timeout does)."""

    delay: float = 0.0
    close_idle_after: float | None = None
    connections: int = 0
    requests: int = 0
    port: int = 0
    _server: asyncio.Server | None = field(default=None, repr=False)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")  # GETs only: no body
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                self.requests += 1
                await asyncio.sleep(self.delay)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
                if self.close_idle_after is not None:
                    await asyncio.sleep(self.close_idle_after)
                    return
        finally:
            writer.close()

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
    transport = bank_transport(limits)
    assert transport is not None and type(transport._pool) is LeanPool  # not the slower fallback
    async with httpx.AsyncClient(transport=transport, limits=limits) as http:
        yield http


async def test_requests_beyond_the_pool_wait_and_reuse_its_connections(client: httpx.AsyncClient) -> None:
    async with Server(delay=0.01) as server:

        async def task() -> None:
            for _ in range(5):
                assert (await client.get(server.url)).text == "ok"

        await asyncio.gather(*(task() for _ in range(12)))
        assert server.requests == 60
        assert server.connections <= 4


async def test_a_connection_the_server_closed_is_not_handed_out_between_sweeps(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Server(close_idle_after=0.05) as server:
        assert (await client.get(server.url)).text == "ok"  # the first request sweeps; the next sweep is far off
        monkeypatch.setattr(bank_transport_module, "SWEEP_INTERVAL", 3600.0)
        for _ in range(3):
            await asyncio.sleep(0.2)  # the server has closed the idle connection by now
            assert (await client.get(server.url)).text == "ok"
        assert server.connections == 4
