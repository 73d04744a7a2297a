"""A rig for the VRP engine tests: the sandbox bank as a real `dispersion sandbox --admin` process on loopback,
our callback API (in process, over httpx.ASGITransport), a real store (SQLite or PostgreSQL), and an approver
who presses the consent page's buttons like a browser.

Time: the engine's clock is the wall clock plus an offset that moves in step with the sandbox process's admin
clock (`rig.advance`), and the engine's waiting loops "sleep" by advancing both, so tests move time (token
lifetimes, leases, payment processing, deadlines) without sleeping.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sandbox_process import SandboxProcess, running_sandbox

from processor.api.callback import callback_app
from processor.cli.config import Config, load_config
from processor.devtools.approver import decision_post
from processor.engine.assembly import Engine, build_engine
from processor.engine.context import Checkpoint, _no_checkpoint
from processor.engine.settings import EngineSettings
from processor.engine.vrp import VrpEngine, attach_vrp
from processor.store import Store, VrpMandate, VrpPayment
from schemas.topics import VRP_STATUS_TOPIC

VRP_DELAY = 5  # seconds a domestic VRP stays Pending at the sandbox
CREDITOR = {"scheme_name": "UK.OBIE.SortCodeAccountNumber", "identification": "08080021325698", "name": "Savings pot"}


@pytest.fixture(scope="module")
def vrp_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """`dispersion sandbox init` + `dispersion sandbox --admin` on a free loopback port, for a test module."""
    directory = tmp_path_factory.mktemp("vrp-sandbox")
    with running_sandbox(directory, "--admin", "--vrp-delay", str(VRP_DELAY)) as sandbox:
        yield sandbox


class ShiftedClock:
    """The wall clock plus an offset, kept equal to the sandbox process's clock."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


async def instant_sleep(seconds: float) -> None:
    """The bank client's retry waits, skipped."""
    await asyncio.sleep(0)


class Crash(BaseException):
    """Raised from a checkpoint: the step stops there as if the process had died (no cleanup runs)."""


def crash_at(point: str) -> Checkpoint:
    """A checkpoint that crashes at `point`."""

    def checkpoint(at: str, flow_id: str) -> None:
        if at == point:
            raise Crash(f"{at} {flow_id}")

    return checkpoint


def mandate_request(mandate_id: str | None = None, *, now: datetime, **overrides: Any) -> dict[str, Any]:
    """A `vrp.mandates` request (JSON form), valid from yesterday for 60 days; max 500 GBP a payment, 1000 a
    calendar month."""
    doc: dict[str, Any] = {
        "mandate_id": mandate_id or f"m-{uuid.uuid4().hex[:12]}",
        "integration": "sandbox",
        "currency": "GBP",
        "creditor_account": dict(CREDITOR),
        "max_individual_amount": "500.00",
        "periodic_limits": [{"amount": "1000.00", "period_type": "Month", "period_alignment": "Calendar"}],
        "valid_from": (now - timedelta(days=1)).isoformat(),
        "valid_to": (now + timedelta(days=60)).isoformat(),
        "reference": "SWEEP-001",
        "description": None,
        "requested_at": now.isoformat(),
        "source": "vrp-test",
    }
    doc.update(overrides)
    return doc


def payment_request(mandate_id: str, amount: str, payment_id: str | None = None, **overrides: Any) -> dict[str, Any]:
    """A `vrp.payments` instruction (JSON form)."""
    pid = payment_id or f"p-{uuid.uuid4().hex[:12]}"
    doc: dict[str, Any] = {
        "payment_id": pid,
        "mandate_id": mandate_id,
        "amount": amount,
        "currency": "GBP",
        "end_to_end_id": f"E2E-{pid}"[:35],
        "remittance": "Sweep to savings",
    }
    doc.update(overrides)
    return doc


@dataclass
class VrpRig:
    """Sandbox process + callback API + store + engine, on one shifted clock."""

    sandbox: SandboxProcess
    store: Store
    config: Config
    settings: EngineSettings
    clock: ShiftedClock
    engine: Engine
    vrp: VrpEngine
    http: httpx.AsyncClient
    admin: httpx.AsyncClient
    checkpoint_box: list[Checkpoint] = field(default_factory=lambda: [_no_checkpoint])

    # -- time and the bank ----------------------------------------------------------------------------------

    async def advance(self, seconds: float, *, ours: bool = True) -> None:
        """Move the sandbox's clock (and, with `ours`, the engine's) forward."""
        answer = await self.admin.post("/__sandbox/clock", json={"advance_seconds": seconds})
        assert answer.status_code == 200, answer.text
        if ours:
            self.clock.offset += timedelta(seconds=seconds)

    async def counts(self) -> dict[str, int]:
        """Documents per kind at the sandbox (vrp_consent, domestic_vrp, access_token, ...)."""
        answer = await self.admin.get("/__sandbox/counts", params=[("kind", "refresh_token")])
        assert answer.status_code == 200, answer.text
        return {k: int(v) for k, v in answer.json().items()}

    async def customer(self, consent_id: str, action: str) -> dict[str, Any]:
        """What the bank's customer does in their banking app: `revoke` the consent, or `revoke-refresh-token`."""
        answer = await self.admin.post(f"/__sandbox/vrp-consents/{consent_id}/{action}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def tokens_stored(self, consent_id: str) -> bool:
        """Whether the store holds tokens for the consent (read from the store itself)."""
        return self.store.run(lambda tx: tx.tokens.get(consent_id), write=False) is not None

    async def faults(self, rules: list[dict[str, Any]]) -> None:
        """Replace the sandbox's fault plan."""
        answer = await self.admin.put("/__sandbox/faults", json={"seed": 3, "rules": rules})
        assert answer.status_code == 200, answer.text

    async def fault_counters(self) -> list[dict[str, Any]]:
        """The plan's rules with their `matched` / `fired` counters."""
        answer = await self.admin.get("/__sandbox/faults")
        assert answer.status_code == 200, answer.text
        return list(answer.json()["rules"])

    async def count_calls(self, operation: str) -> None:
        """Count every call of an operation from now on (a zero-latency rule; read with `calls`)."""
        await self.faults([{"operation": operation, "fault": "latency", "latency_ms": 0}])

    async def calls(self) -> int:
        """Calls counted since `count_calls`."""
        return int((await self.fault_counters())[0]["matched"])

    # -- the engine -----------------------------------------------------------------------------------------

    def new_engine(self, *, tpp_name: str | None = None, transport: Any = None) -> tuple[Engine, VrpEngine]:
        """Another engine on the same store, bank and clock (another process; e.g. after a crash); `tpp_name`:
        deployed with the integration's TPP name changed (the VRP bodies it builds name the TPP); `transport`:
        its bank client's httpx transport (a `Recording`)."""
        config = self.config
        if tpp_name is not None:
            integration = config.integrations["sandbox"].model_copy(update={"tpp_name": tpp_name})
            config = config.model_copy(update={"integrations": {"sandbox": integration}})
        return assemble(
            config, self.store, self.settings, self.clock, self.checkpoint_box, self.advance, transport=transport
        )

    def crash_at(self, point: str | None) -> None:
        """From now on crash at `point` (None: never)."""
        self.checkpoint_box[0] = _no_checkpoint if point is None else crash_at(point)

    def mandate(self, mandate_id: str) -> VrpMandate:
        return self.store.run(lambda tx: tx.mandates.require(mandate_id), write=False)

    def payment(self, payment_id: str) -> VrpPayment:
        return self.store.run(lambda tx: tx.vrp_payments.require(payment_id), write=False)

    def events(self, mandate_id: str) -> list[dict[str, Any]]:
        """The `vrp.status` payloads of a mandate, in outbox order."""
        return [
            dict(e.payload)
            for e in self.store.run(lambda tx: tx.outbox.events(VRP_STATUS_TOPIC, mandate_id), write=False)
        ]

    def statuses(self, mandate_id: str, payment_id: str | None = None) -> list[str]:
        """The statuses published for a mandate (or only those of one payment)."""
        return [e["status"] for e in self.events(mandate_id) if payment_id is None or e.get("payment_id") == payment_id]

    async def new_mandate(self, **overrides: Any) -> VrpMandate:
        """Submit a mandate request; it must reach AWAITING_AUTHORIZATION."""
        outcome = await self.vrp.submit_mandate(mandate_request(now=self.clock.now(), **overrides))
        assert outcome.created and outcome.mandate.state == "AWAITING_AUTHORIZATION", outcome
        return outcome.mandate

    async def authorised_mandate(self, **overrides: Any) -> VrpMandate:
        """A mandate authorised by the approver through the consent page."""
        mandate = await self.new_mandate(**overrides)
        answer = await self.approve(mandate.mandate_id)
        assert answer.status_code == 200, answer.text
        authorised = self.mandate(mandate.mandate_id)
        assert authorised.state == "AUTHORIZED"
        return authorised

    # -- the approver ---------------------------------------------------------------------------------------

    def approval_link(self, mandate_id: str) -> str:
        """The authorization_url published with the latest AUTHORIZATION_REQUIRED (a re-authorization's is newer)."""
        for event in reversed(self.events(mandate_id)):
            if event["status"] == "AUTHORIZATION_REQUIRED":
                return str(event["authorization_url"])
        raise AssertionError(f"no AUTHORIZATION_REQUIRED for {mandate_id}")

    async def approve(self, mandate_id: str, *, approve: bool = True) -> httpx.Response:
        """Open the approval link (our API redirects to the bank), press Approve or Reject on the consent page,
        and follow the bank's redirect back to our callback API; our API's answer."""
        opened = await self.http.get(self.approval_link(mandate_id))
        assert opened.status_code == 302, opened.text
        bank_url = opened.headers["location"]
        assert bank_url.startswith(self.sandbox.base_url)
        page = await self.http.get(bank_url)
        assert page.status_code == 200, page.text
        target, data = decision_post(bank_url, page.text, "approve" if approve else "reject")
        decided = await self.http.post(target, data=data)
        assert decided.status_code in (302, 303), decided.text
        redirect = decided.headers["location"]
        query = parse_qs(urlsplit(redirect).query)
        assert ("code" in query) == approve and "state" in query
        return await self.http.get(redirect)


def flow_b_config(directory: Path) -> Config:
    """The configuration `sandbox init` wrote, with flow B's client authentication (Basic)."""
    config = load_config(directory / "dispersion.toml")
    integration = config.integrations["sandbox"].model_copy(update={"token_auth_method": "client_secret_basic"})
    return config.model_copy(update={"integrations": {"sandbox": integration}})


def assemble(
    config: Config,
    store: Store,
    settings: EngineSettings,
    clock: ShiftedClock,
    box: list[Checkpoint],
    sleep: Any,
    *,
    transport: Any = None,
) -> tuple[Engine, VrpEngine]:
    """An engine with flow B attached, as a deployment builds it (`transport`: its bank client's, if given)."""
    engine = build_engine(
        config,
        store,
        clock=clock,
        settings=settings,
        checkpoint=lambda point, flow_id: box[0](point, flow_id),
        bank_options={"sleep": instant_sleep, **({"transport": transport} if transport is not None else {})},
    )
    return engine, attach_vrp(engine, sleep=sleep)


@asynccontextmanager
async def vrp_rig(
    sandbox: SandboxProcess, store: Store, *, settings: EngineSettings | None = None
) -> AsyncIterator[VrpRig]:
    """The rig around a running sandbox process and a store."""
    config = flow_b_config(sandbox.directory)
    settings = settings or EngineSettings(
        authorization_deadline=3600,
        lease_seconds=30,
        poll_first=1.0,
        poll_max=8.0,
        retry_first=1.0,
        retry_max=8.0,
        duplicate_wait=0.5,
    )
    async with httpx.AsyncClient(base_url=sandbox.base_url, timeout=10) as admin:
        await admin.put("/__sandbox/faults", json=[])
        bank_now = datetime.fromisoformat((await admin.get("/__sandbox/clock")).json()["now"].replace("Z", "+00:00"))
        clock = ShiftedClock(bank_now - datetime.now(UTC))
        box: list[Checkpoint] = [_no_checkpoint]
        holder: list[VrpRig] = []

        async def sleep(seconds: float) -> None:
            await holder[0].advance(seconds)

        engine, vrp = assemble(config, store, settings, clock, box, sleep)
        public = config.processor.public_url
        mounts = {public: httpx.ASGITransport(app=callback_app(engine))}
        async with httpx.AsyncClient(mounts=mounts, timeout=10, follow_redirects=False) as http:
            rig = VrpRig(sandbox, store, config, settings, clock, engine, vrp, http, admin, box)
            holder.append(rig)
            try:
                yield rig
            finally:
                await admin.put("/__sandbox/faults", json=[])
                await engine.aclose()


def money(value: str) -> Decimal:
    """A Decimal amount (tests compare amounts exactly)."""
    return Decimal(value)
