"""Flow A survives a crash at every step: between recording a bank call and recording its outcome, around the
approval link's PAR, around the code exchange, and while polling. Two ways to die:

- **aborted**: an engine whose checkpoint hook (or bank transport) raises `Crash`, a `BaseException` the engine
  does not catch, exactly at the named point, so nothing after it runs (no side-effect completion, no lease
  release), as if the process had died there;
- **killed**: a child process running the engine on the same store (`file_engine_child.py`) SIGKILLs itself at
  the point.

Then a fresh engine (another process: another lease owner, after the dead one's lease ran out) resumes from the
store alone. Each time the sandbox holds exactly one consent, one upload (one idempotency key, accepted once) and
one file payment, and the status events are AUTHORIZATION_REQUIRED, AUTHORIZED, INITIATED, COMPLETED, each once
and in order. SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from bank_support import key_pair
from engine_support import CLIENT_ID, CLIENT_SECRET, Rig, batch, engine_rig, instant_sleep
from paths import child_pythonpath
from store_fixtures import StoreTarget

from processor.domain.file_states import FlowState
from processor.engine.assembly import Engine, build_engine
from processor.engine.settings import EngineSettings
from processor.store import Cipher, EffectStatus, Operation, SideEffect, Store, StoreTx, generate_key

HERE = Path(__file__).parent
KILLED = -9
STORY = ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]
SETTINGS = EngineSettings(
    authorization_deadline=3600,
    lease_seconds=30,
    poll_first=1.0,
    poll_max=8.0,
    retry_first=1.0,
    retry_max=8.0,
    duplicate_wait=0.2,
    # Shorter than the sandbox's 60 s code lifetime, so a redelivered redirect can still recover a code exchange
    # that died before reaching the bank (see docs/engine.md, "Open points").
    exchange_recovery_after=30,
)


class Crash(BaseException):
    """The process 'dies' here: raised from a checkpoint or the bank transport, never caught by the engine."""


def bank_point(request: httpx.Request) -> str | None:
    """Name the authorization and polling calls the checkpoint hook does not cover."""
    path = request.url.path
    if request.method == "POST" and path.endswith("/par"):
        return "par"
    if request.method == "GET" and "/par-auth-code-url/" in path:
        return "authorization_url"
    if request.method == "POST" and path.endswith("/token") and b"authorization_code" in request.content:
        return "exchange"
    if request.method == "GET" and "/file-payments/" in path and not path.endswith("/report-file"):
        return "poll"
    return None


class Tripwire(httpx.AsyncBaseTransport):
    """The engine's bank transport, calling `hit(point)` before sending and after the answer arrived."""

    def __init__(self, inner: httpx.AsyncBaseTransport, hit: Callable[[str], None]) -> None:
        self.inner = inner
        self.hit = hit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        point = bank_point(request)
        if point:
            self.hit(f"{point}:before")
        response = await self.inner.handle_async_request(request)
        if point:
            await response.aread()
            self.hit(f"{point}:after")
        return response


def doomed_engine(rig: Rig, point: str) -> Engine:
    """An engine (a process) that dies at `point`, on the rig's store, bank and clock."""

    def hit(at: str, flow_id: str = "") -> None:
        if at == point:
            raise Crash(at)

    return build_engine(
        rig.config,
        rig.store,
        clock=rig.clock,
        settings=rig.settings,
        checkpoint=hit,
        bank_options={"sleep": instant_sleep, "transport": Tripwire(rig.sent, hit)},
    )


async def run_until_crash(rig: Rig, engine: Engine, batch_id: str) -> None:
    """Run the doomed engine on the flow (moving the clock to its next action) until it dies."""
    for _ in range(20):
        flow = await engine.file_flow.acquire(batch_id, owner="doomed")
        if flow is None:
            current = rig.flow(batch_id)
            assert current.next_action_at is not None, current
            rig.clock.advance(max(0.0, (current.next_action_at - rig.clock.now()).total_seconds()) + 0.001)
            continue
        await engine.file_flow.run(flow, owner="doomed")
    raise AssertionError("the engine never reached its crash point")


def _effect(tx: StoreTx, *, batch_id: str, operation: Operation) -> SideEffect | None:
    return tx.side_effects.get(batch_id, operation)


def assert_paid_once(rig: Rig, batch_id: str) -> None:
    """One consent, one upload, one payment at the bank; the story published once, in order."""
    flow = rig.flow(batch_id)
    assert flow.state == FlowState.COMPLETED, flow
    assert rig.count("file_consent") == 1
    assert rig.count("file_payment") == 1
    assert rig.statuses(batch_id) == STORY
    for operation, path in (
        (Operation.CREATE_CONSENT, "/file-payment-consents"),
        (Operation.UPLOAD, "/file"),
        (Operation.CREATE_PAYMENT, "/file-payments"),
    ):
        effect = rig.store.run(partial(_effect, batch_id=batch_id, operation=operation), write=False)
        assert effect is not None and effect.status is EffectStatus.DONE
        # Every call this process saw (a killed child's are not recorded here) repeated the one stored key.
        assert rig.keys_used(path) <= {effect.idempotency_key}


async def authorised(rig: Rig, batch_id: str) -> None:
    """Drive the healthy engine to the approver and approve."""
    await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
    approval = await rig.approve(rig.approval_url(batch_id))
    assert approval.callback is not None and approval.callback.status_code == 200, approval.callback
    assert rig.flow(batch_id).state == FlowState.AUTHORIZED


async def finish(rig: Rig, batch_id: str) -> None:
    """A fresh engine takes over (after the dead one's lease) and drives the flow to its end."""
    flow = rig.flow(batch_id)
    if flow.state in (FlowState.RECEIVED, FlowState.CONSENT_CREATED, FlowState.AWAITING_AUTHORIZATION):
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION, engine=rig.new_engine())
        if rig.flow(batch_id).state == FlowState.AWAITING_AUTHORIZATION:
            await authorised(rig, batch_id)
    await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED, engine=rig.new_engine())


# -- aborted between the steps of the worker ---------------------------------------------------------------------

BEFORE_APPROVAL = ["create_consent:before", "create_consent:after", "upload:before", "upload:after"]
AFTER_APPROVAL = ["create_payment:before", "create_payment:after", "poll:before", "poll:after"]


@pytest.mark.parametrize("point", BEFORE_APPROVAL + AFTER_APPROVAL)
async def test_aborted_step_resumes_without_a_second_resource(store: Store, point: str) -> None:
    async with engine_rig(store, settings=SETTINGS) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        if point in AFTER_APPROVAL:
            await authorised(rig, batch_id)
        before = rig.flow(batch_id).state
        with pytest.raises(Crash):
            await run_until_crash(rig, doomed_engine(rig, point), batch_id)
        dead = rig.flow(batch_id)
        assert dead.lease_owner == "doomed" and not dead.terminal  # the dead process's lease holds it for now
        if point.startswith(("create_consent", "upload")):
            operation = Operation.CREATE_CONSENT if point.startswith("create") else Operation.UPLOAD
            effect = store.run(lambda tx: tx.side_effects.get(batch_id, operation), write=False)
            assert effect is not None and effect.status is EffectStatus.PENDING
            assert dead.state == (before if point.startswith("create") else FlowState.CONSENT_CREATED)
        assert await rig.run_round(rig.new_engine()) == 0  # nobody else may touch it while the lease lasts
        await finish(rig, batch_id)
        assert_paid_once(rig, batch_id)


# -- aborted around the approval link and the code exchange ------------------------------------------------------


@pytest.mark.parametrize("point", ["par:before", "par:after", "authorization_url:before", "authorization_url:after"])
async def test_crash_while_opening_the_link_then_the_link_works_again(store: Store, point: str) -> None:
    async with engine_rig(store, settings=SETTINGS) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        link = rig.approval_url(batch_id)
        token = parse_qs(urlsplit(link).query)["t"][0]
        with pytest.raises(Crash):
            await doomed_engine(rig, point).authorizer.open_link("file", batch_id, token)
        assert rig.flow(batch_id).state == FlowState.AWAITING_AUTHORIZATION
        await authorised(rig, batch_id)  # the approver opens the link again: a fresh PAR on the healthy API
        await finish(rig, batch_id)
        assert_paid_once(rig, batch_id)


async def _decided_redirect(rig: Rig, batch_id: str) -> str:
    """Open the link on the healthy API and approve at the bank, but do not deliver the redirect yet."""
    approval = await rig.approve(rig.approval_url(batch_id), deliver=False)
    assert "code" in approval.query
    return approval.redirect


async def test_crash_before_the_code_exchange_is_recovered_by_the_redelivered_redirect(store: Store) -> None:
    async with engine_rig(store, settings=SETTINGS) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        redirect = await _decided_redirect(rig, batch_id)
        params = {k: v[0] for k, v in parse_qs(urlsplit(redirect).query).items()}
        doomed = doomed_engine(rig, "exchange:before")
        with pytest.raises(Crash):
            await doomed.authorizer.complete(params)  # the state is used up, the code never reached the bank
        early = await rig.http.get(redirect)  # reloading at once: the first delivery may still be running
        assert early.status_code == 409 and rig.flow(batch_id).state == FlowState.AWAITING_AUTHORIZATION
        rig.clock.advance(SETTINGS.exchange_recovery_after + 1)  # still within the code's lifetime at the bank
        again = await rig.http.get(redirect)
        assert again.status_code == 200, again.text
        await finish(rig, batch_id)
        assert_paid_once(rig, batch_id)
        assert rig.code_exchanges() == 1  # the code was exchanged once in all


@pytest.mark.parametrize("comeback", ["redelivered redirect", "approval link"])
async def test_crash_after_the_code_exchange_gets_a_new_consent_and_pays_once(store: Store, comeback: str) -> None:
    """The tokens existed only in the lost answer, the code is spent and the bank refuses a new PAR for the
    Authorised consent: that consent can never be paid. Once no other exchange can still deliver its tokens,
    the flow goes back for a new consent behind the same approval link (no second AUTHORIZATION_REQUIRED),
    the approver approves once more, and exactly one payment is made, under the new consent."""
    async with engine_rig(store, settings=SETTINGS) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        link = rig.approval_url(batch_id)
        first_consent = rig.flow(batch_id).consent_id
        redirect = await _decided_redirect(rig, batch_id)
        params = {k: v[0] for k, v in parse_qs(urlsplit(redirect).query).items()}
        with pytest.raises(Crash):
            await doomed_engine(rig, "exchange:after").authorizer.complete(params)
        if comeback == "approval link":
            soon = await rig.open_link(link)  # the dead exchange is recent: its tokens might still be stored
            assert soon.status_code == 409 and "confirming" in soon.text, soon.text
            assert rig.flow(batch_id).state == FlowState.AWAITING_AUTHORIZATION
        rig.clock.advance(SETTINGS.exchange_recovery_after + 1)
        if comeback == "redelivered redirect":
            again = await rig.http.get(redirect)  # the spent code is refused; the consent is Authorised
        else:
            again = await rig.open_link(link)  # the PAR is refused; the consent is Authorised
        assert again.status_code == 409 and "approve once more" in again.text, again.text
        replaced = rig.flow(batch_id)
        assert replaced.state == FlowState.RECEIVED and replaced.consent_id is None
        await finish(rig, batch_id)

        flow = rig.flow(batch_id)
        assert flow.state == FlowState.COMPLETED and flow.consent_id not in (None, first_consent)
        assert rig.count("file_consent") == 2 and rig.count("file_payment") == 1
        assert rig.statuses(batch_id) == STORY  # the approver was asked once; the same link served both consents
        authorized = [e for e in rig.events(batch_id) if e.payload["status"] == "AUTHORIZED"]
        assert [e.payload["consent_id"] for e in authorized] == [flow.consent_id]
        replaced_scope = f"{batch_id}/replaced/{first_consent}"
        effects = rig.store.run(lambda tx: {op: tx.side_effects.get(replaced_scope, op) for op in Operation})
        assert sorted(op.value for op, e in effects.items() if e is not None) == ["create_consent", "upload"]
        assert rig.count("file_payment") == 1


async def test_the_old_redirect_after_a_replacement_sends_the_approver_back_to_the_link(store: Store) -> None:
    """After the consent was replaced (its exchange's answer was lost), the first consent's redirect delivered
    again must not answer "already received" while the flow waits for the approver on the new consent: the
    approver would stop there and the batch would wait until its deadline. It answers 409, open the link."""
    async with engine_rig(store, settings=SETTINGS) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        redirect = await _decided_redirect(rig, batch_id)
        params = {k: v[0] for k, v in parse_qs(urlsplit(redirect).query).items()}
        with pytest.raises(Crash):
            await doomed_engine(rig, "exchange:after").authorizer.complete(params)
        rig.clock.advance(SETTINGS.exchange_recovery_after + 1)
        replaced = await rig.http.get(redirect)
        assert replaced.status_code == 409 and "approve once more" in replaced.text, replaced.text
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION, engine=rig.new_engine())
        again = await rig.http.get(redirect)  # the approver reloads the old page
        assert again.status_code == 409, again.text
        assert "approval link" in again.text and "already received" not in again.text, again.text
        assert rig.flow(batch_id).state == FlowState.AWAITING_AUTHORIZATION
        await authorised(rig, batch_id)
        await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED, engine=rig.new_engine())
        assert rig.flow(batch_id).state == FlowState.COMPLETED and rig.count("file_payment") == 1


async def test_the_link_opened_again_while_the_redirect_is_on_its_way_does_not_replace_the_consent(
    store: Store,
) -> None:
    """The bank marks the consent Authorised when the approver decides, before our exchange: opening the link
    again in that moment (a second tab) must not take the consent for a stranded one."""
    async with engine_rig(store, settings=SETTINGS) as rig:
        document = batch()
        batch_id = document["batch_id"]
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        consent_id = rig.flow(batch_id).consent_id
        redirect = await _decided_redirect(rig, batch_id)  # approved at the bank; the redirect not delivered yet
        reopened = await rig.open_link(rig.approval_url(batch_id))
        assert reopened.status_code == 409 and "confirming" in reopened.text, reopened.text
        assert rig.flow(batch_id).consent_id == consent_id
        delivered = await rig.http.get(redirect)
        assert delivered.status_code == 200, delivered.text
        await finish(rig, batch_id)
        assert_paid_once(rig, batch_id)  # one consent


# -- killed: a real process SIGKILLed between the steps ----------------------------------------------------------


async def run_child(rig: Rig, target: StoreTarget, key: str, batch_id: str, point: str) -> int:
    """Run the engine in a child process until it SIGKILLs itself at `point`; its exit status."""
    args: dict[str, Any] = {
        "url": target.url,
        "schema": target.schema,
        "key": key,
        "sandbox_url": rig.sandbox_url,
        "public_url": rig.public_url,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "signing_key": key_pair().private_pem,
        "now": rig.clock.now().isoformat(),
        "point": point,
        "batch_id": batch_id,
    }
    env = {**os.environ, "PYTHONPATH": child_pythonpath(HERE)}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "file_engine_child.py"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    _, err = await asyncio.wait_for(child.communicate(json.dumps(args).encode()), timeout=120)
    assert child.returncode is not None
    assert child.returncode == KILLED, err.decode()[-3000:]
    return child.returncode


@pytest.mark.parametrize("point", ["create_consent:after", "create_payment:after", "poll:after"])
async def test_killed_process_resumes_without_a_second_resource(store_target: StoreTarget, point: str) -> None:
    key = generate_key()
    store = store_target.open(Cipher.from_text(key))
    try:
        async with engine_rig(store, settings=SETTINGS) as rig:
            document = batch()
            batch_id = document["batch_id"]
            await rig.submit(document)
            if point in ("create_payment:after", "poll:after"):
                await authorised(rig, batch_id)
            if point == "poll:after":
                flow = await rig.to_state(batch_id, FlowState.INITIATED)
                assert flow.next_action_at is not None
                rig.clock.advance((flow.next_action_at - rig.clock.now()).total_seconds())
            await run_child(rig, store_target, key, batch_id, point)
            dead = rig.flow(batch_id)
            assert dead.lease_owner is not None and dead.lease_owner.startswith("child-")
            await finish(rig, batch_id)
            assert_paid_once(rig, batch_id)
    finally:
        store.close()
