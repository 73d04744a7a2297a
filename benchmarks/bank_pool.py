"""Client CPU per bank call: httpx's default transport against the bank client's (`processor.bank.transport`).

A server in its own process answers every request after 20 ms (like the month-end run's injected latency);
32 tasks share one client with a 16-connection pool, as the engine's workers do. Prints, for each transport,
wall time and this process's CPU time per request (`time.process_time`). Nothing is asserted.

    python benchmarks/bank_pool.py [--requests 3200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time

import httpx

from processor.bank.transport import bank_transport

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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def measure(url: str, transport: httpx.AsyncHTTPTransport | None, requests: int) -> tuple[float, float]:
    async with httpx.AsyncClient(transport=transport, limits=LIMITS) as client:

        async def worker(count: int) -> None:
            for _ in range(count):
                (await client.get(url)).raise_for_status()

        await asyncio.gather(*(worker(10) for _ in range(TASKS)))  # open the pool first
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(requests // TASKS) for _ in range(TASKS)))
        return time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    """Run both transports `--rounds` times each, alternating, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
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
            for name, transport in (("httpx default", None), ("bank transport", bank_transport(LIMITS))):
                wall, cpu = asyncio.run(measure(f"http://127.0.0.1:{port}/", transport, requests))
                print(
                    f"{name:15s} {requests} requests in {wall:5.2f} s, client CPU {cpu:5.2f} s"
                    f" = {cpu / requests * 1000:.2f} ms per request"
                )
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
