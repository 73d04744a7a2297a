"""Builders for the bank-client tests: keys, integration configs, a sandbox bank, test payloads, the consent page.

The processor package never imports the sandbox; these tests do, to run the real client against the real
sandbox app (in-process over httpx.ASGITransport, or as a uvicorn server on loopback).
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import socket
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from processor.bank.integration import Integration
from processor.bank.transport import bank_transport
from processor.cli.config import load_config
from processor.devtools.approver import decision_post
from processor.devtools.processes import eventually, port_of

BASE = "http://bank.test"
REDIRECT_URI = "http://127.0.0.1:8600/callback"
FINANCIAL_ID = "0015800001041RHAAY"


@dataclass(frozen=True)
class KeyPair:
    """An RSA key pair as PEM text."""

    private_pem: str
    public_pem: str


@functools.cache
def key_pair(name: str = "default") -> KeyPair:
    """A 2048-bit RSA pair, generated once per name per test session."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return KeyPair(private, public)


def integration_table(base: str = BASE, **overrides: Any) -> dict[str, Any]:
    """An `[integrations.NAME]` table as `dispersion sandbox init` writes it (PEM inline, not a path)."""
    table: dict[str, Any] = {
        "issuer": base,
        "resource_server": base,
        "client_id": "dispersion-test",
        "client_secret": "s3cret-value-for-tests",
        "redirect_uri": REDIRECT_URI,
        "kid": "kid-1",
        "signing_key": key_pair().private_pem,
        "financial_id": FINANCIAL_ID,
        "customer_ip": "127.0.0.1",
        "tpp_name": "Dispersion",
        "token_auth_method": "private_key_jwt",
        "grant_parameter": "grand_type",
        "assertion_signing": "local",
    }
    table.update(overrides)
    return {k: v for k, v in table.items() if v is not None}


def make_integration(base: str = BASE, **overrides: Any) -> Integration:
    """A validated Integration named `sandbox` (the configuration's own model)."""
    return Integration(name="sandbox", **integration_table(base, **overrides))


def toml(value: Any) -> str:
    """A value in TOML (a JSON string or number is one; a table is written inline)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(key)} = {toml(item)}" for key, item in value.items()) + " }"
    return json.dumps(value)


def load(document: dict[str, Any], environ: dict[str, str] | None = None, folder: Path | None = None) -> Any:
    """`document` written as a configuration file (in `folder`, else a fresh one) and loaded."""
    path = Path(folder or tempfile.mkdtemp()) / "dispersion.toml"
    path.write_text("".join(f"{json.dumps(name)} = {toml(table)}\n" for name, table in document.items()))
    return load_config(path, environ=environ or {})


# -- the sandbox ---------------------------------------------------------------------------------------------


@dataclass
class SandboxRig:
    """A sandbox bank in this process, its app, its manual clock."""

    bank: Any
    app: Any
    clock: Any
    extra: dict[str, Any] = field(default_factory=dict)

    def transport(self) -> httpx.ASGITransport:
        """An in-process transport to the app."""
        return httpx.ASGITransport(app=self.app)

    def count(self, kind: str) -> int:
        """How many documents of a kind the bank holds (consents, payments, tokens...)."""
        return int(self.bank.store.count(kind))

    def set_faults(self, rules: list[dict[str, Any]]) -> None:
        """Replace the bank's fault plan (format: docs/sandbox-faults.md)."""
        from sandbox.faults import FaultPlan

        self.bank.faults = FaultPlan.from_json({"seed": 1, "rules": rules})


def sandbox_rig(base: str = BASE, *, client_id: str = "dispersion-test", **config: Any) -> SandboxRig:
    """A sandbox bank on a ManualClock with our test client registered."""
    from manual_clock import ManualClock

    from sandbox.app import create_app
    from sandbox.clients import Client, ClientRegistry
    from sandbox.config import SandboxConfig
    from sandbox.state import Bank

    clock = ManualClock()
    client = Client(
        client_id=client_id,
        client_secret="s3cret-value-for-tests",
        redirect_uris=(REDIRECT_URI,),
        kid="kid-1",
        public_key_pem=key_pair().public_pem,
    )
    bank = Bank(
        SandboxConfig(base_url=base, financial_id=FINANCIAL_ID, **config),
        ClientRegistry({client_id: client}),
        clock=clock,
    )
    return SandboxRig(bank, create_app(bank), clock)


# -- test data -----------------------------------------------------------------------------------------------


def transaction(dest: str, amount: str, *, origin: str = "100200300", email: str = "ana@example.com") -> dict[str, Any]:
    """One file record (amount as Decimal, reference empty as at consent time)."""
    return {
        "originAccount": {"accountNumber": origin, "accountType": "MONETARY", "currency": "GTQ"},
        "destinationAccount": {"accountNumber": dest, "accountType": "SAVINGS", "currency": "GTQ", "email": email},
        "transferInfo": {
            "transactionType": "THIRD_PROVIDER",
            "debitType": "D",
            "transactionAmount": Decimal(amount),
            "executionType": "ONLINE",
            "concept": "Payroll November",
            "reference": "",
        },
    }


def file_payload() -> dict[str, Any]:
    """A three-transfer payload; the third destination ends in 9902, so the sandbox rejects it."""
    return {
        "data": {
            "transaction": [
                transaction("200100300", "1500.50"),
                transaction("200100301", "2000.00", email="luis@example.com"),
                transaction("200109902", "750.25", email="eva@example.com"),
            ]
        }
    }


def _floats(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    if isinstance(value, Decimal):
        return float(value)  # exact for two-decimal money in the JCS number form
    return value


def file_initiation(payload: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Data.Initiation for a payload: hash = base64(SHA-256(JCS(payload with blank references)))."""
    payload = payload if payload is not None else file_payload()
    txs = payload["data"]["transaction"]
    digest = hashlib.sha256(rfc8785.dumps(_floats(payload))).digest()
    return {
        "SupplementaryData": copy.deepcopy(dict(payload)),
        "FileType": "UK.OBIE.PaymentInitiation.4.0",
        "FileHash": base64.b64encode(digest).decode(),
        "FileReference": "PAYROLL-2026-11",
        "NumberOfTransactions": str(len(txs)),
        "ControlSum": sum((tx["transferInfo"]["transactionAmount"] for tx in txs), Decimal(0)),
    }


def with_references(payload: Mapping[str, Any], consent_id: str) -> dict[str, Any]:
    """The upload body: every transferInfo.reference set to the consent id."""
    out = copy.deepcopy(dict(payload))
    for tx in out["data"]["transaction"]:
        tx["transferInfo"]["reference"] = consent_id
    return out


def vrp_consent_parts(now: Any) -> dict[str, Any]:
    """control_parameters / initiation / remittance_information for B1, valid around `now`."""
    return {
        "control_parameters": {
            "PSUAuthenticationMethods": ["UK.OBIE.SCA"],
            "VRPType": ["UK.OBIE.VRPType.Sweeping"],
            "ValidFromDateTime": (now - timedelta(days=1)).isoformat(timespec="milliseconds"),
            "ValidToDateTime": (now + timedelta(days=365)).isoformat(timespec="milliseconds"),
            "MaximumIndividualAmount": {"Amount": "500.00", "Currency": "GBP"},
            "PeriodicLimits": [
                {"Amount": "1000.00", "Currency": "GBP", "PeriodType": "Month", "PeriodAlignment": "Calendar"}
            ],
        },
        "initiation": {
            "CreditorAccount": {
                "SchemeName": "UK.OBIE.SortCodeAccountNumber",
                "Identification": "08080021325698",
                "Name": "Savings pot",
            }
        },
        "remittance_information": {"Reference": "SWEEP-001", "Unstructured": "VRP - CUOTAS - Dispersion"},
    }


# -- the approver on the consent page ------------------------------------------------------------------------


async def decide(http: httpx.AsyncClient, auth_url: str, *, approve: bool = True) -> dict[str, str]:
    """Open the consent page, press Approve (or Reject) like a browser; the redirect's query parameters."""
    page = await http.get(auth_url)
    assert page.status_code == 200, page.text
    target, data = decision_post(auth_url, page.text, "approve" if approve else "reject")
    answer = await http.post(target, data=data)
    assert answer.status_code in (302, 303), answer.text
    location = answer.headers["location"]
    assert location.startswith(REDIRECT_URI)
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


# -- observing what the real client sends ---------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """One HTTP request as it left the client."""

    method: str
    url: httpx.URL
    headers: httpx.Headers
    body: bytes

    def form(self) -> dict[str, str]:
        """The urlencoded body as a dict."""
        return {k: v[0] for k, v in parse_qs(self.body.decode(), keep_blank_values=True).items()}


def processor_transport() -> httpx.AsyncBaseTransport:
    """A new transport of the kind the processor's bank client uses by default (`processor.bank.transport`)."""
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    return bank_transport(limits) or httpx.AsyncHTTPTransport(limits=limits)


class Recording(httpx.AsyncBaseTransport):
    """Passes every request to the real transport and keeps a copy (an observer, not a stand-in)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.sent: list[Sent] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        self.sent.append(Sent(request.method, request.url, request.headers, body))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def to(self, path_suffix: str, method: str | None = None) -> list[Sent]:
        """Requests whose path ends with `path_suffix` (and have `method`)."""
        return [s for s in self.sent if s.url.path.endswith(path_suffix) and (method is None or s.method == method)]

    def token_requests(self, grant: str) -> int:
        """POSTs to the token endpoint for `grant` (client_credentials, authorization_code, refresh_token): each
        attempt counts. The grant parameter's name is the integration's (`grand_type` for the sandbox)."""
        return sum(1 for s in self.to("/token", "POST") if grant in s.form().values())


class Sleeps:
    """An instant sleep that records how long the client asked to wait."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)


# -- real servers on loopback ----------------------------------------------------------------------------------


@contextmanager
def uvicorn_thread(app: Any, sock: socket.socket) -> Iterator[str]:
    """Serve `app` with uvicorn on a held listening socket (`listening_socket()`) in a background thread; yields the
    base URL."""
    import threading

    import uvicorn

    port = port_of(sock)
    # asyncio's loop, as the tests were written for (uvicorn's "auto" would take uvloop, there for the processor)
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off", loop="asyncio"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"sandbox-{port}", daemon=True)
    thread.start()
    eventually(lambda: server.started or not thread.is_alive(), what="uvicorn started", timeout=20, interval=0.02)
    if not server.started:
        raise RuntimeError("uvicorn did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
