"""Client CPU per bank call, for each HTTP transport the bank client could use, side by side in one run.

A server in its own process answers every request after 20 ms (like the month-end run's injected latency);
32 tasks share one `httpx.AsyncClient` with a 16-connection pool, as the engine's workers do. For each transport,
in interleaved rounds, it prints wall time and this process's CPU time per request (`time.process_time`):

- `httpx default`: httpx's own transport (httpcore's pool on anyio);
- `cheap idle check`: the bank transport before issue 22 (httpcore's pool, idle check one `poll()`);
- `bank transport`: `processor.bank.transport.bank_transport`, the one in use (`LeanPool`, same idle check);
- `httpx-aiohttp`: httpx over aiohttp's connector (`httpx_aiohttp.AiohttpTransport`), when it is installed.

Then the cost of httpcore's `current_async_library()` (called on every request) with `sniffio` importable and
with it hidden (each call then retries the import and walks `sys.path`), in one process.
Nothing is asserted.

    python benchmarks/bank_pool.py [--requests 3200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.abc
import importlib.machinery
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType

import httpcore
import httpx

from processor.bank.transport import CheapIdleCheck, bank_transport

SERVER = """
import asyncio, sys, uvicorn

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await asyncio.sleep(0.02)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"ok": true}'})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

TASKS = 32
LIMITS = httpx.Limits(max_connections=16, max_keepalive_connections=16)  # the bank client's default


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cheap_idle_check_only() -> httpx.AsyncBaseTransport:
    """The bank transport as it was before `LeanPool`: httpcore's pool, its backend `CheapIdleCheck`."""
    transport = httpx.AsyncHTTPTransport(limits=LIMITS)
    transport._pool._network_backend = CheapIdleCheck(transport._pool._network_backend)
    return transport


def aiohttp_transport() -> httpx.AsyncBaseTransport | None:
    """httpx-aiohttp's transport, or None when it is not installed."""
    try:
        from httpx_aiohttp import AiohttpTransport  # type: ignore[import-not-found]
    except ImportError:
        return None
    return AiohttpTransport(limits=LIMITS)  # type: ignore[no-any-return]


TRANSPORTS: dict[str, Callable[[], httpx.AsyncBaseTransport | None]] = {
    "httpx default": lambda: httpx.AsyncHTTPTransport(limits=LIMITS),
    "cheap idle check": cheap_idle_check_only,
    "bank transport": lambda: bank_transport(LIMITS),
    "httpx-aiohttp": aiohttp_transport,
}


async def measure(url: str, transport: httpx.AsyncBaseTransport, requests: int) -> tuple[float, float]:
    """(wall s, CPU s) for `requests` GETs by 32 tasks through one client on `transport`."""
    async with httpx.AsyncClient(transport=transport, limits=LIMITS) as client:

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
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        requests = args.requests // TASKS * TASKS
        for _ in range(args.rounds):
            for name, make in TRANSPORTS.items():
                transport = make()
                if transport is None:
                    print(f"{name:17s} not installed")
                    continue
                wall, cpu = asyncio.run(measure(f"http://127.0.0.1:{port}/", transport, requests))
                print(
                    f"{name:17s} {requests} requests in {wall:5.2f} s, client CPU {cpu:5.2f} s"
                    f" = {cpu / requests * 1000:.2f} ms per request"
                )
    finally:
        server.terminate()
        server.wait(10)
    async_library_cost()
    return 0


if __name__ == "__main__":
    sys.exit(main())
