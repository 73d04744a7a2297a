"""A rig for the engine tests: the sandbox bank and our callback API, both served by uvicorn on loopback
sockets in the test's event loop, a real store (SQLite or PostgreSQL), and an approver that drives the bank's
consent page the way a browser does (following our approval link, pressing the form's button, following the
redirect back to our callback API).

The sandbox runs on a ManualClock that the engine shares, so tests move time (token lifetimes, PAR lifetimes,
payment processing, authorization deadlines) without sleeping.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from bank_support import FINANCIAL_ID, Recording, integration_table, key_pair, processor_transport
from manual_clock import ManualClock

from processor.api.callback import callback_app
from processor.cli.common import serving
from processor.cli.config import Config
from processor.devtools.approver import decision_post
from processor.devtools.processes import listening_socket, port_of
from processor.domain.file_states import FlowState
from processor.engine.assembly import Engine, build_engine
from processor.engine.context import Checkpoint, _no_checkpoint
from processor.engine.intake import IntakeResult, accept_batch, calendars_of
from processor.engine.settings import EngineSettings
from processor.engine.worker import Worker
from processor.store import Flow, Store
from sandbox.app import create_app as create_sandbox_app
from sandbox.clients import Client, ClientRegistry
from sandbox.config import SandboxConfig
from sandbox.faults import FaultPlan
from sandbox.state import Bank
from schemas.topics import STATUS_TOPIC

CLIENT_ID = "dispersion-engine-test"
CLIENT_SECRET = "engine-test-secret-value"
CALLBACK_PATH = "/callback"


async def worker_round(worker: Worker) -> int:
    """One round of the worker's loop, run to the end: claim what is due now, run it, wait for all of it (the
    loop itself goes on until stopped). Returns how many items ran."""
    started = await worker._claim_round()
    await worker.drain(grace=3600)
    return started


async def instant_sleep(seconds: float) -> None:
    """The bank client's retry waits, skipped (the sandbox clock is manual anyway)."""
    await asyncio.sleep(0)


@asynccontextmanager
async def serve(app: Any, sock: socket.socket) -> AsyncIterator[None]:
    """Serve an ASGI app with uvicorn on a held listening socket, in this event loop (as the commands serve)."""
    async with serving(app, sock):
        yield


def bound_socket() -> tuple[socket.socket, int]:
    """A loopback listening socket held by the test (nobody else takes its port) and its port."""
    sock = listening_socket()
    return sock, port_of(sock)


def batch(
    batch_id: str | None = None,
    transfers: Iterable[tuple[str, str]] = (
        ("200100300", "1500.50"),
        ("200100301", "2000.00"),
        ("200109902", "750.25"),
    ),
    *,
    origin: str = "100200300",
    integration: str = "sandbox",
    currency: str = "GTQ",
) -> dict[str, Any]:
    """A payroll batch; by default three transfers, the third to an account ending 9902 (the sandbox rejects
    it: AC04, closed account), so the payment completes with one rejected line."""
    return {
        "batch_id": batch_id or f"batch-{uuid.uuid4().hex[:12]}",
        "integration": integration,
        "file_reference": "PAYROLL-2026-11",
        "origin_account": {"account_number": origin, "account_type": "MONETARY", "currency": currency},
        "transactions": [
            {
                "destination_account": {
                    "account_number": account,
                    "account_type": "SAVINGS",
                    "currency": currency,
                    "email": f"employee{i}@example.com",
                },
                "amount": Decimal(amount),
                "concept": f"Payroll November {i}",
                "employee_reference": f"E-{i:04d}",
            }
            for i, (account, amount) in enumerate(transfers)
        ],
        "requested_at": "2026-11-02T08:00:00.000Z",
        "source": "erp-test",
    }


@dataclass
class Approval:
    """What the approver's browser went through."""

    bank_url: str  # where our approval link redirected
    redirect: str  # the bank's redirect back to us (Location)
    query: dict[str, str]  # its parameters
    callback: httpx.Response | None  # our callback API's answer to the browser


@dataclass
class Rig:
    """Sandbox + callback API + store + engine, all on one manual clock."""

    store: Store
    bank: Bank
    clock: ManualClock
    sandbox_url: str
    public_url: str
    config: Config
    engine: Engine
    sent: Recording
    http: httpx.AsyncClient
    settings: EngineSettings
    checkpoint_box: list[Checkpoint] = field(default_factory=lambda: [_no_checkpoint])

    # -- engine ---------------------------------------------------------------------------------------------

    def new_engine(self) -> Engine:
        """A fresh engine (another process, after a crash) on the same store, bank and clock."""
        engine = build_engine(
            self.config,
            self.store,
            clock=self.clock,
            settings=self.settings,
            checkpoint=lambda point, flow_id: self.checkpoint_box[0](point, flow_id),
            bank_options={"sleep": instant_sleep, "transport": self.sent},
        )
        return engine

    async def submit(self, document: dict[str, Any] | str | bytes) -> IntakeResult:
        """Accept a batch into the engine."""
        return await accept_batch(
            self.store,
            document,
            now=self.clock.now(),
            integrations=set(self.config.integrations),
            calendars=calendars_of(self.config.integrations),
        )

    def flow(self, batch_id: str) -> Flow:
        """The flow as stored now."""
        return self.store.run(lambda tx: tx.flows.require(batch_id), write=False)

    async def run_round(self, engine: Engine | None = None) -> int:
        """One worker round of an engine (claims what is due now, runs it to completion)."""
        engine = engine or self.engine
        return await worker_round(engine.worker())

    async def drive(
        self,
        batch_id: str,
        until: Callable[[Flow], bool],
        *,
        engine: Engine | None = None,
        rounds: int = 60,
        expire: bool = False,
    ) -> Flow:
        """Run worker rounds until `until(flow)`; when nothing is due, move the clock to the flow's next action
        (never past an authorization deadline unless `expire`)."""
        for _ in range(rounds):
            flow = self.flow(batch_id)
            if until(flow):
                return flow
            ran = await self.run_round(engine)
            flow = self.flow(batch_id)
            if until(flow):
                return flow
            if ran == 0:
                nxt = flow.next_action_at
                if nxt is None:
                    raise AssertionError(f"flow {batch_id} waits for nothing in state {flow.state}")
                if flow.state == FlowState.AWAITING_AUTHORIZATION and not expire:
                    raise AssertionError(f"flow {batch_id} waits for the approver")
                if flow.lease_expires_at is not None and flow.lease_expires_at > nxt:
                    nxt = flow.lease_expires_at
                delta = (nxt - self.clock.now()).total_seconds()
                self.clock.advance(max(delta, 0) + 0.001)
        raise AssertionError(f"flow {batch_id} did not get there: {self.flow(batch_id)}")

    async def to_state(self, batch_id: str, *states: str, engine: Engine | None = None, expire: bool = False) -> Flow:
        """Drive until the flow is in one of `states`."""
        return await self.drive(batch_id, lambda f: f.state in states, engine=engine, expire=expire)

    # -- the bank --------------------------------------------------------------------------------------------

    def count(self, kind: str) -> int:
        """Documents of a kind at the sandbox (file_consent, file_payment, ...)."""
        return int(self.bank.store.count(kind))

    def faults(self, rules: list[dict[str, Any]]) -> None:
        """Replace the sandbox's fault plan (docs/sandbox-faults.md)."""
        self.bank.faults = FaultPlan.from_json({"seed": 7, "rules": rules})

    def code_exchanges(self) -> int:
        """Authorization-code exchanges (E6) the engine's bank clients sent to the bank (each attempt counts)."""
        return self.sent.token_requests("authorization_code")

    def keys_used(self, path_suffix: str) -> set[str]:
        """The idempotency keys of every POST to a path ending with `path_suffix`."""
        return {s.headers.get("x-idempotency-key", "") for s in self.sent.to(path_suffix, "POST")}

    # -- the outbox ------------------------------------------------------------------------------------------

    def statuses(self, batch_id: str) -> list[str]:
        """Status events of a batch, in outbox order."""
        return self.store.run(lambda tx: tx.outbox.statuses(STATUS_TOPIC, batch_id), write=False)

    def events(self, batch_id: str) -> list[Any]:
        """Outbox events of a batch, in order."""
        return self.store.run(lambda tx: tx.outbox.events(STATUS_TOPIC, batch_id), write=False)

    def approval_url(self, batch_id: str) -> str:
        """The authorization_url published with AUTHORIZATION_REQUIRED."""
        for event in self.events(batch_id):
            if event.status == "AUTHORIZATION_REQUIRED":
                return str(event.payload["authorization_url"])
        raise AssertionError("no AUTHORIZATION_REQUIRED event")

    # -- the approver ----------------------------------------------------------------------------------------

    async def open_link(self, link: str) -> httpx.Response:
        """The approver's browser opening our approval link (not following the redirect)."""
        return await self.http.get(link)

    async def approve(self, link: str, *, approve: bool = True, deliver: bool = True) -> Approval:
        """Open the approval link, follow it to the consent page, press Approve/Reject, and (with `deliver`)
        follow the bank's redirect to our callback API as the browser would."""
        opened = await self.http.get(link)
        assert opened.status_code == 302, opened.text
        bank_url = opened.headers["location"]
        redirect = await self.decide(bank_url, approve=approve)
        query = {k: v[0] for k, v in parse_qs(urlsplit(redirect).query).items()}
        answer = await self.http.get(redirect) if deliver else None
        return Approval(bank_url, redirect, query, answer)

    async def decide(self, bank_url: str, *, approve: bool = True) -> str:
        """Press a button on the bank's consent page; the Location it redirects to."""
        page = await self.http.get(bank_url)
        assert page.status_code == 200, page.text
        target, data = decision_post(bank_url, page.text, "approve" if approve else "reject")
        answer = await self.http.post(target, data=data)
        assert answer.status_code in (302, 303), answer.text
        return str(answer.headers["location"])


@asynccontextmanager
async def engine_rig(
    store: Store,
    *,
    settings: EngineSettings | None = None,
    callback_url: bool = False,
    sandbox_options: dict[str, Any] | None = None,
    integration_options: dict[str, Any] | None = None,
    bank_options: dict[str, Any] | None = None,
    sandbox_wrapper: Callable[[Any], Any] | None = None,
) -> AsyncIterator[Rig]:
    """Start the sandbox and our callback API on loopback around a store; yields the rig. `bank_options` go to
    the engine's bank clients besides the rig's own (e.g. the tracing's `instrument`); `sandbox_wrapper` wraps
    the sandbox's ASGI app (a hostile resource server answering some routes itself)."""
    clock = ManualClock()
    bank_sock, bank_port = bound_socket()
    api_sock, api_port = bound_socket()
    sandbox_url = f"http://127.0.0.1:{bank_port}"
    public_url = f"http://127.0.0.1:{api_port}"
    redirect_uri = public_url + CALLBACK_PATH
    client = Client(
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        redirect_uris=(redirect_uri,),
        kid="kid-1",
        public_key_pem=key_pair().public_pem,
        callback_url=redirect_uri if callback_url else None,
    )
    bank = Bank(
        SandboxConfig(base_url=sandbox_url, financial_id=FINANCIAL_ID, **(sandbox_options or {})),
        ClientRegistry({CLIENT_ID: client}),
        clock=clock,
    )
    table = integration_table(
        sandbox_url,
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        redirect_uri=redirect_uri,
        retry={"max_attempts": 3, "base_delay": 0.01, "max_delay": 0.05, "max_elapsed": 5, "max_retry_after": 0},
        timeouts={"read": 2.0},
        **(integration_options or {}),
    )
    config = Config(processor={"public_url": public_url}, integrations={"sandbox": table})
    settings = settings or EngineSettings(
        authorization_deadline=3600,
        lease_seconds=30,
        poll_first=1.0,
        poll_max=8.0,
        retry_first=1.0,
        retry_max=8.0,
        duplicate_wait=0.5,
    )
    sent = Recording(processor_transport())
    box: list[Checkpoint] = [_no_checkpoint]
    engine = build_engine(
        config,
        store,
        clock=clock,
        settings=settings,
        checkpoint=lambda point, flow_id: box[0](point, flow_id),
        bank_options={"sleep": instant_sleep, "transport": sent, **(bank_options or {})},
    )
    async with (
        serve((sandbox_wrapper or (lambda app: app))(create_sandbox_app(bank)), bank_sock),
        serve(callback_app(engine), api_sock),
        httpx.AsyncClient(timeout=10, follow_redirects=False) as http,
    ):
        rig = Rig(store, bank, clock, sandbox_url, public_url, config, engine, sent, http, settings, box)
        try:
            yield rig
        finally:
            await engine.aclose()


async def pay(rig: Rig) -> str:
    """Submit a batch, approve it at the bank through the approval link, drive it to COMPLETED; its id."""
    document = batch()
    batch_id = str(document["batch_id"])
    await rig.submit(document)
    await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
    approval = await rig.approve(rig.approval_url(batch_id))
    assert approval.callback is not None and approval.callback.status_code == 200
    flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
    assert flow.state == FlowState.COMPLETED, flow
    return batch_id
