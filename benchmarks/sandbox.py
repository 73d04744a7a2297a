"""Sandbox bank benchmark: requests/s for consent creation (A1) and token issue, one server worker.

Starts a real `dispersion sandbox` (one uvicorn worker, in-memory store) on a free loopback port with a
client written by `dispersion sandbox init`, then drives it with a lean load generator: raw HTTP/1.1 over
keep-alive asyncio connections with pre-built requests, so the client spends microseconds per request and
the server is what gets measured. Phases, each bounded by a request count and a time cap:

1. A1 `POST /file-payment-consents` with a small valid file payload (3 transfers; FileHash is
   base64(SHA-256(RFC 8785 JSON)) of the payload with empty references, DESIGN.md's reading, computed
   with the `rfc8785` package; amounts are whole numbers so no float is ever involved);
2. client-credentials token with `Authorization: Basic`;
3. client-credentials token with private_key_jwt (a PS256 assertion per request, each with its own jti:
   they are single use). Assertions are signed before the phase, in parallel, so signing cost (about
   1 ms each) is not charged to the server.

CPU split (2 cores): the server process is pinned to one core, the load generator to the other (when the
machine has at least two); the printout shows each side's CPU use during the phase, so a server at ~100 %
of its core and a client well below 100 % means the server was the limit. Every response is checked
(201 with a ConsentId, 200 with an access token); errors are counted and printed.

    python benchmarks/sandbox.py [--requests N] [--jwt-requests N] [--connections C] [--max-seconds S]

Target (issue 2): at least 500 consent creations/s. The script prints figures; it asserts nothing on time.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from month_end import process_cpu_seconds

from processor.devtools import processes

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
CONSENTS_PATH = "/open-banking/v3.1/pisp/file-payment-consents"
FILE_TYPE = "UK.OBIE.PaymentInitiation.4.0"
TARGET_CONSENTS_PER_SECOND = 500


# --- the sandbox process ---------------------------------------------------------------------------------


@dataclass
class Sandbox:
    """A running `dispersion sandbox` and its client."""

    base_url: str
    host: str
    port: int
    process: subprocess.Popen[bytes]
    client: dict[str, Any]
    signing_key_pem: bytes


@contextmanager
def running_sandbox(directory: Path) -> Iterator[Sandbox]:
    """`dispersion sandbox init` then `dispersion sandbox` on a held port; stopped (by its pid) on exit."""
    cli = [sys.executable, "-m", "processor.cli", "sandbox"]
    with processes.listening_socket() as sock:
        port = processes.port_of(sock)
        base_url = f"http://127.0.0.1:{port}"
        subprocess.run([*cli, "init", str(directory), "--sandbox-url", base_url], check=True, capture_output=True)
        argv = [*cli, "--clients", str(directory / "clients.json"), "--listen-fd", str(sock.fileno())]
        child = processes.spawn("sandbox", argv, directory / "sandbox.log", pass_fds=(sock.fileno(),))
    try:
        processes.eventually(
            lambda: processes.answers(f"{base_url}/openapi.json"), what="sandbox answer", timeout=30, child=child
        )
        client = json.loads((directory / "clients.json").read_text())["clients"][0]
        yield Sandbox(base_url, "127.0.0.1", port, child.process, client, (directory / "signing-key.pem").read_bytes())
    finally:
        child.stop(timeout=10)


def pin(pid: int, cpu: int) -> bool:
    """Pin a process to one CPU (Linux); False when not possible."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    try:
        os.sched_setaffinity(pid, {cpu})
    except OSError:
        return False
    return True


# --- request bodies --------------------------------------------------------------------------------------


def file_payload() -> dict[str, Any]:
    """A small valid file payload (spec, "File payload"), references empty as at consent time."""
    amounts = (1500, 2250, 800)
    return {
        "data": {
            "transaction": [
                {
                    "originAccount": {"accountNumber": "100200300", "accountType": "MONETARY", "currency": "GTQ"},
                    "destinationAccount": {
                        "accountNumber": f"2001003{index:02d}",
                        "accountType": "SAVINGS",
                        "currency": "GTQ",
                        "email": f"employee{index}@example.com",
                    },
                    "transferInfo": {
                        "transactionType": "THIRD_PROVIDER",
                        "debitType": "D",
                        "transactionAmount": amount,
                        "executionType": "ONLINE",
                        "concept": "Payroll November",
                        "reference": "",
                    },
                }
                for index, amount in enumerate(amounts)
            ]
        }
    }


def consent_body() -> bytes:
    """The A1 body: metadata plus the payload, FileHash = base64(SHA-256(JCS(payload)))."""
    payload = file_payload()
    transactions = payload["data"]["transaction"]
    initiation = {
        "SupplementaryData": payload,
        "FileType": FILE_TYPE,
        "FileHash": base64.b64encode(hashlib.sha256(rfc8785.dumps(payload)).digest()).decode(),
        "FileReference": "BENCH-PAYROLL",
        "NumberOfTransactions": str(len(transactions)),
        "ControlSum": sum(tx["transferInfo"]["transactionAmount"] for tx in transactions),
    }
    return json.dumps({"Data": {"Initiation": initiation}}, separators=(",", ":")).encode()


def basic_credential(client: dict[str, Any]) -> str:
    """base64(client_id:client_secret)."""
    return base64.b64encode(f"{client['client_id']}:{client['client_secret']}".encode()).decode()


def sign_assertions(args: tuple[bytes, str, str, str, int]) -> list[str]:
    """`count` client assertions with distinct jti (runs in a worker process)."""
    key_pem, kid, client_id, audience, count = args
    # Parse the PEM once: loading (and checking) an RSA key costs far more than one signature.
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("the client's signing key must be an RSA key (PS256)")
    now = int(time.time())
    claims = {"iss": client_id, "sub": client_id, "aud": audience, "iat": now, "exp": now + 600}
    return [
        jwt.encode({**claims, "jti": str(uuid.uuid4())}, key, algorithm="PS256", headers={"kid": kid})
        for _ in range(count)
    ]


def presign(sandbox: Sandbox, count: int, workers: int) -> list[str]:
    """Sign `count` assertions in `workers` processes."""
    client = sandbox.client
    chunk = -(-count // workers)
    jobs = [
        (sandbox.signing_key_pem, client["kid"], client["client_id"], sandbox.base_url, min(chunk, count - i * chunk))
        for i in range(workers)
        if count - i * chunk > 0
    ]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return [assertion for batch in pool.map(sign_assertions, jobs) for assertion in batch]


# --- the load generator ----------------------------------------------------------------------------------

RequestFactory = Callable[[], bytes]
Validator = Callable[[int, bytes], bool]


def http_request(host: str, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """Raw HTTP/1.1 request bytes (keep-alive)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@dataclass
class PhaseResult:
    """What one phase measured."""

    name: str
    completed: int = 0
    errors: int = 0
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_cpu: float | None = None
    client_cpu: float = 0.0
    first_error: str | None = None

    @property
    def rate(self) -> float:
        """Successful requests per second."""
        return self.completed / self.elapsed if self.elapsed > 0 else 0.0

    def percentile(self, q: float) -> float:
        """Latency percentile in milliseconds."""
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = await reader.readexactly(length) if length else b""
    return status, body


async def run_phase(
    name: str,
    sandbox: Sandbox,
    make_request: RequestFactory,
    valid: Validator,
    total: int,
    connections: int,
    max_seconds: float,
) -> PhaseResult:
    """Send `total` requests over `connections` keep-alive connections, stopping at `max_seconds`."""
    result = PhaseResult(name)
    remaining = total
    deadline = 0.0

    async def worker() -> None:
        nonlocal remaining
        reader, writer = await asyncio.open_connection(sandbox.host, sandbox.port)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while remaining > 0 and time.perf_counter() < deadline:
                remaining -= 1
                raw = make_request()
                started = time.perf_counter()
                writer.write(raw)
                status, body = await _read_response(reader)
                result.latencies.append(time.perf_counter() - started)
                if valid(status, body):
                    result.completed += 1
                else:
                    result.errors += 1
                    if result.first_error is None:
                        result.first_error = f"{status} {body[:200].decode(errors='replace')}"
        finally:
            writer.close()

    server_before = process_cpu_seconds(sandbox.process.pid)
    client_before = time.process_time()
    started = time.perf_counter()
    deadline = started + max_seconds
    await asyncio.gather(*(worker() for _ in range(connections)))
    result.elapsed = time.perf_counter() - started
    result.client_cpu = (time.process_time() - client_before) / result.elapsed
    server_after = process_cpu_seconds(sandbox.process.pid)
    if server_before is not None and server_after is not None:
        result.server_cpu = (server_after - server_before) / result.elapsed
    return result


def _created(status: int, body: bytes) -> bool:
    return status == 201 and b'"ConsentId":"pay-fi-' in body


def _token(status: int, body: bytes) -> bool:
    return status == 200 and b'"access_token"' in body


def report(result: PhaseResult) -> None:
    """Print one phase's figures."""
    server = f"{result.server_cpu * 100:5.0f} %" if result.server_cpu is not None else "    n/a"
    print(
        f"{result.name:<44} {result.rate:9.0f} req/s  ok={result.completed:<6} errors={result.errors:<4}"
        f" p50={result.percentile(0.5):6.1f} ms  p99={result.percentile(0.99):6.1f} ms"
        f"  server CPU {server}  client CPU {result.client_cpu * 100:4.0f} %"
    )
    if result.first_error:
        print(f"    first error: {result.first_error}")


# --- main ------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--requests", type=int, default=10000, help="requests per phase (A1, Basic token)")
    p.add_argument("--jwt-requests", type=int, default=5000, help="requests of the private_key_jwt phase")
    p.add_argument("--warmup", type=int, default=300, help="untimed requests before each phase")
    p.add_argument("--connections", type=int, default=32, help="concurrent keep-alive connections")
    p.add_argument("--max-seconds", type=float, default=20.0, help="time cap per phase")
    return p


def client_credentials_token(sandbox: Sandbox) -> str:
    """A client-credentials access token (Basic), for the consent phase."""
    r = httpx.post(
        f"{sandbox.base_url}/token",
        data={"grand_type": "client_credentials", "scope": "payments openid"},
        headers={"Authorization": f"Basic {basic_credential(sandbox.client)}"},
    )
    r.raise_for_status()
    return str(r.json()["access_token"])


async def benchmark(sandbox: Sandbox, args: argparse.Namespace, token: str, assertions: list[str]) -> list[PhaseResult]:
    """Run the three phases against a running sandbox."""
    host = f"{sandbox.host}:{sandbox.port}"
    basic = basic_credential(sandbox.client)

    body = consent_body()
    consent_headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def consent_request() -> bytes:
        headers = {**consent_headers, "x-fapi-interaction-id": str(uuid.uuid4())}
        return http_request(host, "POST", CONSENTS_PATH, headers, body)

    form_headers = {"Content-Type": "application/x-www-form-urlencoded"}
    basic_raw = http_request(
        host,
        "POST",
        "/token",
        {**form_headers, "Authorization": f"Basic {basic}"},
        urlencode({"grand_type": "client_credentials", "scope": "payments openid"}).encode(),
    )
    pending = iter(assertions)

    def jwt_request() -> bytes:
        form = {
            "grand_type": "client_credentials",
            "scope": "payments openid",
            "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": next(pending),
        }
        return http_request(host, "POST", "/token", form_headers, urlencode(form).encode())

    phases: list[tuple[str, RequestFactory, Validator, int]] = [
        ("A1 consent creation (file-payment-consents)", consent_request, _created, args.requests),
        ("token, client credentials, Basic", lambda: basic_raw, _token, args.requests),
        ("token, client credentials, private_key_jwt", jwt_request, _token, args.jwt_requests),
    ]
    results = []
    for name, factory, valid, total in phases:
        warmup = min(args.warmup, total // 10) if factory is jwt_request else args.warmup
        await run_phase("warm-up", sandbox, factory, valid, warmup, min(args.connections, 8), args.max_seconds)
        timed = total - warmup if factory is jwt_request else total
        results.append(await run_phase(name, sandbox, factory, valid, timed, args.connections, args.max_seconds))
        report(results[-1])
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    args = build_parser().parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp, running_sandbox(Path(tmp)) as sandbox:
        print(f"sandbox: {sandbox.base_url}, one uvicorn worker (pid {sandbox.process.pid}), in-memory store")
        print(f"signing {args.jwt_requests} client assertions (PS256) before the phases ...", flush=True)
        assertions = presign(sandbox, args.jwt_requests, max(1, min(len(cpus) or 1, 4)))
        if len(cpus) >= 2 and pin(sandbox.process.pid, cpus[0]) and pin(0, cpus[1]):
            split = f"server pinned to CPU {cpus[0]}, load generator (this process) to CPU {cpus[1]}"
        else:
            split = "not pinned (fewer than 2 CPUs available or no affinity support)"
        print(f"CPU split: {split}; {args.connections} keep-alive connections, raw HTTP/1.1 client")
        print(f"per phase: at most {args.requests} requests (private_key_jwt: {args.jwt_requests}), at most"
              f" {args.max_seconds:g} s, after {args.warmup} untimed warm-up requests")  # fmt: skip
        print()
        results = asyncio.run(benchmark(sandbox, args, client_credentials_token(sandbox), assertions))
    consent_rate = results[0].rate
    verdict = "met" if consent_rate >= TARGET_CONSENTS_PER_SECOND else "NOT met"
    print()
    print(f"target: >= {TARGET_CONSENTS_PER_SECOND} consent creations/s on one worker: {verdict}"
          f" ({consent_rate:.0f}/s)")  # fmt: skip
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
