"""Client CPU per bank call, for each HTTP transport the bank client could use, side by side in one run.

A server in its own process answers every request after 20 ms (like the month-end run's injected latency);
32 tasks share one `httpx.AsyncClient` with a 16-connection pool, as the engine's workers do. For each transport,
in interleaved rounds, it prints wall time and this process's CPU time per request (`time.process_time`):

- `httpx default`: httpx's own transport (httpcore's pool on anyio);
- `LeanPool`: the bank transport before the aiohttp one (httpcore's pool, its full sweep at most once a second,
  the idle check one `poll()`); its code is kept here, as the "before" of the comparison;
- `bank transport`: `processor.bank.transport.bank_transport`, the one in use (httpx over aiohttp,
  `AiohttpTransport`);
- `httpx-aiohttp`: the `httpx-aiohttp` package's transport, when it is installed (not a dependency: its error
  mapping takes a connection lost after sending for "not sent");
- `bank client`: the bank transport under the bank client's `CookielessClient` (httpx's client without its cookie
  jar; every other line uses `httpx.AsyncClient`). The server sets a cookie on every answer, as a load balancer
  may.

Then the cost of httpcore's `current_async_library()` (called on every request) with `sniffio` importable and
with it hidden (each call then retries the import and walks `sys.path`), in one process.
Nothing is asserted.

    python benchmarks/bank_pool.py [--requests 3200] [--rounds 2]
"""

# The `timeout` parameters of the old transport's classes are httpcore's network interface.
# ruff: noqa: ASYNC109

from __future__ import annotations

import argparse
import asyncio
import importlib.abc
import importlib.machinery
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import httpcore
import httpx

from processor.bank.transport import CookielessClient, bank_transport, socket_readable

SERVER = """
import asyncio, sys, uvicorn

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await asyncio.sleep(0.02)
    headers = [(b"content-type", b"application/json"), (b"set-cookie", b"affinity=node-7; Path=/")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b'{"ok": true}'})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", loop="asyncio")
"""

TASKS = 32
LIMITS = httpx.Limits(max_connections=16, max_keepalive_connections=16)  # the bank client's default


@contextmanager
def loopback_server() -> Iterator[tuple[str, int]]:
    """`SERVER` in its own process: (its base URL, its pid), stopped on leaving; RuntimeError when it is not
    listening within 30 s."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the loopback server did not listen on port {port}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", server.pid
    finally:
        server.terminate()
        server.wait(10)


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the bank transport before the aiohttp one (processor/bank/transport.py until issue 22's second round) ------

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


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


def lean_pool() -> httpx.AsyncBaseTransport:
    """httpx's transport, its pool a `LeanPool` on `CheapIdleCheck` (what `bank_transport` returned before)."""
    transport = httpx.AsyncHTTPTransport(limits=LIMITS)
    transport._pool._network_backend = CheapIdleCheck(transport._pool._network_backend)
    transport._pool.__class__ = LeanPool
    return transport


def aiohttp_transport() -> httpx.AsyncBaseTransport | None:
    """httpx-aiohttp's transport, or None when it is not installed."""
    try:
        from httpx_aiohttp import AiohttpTransport  # type: ignore[import-not-found]
    except ImportError:
        return None
    return AiohttpTransport(limits=LIMITS)  # type: ignore[no-any-return]


TRANSPORTS: dict[str, tuple[Callable[[], httpx.AsyncBaseTransport | None], type[httpx.AsyncClient]]] = {
    "httpx default": (lambda: httpx.AsyncHTTPTransport(limits=LIMITS), httpx.AsyncClient),
    "LeanPool": (lean_pool, httpx.AsyncClient),
    "bank transport": (lambda: bank_transport(LIMITS), httpx.AsyncClient),
    "httpx-aiohttp": (aiohttp_transport, httpx.AsyncClient),
    "bank client": (lambda: bank_transport(LIMITS), CookielessClient),
}


async def measure(
    url: str, transport: httpx.AsyncBaseTransport, requests: int, client_class: type[httpx.AsyncClient]
) -> tuple[float, float]:
    """(wall s, CPU s) for `requests` GETs by 32 tasks through one client of `client_class` on `transport`."""
    async with client_class(transport=transport, limits=LIMITS) as client:

        async def worker(count: int) -> None:
            for _ in range(count):
                (await client.get(url)).raise_for_status()

        await asyncio.gather(*(worker(10) for _ in range(TASKS)))  # open the pool first
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(requests // TASKS) for _ in range(TASKS)))
        return time.perf_counter() - wall, time.process_time() - cpu


class _HideSniffio(importlib.abc.MetaPathFinder):
    """Makes `import sniffio` fail the way it does where it is not installed: after looking on the whole path."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        if name == "sniffio":
            importlib.machinery.PathFinder.find_spec("sniffio_is_not_installed", None)  # the same walk, no hit
            raise ModuleNotFoundError("No module named 'sniffio'", name=name)
        return None


def async_library_cost(calls: int = 20_000) -> None:
    """Microseconds per `httpcore._synchronization.current_async_library()` inside a running loop, with sniffio
    importable and hidden."""
    from httpcore import _synchronization

    async def run() -> float:
        started = time.process_time()
        for _ in range(calls):
            _synchronization.current_async_library()
        return time.process_time() - started

    with_sniffio = asyncio.run(run())
    saved = sys.modules.pop("sniffio", None)
    finder = _HideSniffio()
    sys.meta_path.insert(0, finder)
    try:
        without = asyncio.run(run())
    finally:
        sys.meta_path.remove(finder)
        if saved is not None:
            sys.modules["sniffio"] = saved
    print(
        f"httpcore current_async_library(): {with_sniffio / calls * 1e6:.2f} us per call with sniffio installed, "
        f"{without / calls * 1e6:.2f} us without it (a failed import per call)"
    )


def main() -> int:
    """Run every transport `--rounds` times each, interleaved, and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=3200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"httpx {httpx.__version__}, httpcore {httpcore.__version__}; {TASKS} tasks, {LIMITS}")
    with loopback_server() as (base, _):
        requests = args.requests // TASKS * TASKS
        for _ in range(args.rounds):
            for name, (make, client_class) in TRANSPORTS.items():
                transport = make()
                if transport is None:
                    print(f"{name:17s} not installed")
                    continue
                wall, cpu = asyncio.run(measure(f"{base}/", transport, requests, client_class))
                print(
                    f"{name:17s} {requests} requests in {wall:5.2f} s, client CPU {cpu:5.2f} s"
                    f" = {cpu / requests * 1000:.2f} ms per request"
                )
    async_library_cost()
    return 0


if __name__ == "__main__":
    sys.exit(main())
