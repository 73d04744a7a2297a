"""Every fault kind, and the admin routes, against a real uvicorn server on loopback (port 0).

The app is the real sandbox app (`create_app`) plus one tiny named route, `things.create`, that stores a
document per call, so "was it committed?" is answered by the admin counts endpoint.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from manual_clock import ManualClock
from sandbox_process import file_consent_example, running_sandbox
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import sandbox.faults
from processor.cli.common import serving
from processor.devtools.processes import listening_socket, port_of
from sandbox.app import _wrapped_routes, create_app
from sandbox.clients import ClientRegistry
from sandbox.config import SandboxConfig
from sandbox.faults import FaultPlan
from sandbox.jsonutil import dumps
from sandbox.oauth.tokens import issue_access_token
from sandbox.state import Bank

THING = "thing"
CONSENTS = "/open-banking/v3.1/pisp/file-payment-consents"
INTERACTION_ID = "0b8e7f4e-8f63-4c8e-9a55-3d1f0f3b9a11"


@dataclass
class Running:
    bank: Bank
    http: httpx.AsyncClient

    async def things(self) -> int:
        r = await self.http.get("/__sandbox/counts", params={"kind": THING})
        assert r.status_code == 200, r.text
        return int(r.json()[THING])

    async def plan(self, plan: object) -> dict[str, object]:
        r = await self.http.put("/__sandbox/faults", json=plan)
        assert r.status_code == 200, r.text
        return dict(r.json())


def tiny_route(bank: Bank) -> Route:
    async def create_thing(request: Request) -> Response:
        key = str(bank.store.count(THING) + 1)
        bank.store.put(THING, key, {"n": key})
        return JSONResponse({"Data": {"ThingId": key}}, 201)

    return Route("/things", create_thing, methods=["POST"], name="things.create")


@asynccontextmanager
async def serve(admin: bool = True, plan: FaultPlan | None = None) -> AsyncIterator[Running]:
    bank = Bank(config=SandboxConfig(admin=admin), clients=ClientRegistry(), clock=ManualClock())
    if plan is not None:
        bank.faults = plan
    app = create_app(bank)
    # The tiny route goes through the same wrapping (fault plan + error rendering) as every named route.
    app.router.routes.extend(_wrapped_routes(bank, [tiny_route(bank)]))
    with listening_socket() as sock:
        async with (
            serving(app, sock),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port_of(sock)}", timeout=10) as http,
        ):
            yield Running(bank, http)


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    async with serve() as r:
        yield r


async def test_no_plan_creates_normally(running: Running) -> None:
    r = await running.http.post("/things")
    assert r.status_code == 201
    assert await running.things() == 1


async def test_drop_closes_the_connection_before_anything_is_committed(running: Running) -> None:
    await running.plan({"rules": [{"operation": "things.create", "fault": "drop", "times": 1}]})
    with pytest.raises(httpx.RemoteProtocolError):
        await running.http.post("/things")
    assert await running.things() == 0
    assert (await running.http.post("/things")).status_code == 201  # times: 1 is used up
    assert await running.things() == 1


async def test_commit_then_drop_creates_the_resource_but_the_client_sees_a_closed_connection(running: Running) -> None:
    await running.plan([{"operation": "things.*", "fault": "commit_then_drop", "times": 1}])
    with pytest.raises(httpx.RemoteProtocolError):
        await running.http.post("/things")
    assert await running.things() == 1


async def test_commit_then_fail_creates_the_resource_and_answers_500(running: Running) -> None:
    await running.plan([{"operation": "things.create", "fault": "commit_then_fail", "times": 1}])
    r = await running.http.post("/things", headers={"x-fapi-interaction-id": INTERACTION_ID})
    assert r.status_code == 500
    body = r.json()
    assert set(body) == {"Code", "Message", "Errors"}
    assert body["Code"] == "UK.OBIE.UnexpectedError"
    assert "ThingId" not in r.text  # the client does not learn what was created
    assert r.headers["x-fapi-interaction-id"] == INTERACTION_ID
    assert await running.things() == 1
    retry = await running.http.post("/things")
    assert retry.status_code == 201
    assert await running.things() == 2  # a blind resubmit pays twice: what clients must avoid


async def test_error_rate_answers_before_the_handler(running: Running) -> None:
    await running.plan([{"operation": "*", "fault": "error", "status": 503, "times": 2}])
    statuses = [(await running.http.post("/things")).status_code for _ in range(3)]
    assert statuses == [503, 503, 201]
    assert await running.things() == 1


async def test_rate_limit_sends_retry_after(running: Running) -> None:
    await running.plan([{"operation": "things.create", "fault": "rate_limit", "retry_after": 17, "times": 1}])
    r = await running.http.post("/things")
    assert r.status_code == 429
    assert r.headers["retry-after"] == "17"
    assert r.json()["Message"].startswith("too_many_requests")
    assert await running.things() == 0


async def test_latency_before_delays_the_answer(running: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    # The plan's waits are recorded (and skipped) rather than timed: a wall-clock bound fails under load.
    slept: list[tuple[float, int]] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(seconds: float) -> None:
        slept.append((seconds, running.bank.store.count(THING)))
        await real_sleep(0)

    monkeypatch.setattr(sandbox.faults, "asyncio", SimpleNamespace(sleep=recording_sleep))
    await running.plan([{"operation": "things.create", "fault": "latency", "latency_ms": 300, "times": 1}])
    r = await running.http.post("/things")
    assert r.status_code == 201
    assert slept == [(0.3, 0)]  # 300 ms, before the handler created anything
    assert (await running.http.post("/things")).status_code == 201
    assert slept == [(0.3, 0)]  # used up: no delay the second time
    assert await running.things() == 2


async def test_latency_after_commit_makes_a_client_time_out_on_a_created_resource(running: Running) -> None:
    await running.plan([{"operation": "things.create", "fault": "latency", "latency_ms": 800, "phase": "after"}])
    with pytest.raises(httpx.ReadTimeout):
        await running.http.post("/things", timeout=0.2)
    assert await running.things() == 1


async def test_seeded_rate_gives_the_same_pattern_over_http(running: Running) -> None:
    plan = {"seed": 99, "rules": [{"operation": "things.create", "fault": "error", "probability": 0.5}]}
    patterns = []
    for _ in range(2):
        await running.plan(plan)
        patterns.append([(await running.http.post("/things")).status_code for _ in range(20)])
    assert patterns[0] == patterns[1]
    assert {500, 201} == set(patterns[0])


async def test_admin_faults_reports_counters(running: Running) -> None:
    await running.plan({"seed": 5, "rules": [{"operation": "things.create", "fault": "error", "times": 1}]})
    for _ in range(3):
        await running.http.post("/things")
    r = await running.http.get("/__sandbox/faults")
    assert r.status_code == 200
    rule = r.json()["rules"][0]
    assert (rule["matched"], rule["fired"], rule["remaining"]) == (3, 1, 0)
    assert r.json()["seed"] == 5


async def test_admin_routes_are_never_faulted(running: Running) -> None:
    await running.plan([{"operation": "*", "fault": "drop"}])
    assert (await running.http.get("/__sandbox/faults")).status_code == 200
    assert (await running.http.get("/__sandbox/clock")).status_code == 200
    assert await running.things() == 0
    await running.plan([])
    assert (await running.http.post("/things")).status_code == 201


async def test_admin_faults_refuses_an_invalid_plan_and_keeps_the_old_one(running: Running) -> None:
    await running.plan([{"operation": "things.create", "fault": "error"}])
    r = await running.http.put("/__sandbox/faults", json=[{"operation": "x", "fault": "explode"}])
    assert r.status_code == 400
    assert r.json()["Code"] == "UK.OBIE.Resource.InvalidFormat"
    assert "fault must be one of" in r.json()["Message"]
    bad_json = await running.http.put("/__sandbox/faults", content=b"{not json")
    assert bad_json.status_code == 400
    assert (await running.http.post("/things")).status_code == 500  # old plan still in force


async def test_admin_clock_moves_the_bank_clock(running: Running) -> None:
    before = (await running.http.get("/__sandbox/clock")).json()
    assert before["now"] == "2026-11-02T09:00:00.000Z"
    r = await running.http.post("/__sandbox/clock", json={"advance_seconds": 601})
    assert r.status_code == 200
    assert r.json()["now"] == "2026-11-02T09:10:01.000Z"
    assert running.bank.now().isoformat() == "2026-11-02T09:10:01+00:00"
    fraction = await running.http.post("/__sandbox/clock", content=b'{"advance_seconds": 0.5}')
    assert fraction.json()["now"] == "2026-11-02T09:10:01.500Z"


@pytest.mark.parametrize(
    "body", [b'{"advance_seconds": -1}', b'{"advance_seconds": "10"}', b'{"advance_seconds": true}', b"{}", b"[]"]
)
async def test_admin_clock_refuses_bad_input(running: Running, body: bytes) -> None:
    r = await running.http.post("/__sandbox/clock", content=body)
    assert r.status_code == 400
    assert r.json()["Code"] == "UK.OBIE.Resource.InvalidFormat"
    assert (await running.http.get("/__sandbox/clock")).json()["now"] == "2026-11-02T09:00:00.000Z"


async def test_admin_counts_lists_the_standard_kinds_and_extra_ones(running: Running) -> None:
    running.bank.store.put("file_consent", "pay-fi-1", {"status": "AwaitingUpload"})
    r = await running.http.get("/__sandbox/counts", params=[("kind", "thing"), ("kind", "idempotency")])
    assert r.json() == {
        "file_consent": 1,
        "file_payment": 0,
        "vrp_consent": 0,
        "domestic_vrp": 0,
        "access_token": 0,
        "thing": 0,
        "idempotency": 0,
    }


async def test_admin_routes_are_absent_without_admin() -> None:
    async with serve(admin=False, plan=FaultPlan.from_json([{"operation": "things.create", "fault": "error"}])) as r:
        for method, path in [("GET", "/__sandbox/clock"), ("GET", "/__sandbox/faults"), ("GET", "/__sandbox/counts")]:
            assert (await r.http.request(method, path)).status_code == 404
        put = await r.http.put("/__sandbox/faults", json=[])
        assert put.status_code in (404, 405)
        assert (await r.http.post("/things")).status_code == 500  # the plan given at start still applies


async def test_commit_then_fail_on_real_consent_creation_and_an_idempotent_retry(running: Running) -> None:
    """The real A1 route: the consent exists after the 500, and a retry with the same key finds it."""
    token = issue_access_token(running.bank, "c1", "client_credentials", "payments", None, 600).value
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "x-fapi-interaction-id": INTERACTION_ID,
        "x-idempotency-key": "batch-0001-consent",
    }
    await running.plan([{"operation": "file-payment-consents.create", "fault": "commit_then_fail", "times": 1}])
    body = dumps(file_consent_example())
    first = await running.http.post(CONSENTS, content=body, headers=headers)
    assert first.status_code == 500
    assert first.json()["Code"] == "UK.OBIE.UnexpectedError"
    counts = (await running.http.get("/__sandbox/counts")).json()
    assert counts["file_consent"] == 1
    retry = await running.http.post(CONSENTS, content=body, headers=headers)
    assert retry.status_code == 201
    assert retry.json()["Data"]["Status"] == "AwaitingUpload"
    assert (await running.http.get("/__sandbox/counts")).json()["file_consent"] == 1


def test_cli_refuses_an_invalid_faults_file(tmp_path: Path) -> None:
    (tmp_path / "clients.json").write_text('{"clients": []}')
    (tmp_path / "faults.json").write_text(
        json.dumps({"rules": [{"operation": "token", "fault": "error", "times": -2}]})
    )
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", "sandbox", "--clients", str(tmp_path / "clients.json"),
         "--faults", str(tmp_path / "faults.json"), "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "rules[0].times must be at least 0" in done.stderr


def test_dispersion_sandbox_serves_the_faults_file(tmp_path: Path) -> None:
    """`dispersion sandbox --faults FILE --admin` as a real process: the plan applies from the first call."""
    plan = {
        "seed": 1,
        "rules": [
            {"operation": "discovery", "fault": "drop", "times": 1},
            {"operation": "token", "fault": "rate_limit", "retry_after": 4, "times": 1},
        ],
    }
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps(plan))
    with running_sandbox(tmp_path, "--faults", str(faults), "--admin") as sandbox:
        client = sandbox.client
        basic = {"Authorization": "Basic " + base64.b64encode(
            f"{client['client_id']}:{client['client_secret']}".encode()).decode()}  # fmt: skip
        with httpx.Client(base_url=sandbox.base_url, timeout=10) as http:
            with pytest.raises(httpx.RemoteProtocolError):
                http.get("/.well-known/openid-configuration", headers=basic)
            assert http.get("/.well-known/openid-configuration", headers=basic).status_code == 200
            form = {"grand_type": "client_credentials", "scope": "payments openid"}
            limited = http.post("/token", data=form, headers=basic)
            assert limited.status_code == 429
            assert limited.headers["retry-after"] == "4"
            assert limited.json()["error"] == "temporarily_unavailable"
            assert http.post("/token", data=form, headers=basic).status_code == 200
            stats = http.get("/__sandbox/faults").json()
            assert [(r["fired"], r["remaining"]) for r in stats["rules"]] == [(1, 0), (1, 0)]
            assert http.get("/__sandbox/counts").json()["access_token"] == 1
