"""The bank client's HTTP transport: httpx's own, with a connection pool that does not look at every connection on
every request.

On every request start and end httpcore's pool (`AsyncConnectionPool._assign_requests_to_connections`) looks at
each pooled connection: whether it is closed, whether it expired (for an idle one: is its socket readable, the
server having closed it), and, for each idle one, counts the idle ones again (quadratic). With 16 connections and
thousands of bank calls that was 2 million `is_idle` calls and 100,000 `poll()` system calls per 300 month-end
batches, each `poll()` releasing and taking back the GIL from the processor's other threads (docs/benchmarks.md).

`LeanPool` keeps httpcore's pool and its whole sweep, but runs that sweep at most once per `SWEEP_INTERVAL`; in
between, a request is given the first idle connection to its origin whose socket is not readable (one `poll()` for
the connection handed out, so a connection the server closed is still never reused), else a new one. The idle
check itself is `CheapIdleCheck`: one `poll()` of the socket found when the connection opened, where httpcore's
anyio stream built anyio's whole attribute dictionary (a `getpeername()` included) for every question.
"""

# The `timeout` parameters are httpcore's network interface, passed through unchanged.
# ruff: noqa: ASYNC109

from __future__ import annotations

import select
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


def socket_readable(sock: socket.socket | None) -> bool:
    """Whether a read would not block: data, or the end of the stream. A missing or closed socket counts as
    readable, so the pool drops the connection (as httpcore does)."""
    fileno = -1 if sock is None else sock.fileno()
    if fileno < 0:
        return True
    poller = select.poll()
    poller.register(fileno, select.POLLIN)
    return bool(poller.poll(0))


class _Stream(httpcore.AsyncNetworkStream):
    """A network stream that answers `is_readable` from its socket; everything else goes to the inner one."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return socket_readable(self._socket)
        return self._inner.get_extra_info(info)


class CheapIdleCheck(httpcore.AsyncNetworkBackend):
    """A network backend (httpcore's anyio one by default) whose streams answer `is_readable` cheaply."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[SocketOption] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


SWEEP_INTERVAL = 1.0  # seconds between two full sweeps of httpcore's pool (expired and surplus idle connections)


class LeanPool(httpcore.AsyncConnectionPool):
    """httpcore's pool, its full sweep at most once per `SWEEP_INTERVAL` and a cheap assignment in between."""

    _next_sweep = 0.0

    def _assign_requests_to_connections(self) -> list[httpcore.AsyncConnectionInterface]:
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_INTERVAL
            return super()._assign_requests_to_connections()
        closing: list[httpcore.AsyncConnectionInterface] = []
        self._connections[:] = [c for c in self._connections if not c.is_closed()]
        for pool_request in self._requests:
            if pool_request.is_queued():
                connection = self._connection_for(pool_request.request.url.origin, closing)
                if connection is not None:
                    pool_request.assign_to_connection(connection)
        return closing

    def _connection_for(
        self, origin: httpcore.Origin, closing: list[httpcore.AsyncConnectionInterface]
    ) -> httpcore.AsyncConnectionInterface | None:
        """httpcore's three cases in its order: an available connection to the origin (checked for expiry, which
        polls its socket, only now), a new one below `max_connections`, or a new one in place of an idle one."""
        for connection in list(self._connections):
            if connection.can_handle_request(origin) and connection.is_available():
                if not connection.has_expired():
                    return connection
                self._connections.remove(connection)
                closing.append(connection)
        if len(self._connections) >= self._max_connections:
            idle = next((c for c in self._connections if c.is_idle()), None)
            if idle is None:
                return None  # stays queued until a connection is released
            self._connections.remove(idle)
            closing.append(idle)
        connection = self.create_connection(origin)
        self._connections.append(connection)
        return connection


def bank_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport | None:
    """httpx's transport with `limits`, its connection pool a `LeanPool` on `CheapIdleCheck`; None (use httpx's
    default, which honours them) when the environment names proxies.

    httpx has no option for the pool's class or network backend, so both are set on the pool httpx built (the
    class changed in place keeps every setting httpx gave it); should a later httpx or httpcore not build that
    pool, the transport is returned unchanged (correct, only slower)."""
    if urllib.request.getproxies():
        return None
    transport = httpx.AsyncHTTPTransport(limits=limits)
    pool = getattr(transport, "_pool", None)
    if type(pool) is httpcore.AsyncConnectionPool and isinstance(
        getattr(pool, "_network_backend", None), httpcore.AsyncNetworkBackend
    ):
        pool._network_backend = CheapIdleCheck(pool._network_backend)
        pool.__class__ = LeanPool
    return transport
