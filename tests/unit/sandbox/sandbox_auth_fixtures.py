"""Fixtures and helpers for the sandbox authorization-server tests (in-process ASGI, manual clock).

Test modules import the fixtures they use by name (`from sandbox_auth_fixtures import bank, http, ...`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from manual_clock import ManualClock

from sandbox.app import create_app
from sandbox.clients import Client, ClientRegistry
from sandbox.clock import iso_ms
from sandbox.config import SandboxConfig
from sandbox.consents import FILE_KIND, VRP_KIND
from sandbox.state import Bank

ISSUER = "http://sandbox.test"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
REDIRECT_URI = "https://tpp.example/callback"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@functools.cache
def key_pair(slot: int) -> tuple[str, str]:
    """(private PEM, public PEM) of a test RSA key; generated once per slot per test session."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


@dataclass
class Tpp:
    """A registered test client with its private key."""

    client: Client
    private_pem: str

    @property
    def client_id(self) -> str:
        return self.client.client_id

    def basic(self, secret: str | None = None) -> dict[str, str]:
        """The Authorization header of client_secret_basic."""
        raw = f"{self.client_id}:{self.client.client_secret if secret is None else secret}"
        return {"Authorization": "Basic " + base64.b64encode(raw.encode()).decode()}

    def assertion(
        self,
        now: float,
        *,
        key: str | None = None,
        alg: str = "PS256",
        kid: str | None = None,
        drop: tuple[str, ...] = (),
        **claims: Any,
    ) -> str:
        """A client assertion valid at `now`, with any claim overridden, dropped, or a different key/alg/kid."""
        body: dict[str, Any] = {
            "iss": self.client_id,
            "sub": self.client_id,
            "aud": ISSUER,
            "iat": int(now),
            "exp": int(now) + 60,
            "jti": str(uuid.uuid4()),
        }
        body.update(claims)
        for name in drop:
            body.pop(name, None)
        return jwt.encode(body, key or self.private_pem, algorithm=alg, headers={"kid": kid or self.client.kid})

    def assertion_form(self, now: float, **kwargs: Any) -> dict[str, str]:
        """The two private_key_jwt form parameters."""
        return {"client_assertion_type": ASSERTION_TYPE, "client_assertion": self.assertion(now, **kwargs)}


def make_tpp(client_id: str, slot: int, callback_url: str | None = None) -> Tpp:
    """A client registered with test key `slot`."""
    private, public = key_pair(slot)
    client = Client(
        client_id=client_id,
        client_secret=secrets.token_urlsafe(24),
        redirect_uris=(REDIRECT_URI, "https://tpp.example/other"),
        kid=f"kid-{client_id}",
        public_key_pem=public,
        callback_url=callback_url,
        name=f"TPP {client_id}",
    )
    return Tpp(client, private)


def make_bank(tpps: list[Tpp], clock: ManualClock, **config: Any) -> Bank:
    """A bank with these clients, the manual clock and the default (spec) lifetimes."""
    registry = ClientRegistry({t.client_id: t.client for t in tpps})
    return Bank(config=SandboxConfig(base_url=ISSUER, **config), clients=registry, clock=clock)


def file_initiation(reference: str = "PAYROLL-2026-11") -> dict[str, Any]:
    """A file consent's Initiation (two transfers, GTQ)."""
    tx = [
        {
            "originAccount": {"accountNumber": "1234567890", "accountType": "MONETARY", "currency": "GTQ"},
            "destinationAccount": {
                "accountNumber": account,
                "accountType": "SAVINGS",
                "currency": "GTQ",
                "email": f"employee{i}@example.com",
            },
            "transferInfo": {
                "transactionType": "THIRD_PROVIDER",
                "debitType": "D",
                "transactionAmount": Decimal(amount),
                "executionType": "ONLINE",
                "concept": f"Payroll <November> {i}",
                "reference": "",
            },
        }
        for i, (account, amount) in enumerate([("5551110001", "1500.50"), ("5551110002", "980.25")])
    ]
    return {
        "SupplementaryData": {"data": {"transaction": tx}},
        "FileType": "UK.OBIE.PaymentInitiation.4.0",
        "FileHash": "aGFzaA==",
        "FileReference": reference,
        "NumberOfTransactions": "2",
        "ControlSum": Decimal("2480.75"),
    }


def vrp_data(name: str = "Savings pot") -> dict[str, Any]:
    """A VRP consent's Data."""
    return {
        "ControlParameters": {
            "PSUAuthenticationMethods": ["UK.OBIE.SCA"],
            "VRPType": ["UK.OBIE.VRPType.Sweeping"],
            "ValidFromDateTime": "2026-01-01T00:00:00+00:00",
            "ValidToDateTime": "2027-12-31T00:00:00+00:00",
            "MaximumIndividualAmount": {"Amount": "100.00", "Currency": "GBP"},
            "PeriodicLimits": [
                {"Amount": "150.00", "Currency": "GBP", "PeriodType": "Month", "PeriodAlignment": "Calendar"},
                {"Amount": "60.00", "Currency": "GBP", "PeriodType": "Day", "PeriodAlignment": "Consent"},
            ],
        },
        "Initiation": {
            "CreditorAccount": {
                "SchemeName": "UK.OBIE.SortCodeAccountNumber",
                "Identification": "20000319470104",
                "Name": name,
            }
        },
        "RemittanceInformation": {"Reference": "SWEEP-01", "Unstructured": "VRP - CUOTAS - Dispersion"},
    }


def insert_consent(bank: Bank, kind: str, client_id: str, data: dict[str, Any], status: str) -> str:
    """Store a consent document directly, in the shape sandbox.consents documents."""
    consent_id = f"pay-fi-{uuid.uuid4()}" if kind == FILE_KIND else f"vrp-{uuid.uuid4()}"
    stamp = iso_ms(bank.now())
    bank.store.put(
        kind,
        consent_id,
        {"client_id": client_id, "status": status, "created": stamp, "updated": stamp, "data": data, "risk": {}},
    )
    return consent_id


def file_consent(
    bank: Bank, tpp: Tpp, status: str = "AwaitingAuthorisation", reference: str = "PAYROLL-2026-11"
) -> str:
    """A file consent of `tpp` whose file was uploaded."""
    return insert_consent(bank, FILE_KIND, tpp.client_id, {"Initiation": file_initiation(reference)}, status)


def vrp_consent(bank: Bank, tpp: Tpp, status: str = "AwaitingAuthorisation", name: str = "Savings pot") -> str:
    """A VRP consent of `tpp`."""
    return insert_consent(bank, VRP_KIND, tpp.client_id, vrp_data(name), status)


def consent_status(bank: Bank, consent_id: str) -> str:
    """Current status of a consent of either kind."""
    for kind in (FILE_KIND, VRP_KIND):
        doc = bank.store.get(kind, consent_id)
        if doc is not None:
            return str(doc["status"])
    raise KeyError(consent_id)


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def par_form(tpp: Tpp, consent_id: str, now: float, challenge: str, **overrides: str) -> dict[str, str]:
    """A complete, valid PAR form (private_key_jwt)."""
    form = {
        "client_id": tpp.client_id,
        "redirect_uri": REDIRECT_URI,
        "scope": f"payments:{consent_id} openid",
        "response_type": "code",
        "state": str(uuid.uuid4()),
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **tpp.assertion_form(now),
    }
    form.update(overrides)
    return form


def query_of(url: str) -> dict[str, str]:
    """A URL's query as a flat dict."""
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@dataclass
class Authorised:
    """The outcome of PAR + approval: the code and what the exchange needs."""

    consent_id: str
    code: str
    verifier: str
    state: str
    location: str


class Harness:
    """Drives the authorization steps against an in-process app."""

    def __init__(self, bank: Bank, http: httpx.AsyncClient, clock: ManualClock) -> None:
        self.bank = bank
        self.http = http
        self.clock = clock

    def now(self) -> float:
        return self.clock.now().timestamp()

    async def push(self, tpp: Tpp, consent_id: str, /, **overrides: str) -> tuple[httpx.Response, str, str]:
        """PAR; returns (response, verifier, state)."""
        verifier, challenge = pkce()
        form = par_form(tpp, consent_id, self.now(), challenge, **overrides)
        r = await self.http.post("/par", data=form)
        return r, verifier, form["state"]

    async def auth_url(self, tpp: Tpp, consent_id: str, request_uri: str) -> httpx.Response:
        return await self.http.get(
            f"/o3/v1.0/par-auth-code-url/{consent_id}",
            params={"request_uri": request_uri, "response_type": "code", "scope": "payments"},
            headers=tpp.basic(),
        )

    async def decide(self, request_uri: str, decision: str) -> httpx.Response:
        return await self.http.post("/auth/decision", data={"request_uri": request_uri, "decision": decision})

    async def authorise(self, tpp: Tpp, consent_id: str, /, **overrides: str) -> Authorised:
        """PAR then approval on the consent page; returns the code."""
        r, verifier, state = await self.push(tpp, consent_id, **overrides)
        assert r.status_code == 200, r.text
        d = await self.decide(r.json()["request_uri"], "approve")
        assert d.status_code == 303, d.text
        location = d.headers["location"]
        return Authorised(consent_id, query_of(location)["code"], verifier, state, location)

    async def exchange(self, tpp: Tpp, code: str, verifier: str, /, **overrides: str) -> httpx.Response:
        form = {
            "grand_type": "authorization_code",
            "scope": "payments",
            "code": code,
            "redirect_uri": REDIRECT_URI,
            "code_verifier": verifier,
            **tpp.assertion_form(self.now()),
        }
        form.update(overrides)
        return await self.http.post("/token", data=form)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def tpp() -> Tpp:
    return make_tpp("tpp-one", 0)


@pytest.fixture
def other_tpp() -> Tpp:
    return make_tpp("tpp-two", 1)


@pytest.fixture
def bank(tpp: Tpp, other_tpp: Tpp, clock: ManualClock) -> Bank:
    return make_bank([tpp, other_tpp], clock)


@pytest.fixture
async def http(bank: Bank) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(bank))
    async with httpx.AsyncClient(transport=transport, base_url=ISSUER) as client:
        yield client


@pytest.fixture
def harness(bank: Bank, http: httpx.AsyncClient, clock: ManualClock) -> Harness:
    return Harness(bank, http, clock)
