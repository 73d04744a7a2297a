"""The bank client's HTTP transport: httpx's own, with a cheaper check of idle pooled connections.

On every request start and end httpcore's pool looks at each pooled connection; for an idle one it asks the
network stream whether its socket is readable (the server closed it). httpcore's anyio stream answers through
anyio's typed attributes, which build the stream's whole attribute dictionary (a `getpeername()` system call
included) on every question. With 16 to 32 connections and thousands of bank calls that was a quarter of the
processor's busy time at month end (docs/benchmarks.md). `CheapIdleCheck` wraps the backend's streams so the
question is answered by one `poll()` on the socket, found once when the connection opens.
"""

# The `timeout` parameters are httpcore's network interface, passed through unchanged.
# ruff: noqa: ASYNC109

from __future__ import annotations

import select
import socket
import ssl
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


def bank_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport | None:
    """httpx's transport with `limits`, its connection pool on `CheapIdleCheck`; None (use httpx's default,
    which honours them) when the environment names proxies.

    httpx has no option for the pool's network backend, so it is set on the pool httpx built; should a later
    httpx or httpcore not have that pool, the transport is returned unchanged (correct, only slower)."""
    if urllib.request.getproxies():
        return None
    transport = httpx.AsyncHTTPTransport(limits=limits)
    pool = getattr(transport, "_pool", None)
    if isinstance(pool, httpcore.AsyncConnectionPool) and isinstance(
        getattr(pool, "_network_backend", None), httpcore.AsyncNetworkBackend
    ):
        pool._network_backend = CheapIdleCheck(pool._network_backend)
    return transport
