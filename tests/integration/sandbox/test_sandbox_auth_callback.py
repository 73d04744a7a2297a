"""The authorization steps over real HTTP on loopback, with the redirect POSTed to a real callback server.

Both the sandbox and a stand-in for the client's public API run under uvicorn in this event loop, each on a
socket bound to port 0. The sandbox uses a manual clock.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from manual_clock import ManualClock
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from processor.cli.common import serving
from processor.devtools.processes import listening_socket, port_of
from sandbox.app import create_app
from sandbox.clients import Client, ClientRegistry
from sandbox.clock import iso_ms
from sandbox.config import SandboxConfig
from sandbox.consents import FILE_KIND, VRP_KIND
from sandbox.state import Bank

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
REDIRECT_URI = "http://127.0.0.1:1/redirect-landing"  # never followed: the test reads the Location header


@asynccontextmanager
async def serve(app: ASGIApp) -> AsyncIterator[str]:
    """Serve an ASGI app on a held loopback port; yields its base URL."""
    with listening_socket() as sock:
        async with serving(app, sock):
            yield f"http://127.0.0.1:{port_of(sock)}"


@dataclass
class Receiver:
    """The client's public API: records every POSTed body and answers as told."""

    received: list[Any] = field(default_factory=list)
    answer: Callable[[], Awaitable[Response]] | None = None

    def app(self) -> Starlette:
        async def callback(request: Request) -> Response:
            self.received.append(await request.json())
            if self.answer is not None:
                return await self.answer()
            return JSONResponse({"status": "success", "message": "redirect URL received"})

        return Starlette(routes=[Route("/bank-redirects", callback, methods=["POST"])])


@dataclass
class Sandbox:
    base: str
    bank: Bank
    client: Client
    private_pem: str
    http: httpx.AsyncClient

    def basic(self) -> dict[str, str]:
        raw = f"{self.client.client_id}:{self.client.client_secret}".encode()
        return {"Authorization": "Basic " + base64.b64encode(raw).decode()}

    def assertion(self) -> dict[str, str]:
        now = int(self.bank.now().timestamp())
        cid = self.client.client_id
        claims = {"iss": cid, "sub": cid, "aud": self.base, "iat": now, "exp": now + 60, "jti": str(uuid.uuid4())}
        token = jwt.encode(claims, self.private_pem, algorithm="PS256", headers={"kid": self.client.kid})
        return {"client_assertion_type": ASSERTION_TYPE, "client_assertion": token}

    def consent(self, kind: str, data: dict[str, Any]) -> str:
        consent_id = f"pay-fi-{uuid.uuid4()}" if kind == FILE_KIND else f"vrp-{uuid.uuid4()}"
        stamp = iso_ms(self.bank.now())
        self.bank.store.put(
            kind,
            consent_id,
            {
                "client_id": self.client.client_id,
                "status": "AwaitingAuthorisation",
                "created": stamp,
                "updated": stamp,
                "data": data,
                "risk": {},
            },
        )
        return consent_id

    async def deliveries(self, count: int) -> list[dict[str, Any]]:
        """Wait (bounded) until the background delivery has recorded `count` outcomes."""
        for _ in range(500):
            records = [doc for _, doc in self.bank.store.items("callback_delivery")]
            if len(records) >= count:
                return records
            await asyncio.sleep(0.01)
        raise AssertionError("callback delivery was not recorded")


def _key() -> tuple[str, str]:
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


KEY = _key()


@asynccontextmanager
async def sandbox_with(callback_url: str | None, callback_timeout: float = 5.0) -> AsyncIterator[Sandbox]:
    """A sandbox on loopback with one client whose callback_url is given."""
    private, public = KEY
    client = Client(
        client_id="acme",
        client_secret=secrets.token_urlsafe(24),
        redirect_uris=(REDIRECT_URI,),
        kid="acme-key-1",
        public_key_pem=public,
        callback_url=callback_url,
        name="Acme Payroll",
    )
    # The issuer is the address the sandbox is reached at, known once the socket is bound: the server starts
    # with a forwarding app and the bank is built from the address it got.
    holder: dict[str, ASGIApp] = {}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await holder["app"](scope, receive, send)

    async with serve(app) as base:
        config = SandboxConfig(base_url=base, callback_timeout=callback_timeout)
        bank = Bank(config=config, clients=ClientRegistry({"acme": client}), clock=ManualClock())
        holder["app"] = create_app(bank)
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            yield Sandbox(base, bank, client, private, http)


async def authorise(sb: Sandbox, consent_id: str, decision: str) -> tuple[str, str]:
    """Real-HTTP PAR, authorization URL, consent page and decision; returns (Location, PKCE verifier)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    discovery = (await sb.http.get("/.well-known/openid-configuration", headers=sb.basic())).json()
    form = {
        "client_id": "acme",
        "redirect_uri": REDIRECT_URI,
        "scope": f"payments:{consent_id} openid",
        "response_type": "code",
        "state": "state-" + consent_id,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **sb.assertion(),
    }
    par = await sb.http.post(discovery["pushed_authorization_request_endpoint"], data=form, headers=sb.basic())
    assert par.status_code == 200, par.text
    url = await sb.http.get(
        f"/o3/v1.0/par-auth-code-url/{consent_id}",
        params={"request_uri": par.json()["request_uri"], "response_type": "code", "scope": "payments"},
        headers=sb.basic(),
    )
    assert url.status_code == 200, url.text
    page = await sb.http.get(url.text)
    assert page.status_code == 200 and "Acme Payroll" in page.text
    answer = await sb.http.post(
        f"{sb.base}/auth/decision", data={"request_uri": par.json()["request_uri"], "decision": decision}
    )
    assert answer.status_code == 303, answer.text
    return answer.headers["location"], verifier


FILE_DATA = {
    "Initiation": {
        "SupplementaryData": {
            "data": {"transaction": [{"originAccount": {"currency": "GTQ"}, "transferInfo": {"transactionAmount": 5}}]}
        },
        "FileReference": "LOOPBACK-1",
        "NumberOfTransactions": "1",
        "ControlSum": 5,
    }
}
VRP_DATA = {
    "ControlParameters": {"MaximumIndividualAmount": {"Amount": "10.00", "Currency": "GBP"}, "PeriodicLimits": []},
    "Initiation": {"CreditorAccount": {"Name": "Pot", "Identification": "1", "SchemeName": "x"}},
}


async def test_approval_is_posted_to_the_callback_and_the_code_works() -> None:
    receiver = Receiver()
    async with serve(receiver.app()) as callback_base, sandbox_with(f"{callback_base}/bank-redirects") as sb:
        consent_id = sb.consent(FILE_KIND, FILE_DATA)
        location, verifier = await authorise(sb, consent_id, "approve")
        [record] = await sb.deliveries(1)
        assert receiver.received == [{"redirect_url": location}]
        assert record["outcome"] == "delivered" and record["http_status"] == 200
        assert record["consent_id"] == consent_id and record["decision"] == "approve"
        assert record["callback_url"] == f"{callback_base}/bank-redirects"
        # The code travelled in the posted URL; it is not kept in the delivery record.
        code = parse_qs(urlsplit(receiver.received[0]["redirect_url"]).query)["code"][0]
        assert code not in str(record)
        token = await sb.http.post(
            "/token",
            data={
                "grand_type": "authorization_code",
                "scope": "payments",
                "code": code,
                "redirect_uri": REDIRECT_URI,
                "code_verifier": verifier,
                **sb.assertion(),
            },
        )
        assert token.status_code == 200, token.text
        assert token.json()["scope"] == f"payments:{consent_id} openid"


async def test_rejection_is_posted_too() -> None:
    receiver = Receiver()
    async with serve(receiver.app()) as callback_base, sandbox_with(f"{callback_base}/bank-redirects") as sb:
        consent_id = sb.consent(VRP_KIND, VRP_DATA)
        location, _ = await authorise(sb, consent_id, "reject")
        [record] = await sb.deliveries(1)
        assert receiver.received == [{"redirect_url": location}]
        assert "error=access_denied" in location
        assert record["outcome"] == "delivered" and record["decision"] == "reject"


async def test_callback_answering_500_does_not_break_the_redirect() -> None:
    receiver = Receiver()

    async def fail() -> Response:
        return JSONResponse({"status": "error", "message": "down"}, status_code=500)

    receiver.answer = fail
    async with serve(receiver.app()) as callback_base, sandbox_with(f"{callback_base}/bank-redirects") as sb:
        consent_id = sb.consent(FILE_KIND, FILE_DATA)
        location, _ = await authorise(sb, consent_id, "approve")
        assert location.startswith(REDIRECT_URI + "?code=")
        [record] = await sb.deliveries(1)
        assert record["outcome"] == "refused" and record["http_status"] == 500
        assert len(receiver.received) == 1


async def test_callback_answering_200_without_success_is_refused() -> None:
    receiver = Receiver()

    async def odd() -> Response:
        return Response("ok", media_type="text/plain")

    receiver.answer = odd
    async with serve(receiver.app()) as callback_base, sandbox_with(f"{callback_base}/bank-redirects") as sb:
        await authorise(sb, sb.consent(FILE_KIND, FILE_DATA), "approve")
        [record] = await sb.deliveries(1)
        assert record["outcome"] == "refused" and record["http_status"] == 200


async def test_unreachable_callback_is_recorded_as_failed(unserved_port: int) -> None:
    dead_port = unserved_port  # nothing listens there
    async with sandbox_with(f"http://127.0.0.1:{dead_port}/bank-redirects") as sb:
        consent_id = sb.consent(FILE_KIND, FILE_DATA)
        location, _ = await authorise(sb, consent_id, "approve")
        assert "code=" in location
        [record] = await sb.deliveries(1)
        assert record["outcome"] == "failed" and record["http_status"] is None
        assert "ConnectError" in record["reason"]


@pytest.mark.timeout(60)
async def test_slow_callback_times_out_without_holding_the_redirect() -> None:
    receiver = Receiver()
    release = asyncio.Event()

    async def slow() -> Response:
        await release.wait()
        return JSONResponse({"status": "success", "message": "late"})

    receiver.answer = slow
    async with (
        serve(receiver.app()) as callback_base,
        sandbox_with(f"{callback_base}/bank-redirects", callback_timeout=2.0) as sb,
    ):
        consent_id = sb.consent(FILE_KIND, FILE_DATA)
        # The browser's redirect arrives while the callback is still hanging.
        location, _ = await authorise(sb, consent_id, "approve")
        assert "code=" in location
        assert sb.bank.store.count("callback_delivery") == 0
        [record] = await sb.deliveries(1)
        release.set()
        assert record["outcome"] == "failed" and "Timeout" in record["reason"]
