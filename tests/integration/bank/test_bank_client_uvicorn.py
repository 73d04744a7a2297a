"""The real client against the sandbox served by uvicorn on loopback: real TCP, so real drops and timeouts.

Two set-ups: the sandbox app in a uvicorn thread (manual clock and fault plan reachable from the test), and the
`dispersion sandbox` command as a separate process driven through its admin endpoints.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from bank_support import (
    Recording,
    SandboxRig,
    Sleeps,
    decide,
    file_initiation,
    file_payload,
    make_integration,
    processor_transport,
    sandbox_rig,
    uvicorn_thread,
    with_references,
)
from sandbox_process import running_sandbox

from processor.bank import errors
from processor.bank.auth import new_pkce, new_state
from processor.bank.client import BankClient, new_idempotency_key
from processor.cli.config import load_config
from processor.devtools.processes import listening_socket, port_of

PAYMENTS = "/open-banking/v3.1/pisp/file-payments"
CONSENTS = "/open-banking/v3.1/pisp/file-payment-consents"


@dataclass
class Served:
    sandbox: SandboxRig
    base: str


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with listening_socket() as sock:
        base = f"http://127.0.0.1:{port_of(sock)}"
        sandbox = sandbox_rig(base)
        with uvicorn_thread(sandbox.app, sock):
            yield Served(sandbox, base)


@pytest.fixture
async def client(served: Served) -> AsyncIterator[tuple[BankClient, Recording, Sleeps]]:
    served.sandbox.set_faults([])
    sent = Recording(processor_transport())
    sleeps = Sleeps()
    bank = await BankClient.start(
        make_integration(served.base, timeouts={"read": 0.5}),
        transport=sent,
        clock=served.sandbox.clock,
        sleep=sleeps,
        rand=lambda: 0.5,
    )
    try:
        yield bank, sent, sleeps
    finally:
        served.sandbox.set_faults([])
        await bank.aclose()


async def test_dropped_connection_on_token_is_retried(
    served: Served, client: tuple[BankClient, Recording, Sleeps]
) -> None:
    bank, sent, sleeps = client
    served.sandbox.set_faults([{"operation": "token", "fault": "drop", "times": 1}])
    bank.forget_client_credentials_token()
    token = await bank.client_credentials_token()
    assert token.expires_in == 600
    assert len(sent.to("/token", "POST")) == 2
    assert len(sleeps.slept) == 1


async def test_commit_then_drop_on_consent_creation_yields_one_consent(
    served: Served, client: tuple[BankClient, Recording, Sleeps]
) -> None:
    bank, sent, _ = client
    before = served.sandbox.count("file_consent")
    served.sandbox.set_faults([{"operation": "file-payment-consents.create", "fault": "commit_then_drop", "times": 1}])
    key = new_idempotency_key()
    consent = await bank.create_file_consent(file_initiation(), idempotency_key=key)
    calls = sent.to(CONSENTS, "POST")
    assert len(calls) == 2
    assert {c.headers["x-idempotency-key"] for c in calls} == {key}
    assert calls[0].body == calls[1].body
    assert served.sandbox.count("file_consent") == before + 1
    assert served.sandbox.bank.store.get("file_consent", consent.consent_id) is not None


async def test_drops_that_outlast_the_retries_surface_as_ambiguous(
    served: Served, client: tuple[BankClient, Recording, Sleeps]
) -> None:
    bank, sent, _ = client
    before = served.sandbox.count("file_consent")
    served.sandbox.set_faults([{"operation": "file-payment-consents.create", "fault": "drop"}])
    key = new_idempotency_key()
    with pytest.raises(errors.ConnectionDropped) as caught:
        await bank.create_file_consent(file_initiation(), idempotency_key=key)
    assert caught.value.ambiguous and caught.value.retry_safe
    assert caught.value.idempotency_key == key
    assert caught.value.attempts == 5
    assert len(sent.to(CONSENTS, "POST")) == 5
    assert served.sandbox.count("file_consent") == before  # `drop` never ran the handler
    # The same key, once the bank behaves, creates it exactly once.
    served.sandbox.set_faults([])
    await bank.create_file_consent(file_initiation(), idempotency_key=key)
    await bank.create_file_consent(file_initiation(), idempotency_key=key)
    assert served.sandbox.count("file_consent") == before + 1


async def test_read_timeout_is_retried(served: Served, client: tuple[BankClient, Recording, Sleeps]) -> None:
    bank, sent, _ = client
    consent = await bank.create_file_consent(file_initiation(), idempotency_key=new_idempotency_key())
    served.sandbox.set_faults(
        [{"operation": "file-payment-consents.get", "fault": "latency", "latency_ms": 1500, "times": 1}]
    )
    read = await bank.get_file_consent(consent.consent_id)
    assert read.consent_id == consent.consent_id
    assert len(sent.to(f"{CONSENTS}/{consent.consent_id}", "GET")) == 2


async def test_read_timeout_on_every_attempt_is_a_timeout_error(
    served: Served, client: tuple[BankClient, Recording, Sleeps]
) -> None:
    bank, _, _ = client
    bank.retry_policy = type(bank.retry_policy)(max_attempts=2, base_delay=0.0)
    served.sandbox.set_faults([{"operation": "file-payments.get", "fault": "latency", "latency_ms": 1200}])
    with pytest.raises(errors.Timeout) as caught:
        await bank.get_file_payment("fp-slow")
    assert caught.value.ambiguous and caught.value.attempts == 2


async def test_nobody_listening_is_a_connect_error(unserved_port: int) -> None:
    port = unserved_port
    sleeps = Sleeps()
    integration = make_integration(f"http://127.0.0.1:{port}", retry={"max_attempts": 3})
    with pytest.raises(errors.ConnectError) as caught:
        await BankClient.start(integration, sleep=sleeps, rand=lambda: 0.5)
    assert not caught.value.ambiguous and caught.value.retry_safe
    assert caught.value.attempts == 3
    assert sleeps.slept == [0.125, 0.25]


# -- the `dispersion sandbox` command as its own process ----------------------------------------------------------


@dataclass
class SandboxProcess:
    base: str
    directory: Path


@pytest.fixture(scope="module")
def sandbox_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """`dispersion sandbox init DIR` then `dispersion sandbox --admin` on a held loopback port."""
    directory = tmp_path_factory.mktemp("sandbox")
    with running_sandbox(directory, "--admin", "--file-payment-delay", "0") as sandbox:
        yield SandboxProcess(sandbox.base_url, directory)


class ShiftedClock:
    """The wall clock plus an offset, moved in step with the sandbox process's admin clock."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


async def admin(base: str, method: str, path: str, body: Any = None) -> Any:
    async with httpx.AsyncClient() as http:
        response = await http.request(method, f"{base}/__sandbox{path}", json=body)
        assert response.status_code == 200, response.text
        return response.json()


async def test_flow_a_against_the_sandbox_process_with_a_lost_payment_answer(sandbox_process: SandboxProcess) -> None:
    """The configuration `sandbox init` wrote, loaded as is, drives flow A against the real process."""
    base = sandbox_process.base
    clock = ShiftedClock()
    integration = load_config(sandbox_process.directory / "dispersion.toml").integrations["sandbox"]
    assert integration.issuer == base and integration.token_auth_method == "private_key_jwt"
    bank = await BankClient.start(integration, sleep=Sleeps(), clock=clock)
    async with bank, httpx.AsyncClient() as browser:
        payload = file_payload()
        consent = await bank.create_file_consent(file_initiation(payload), idempotency_key=new_idempotency_key())
        await bank.upload_file(
            consent.consent_id, with_references(payload, consent.consent_id), idempotency_key=new_idempotency_key()
        )
        pkce = new_pkce()
        par = await bank.push_authorization_request(consent.consent_id, pkce, new_state())
        query = await decide(browser, await bank.authorization_url(consent.consent_id, par.request_uri))
        token = await bank.exchange_code(query["code"], pkce.verifier, expected_consent_id=consent.consent_id)
        await admin(
            base, "PUT", "/faults", [{"operation": "file-payments.create", "fault": "commit_then_drop", "times": 1}]
        )
        payment = await bank.create_file_payment(
            consent.consent_id,
            consent.initiation,
            access_token=token.access_token,
            idempotency_key=new_idempotency_key(),
        )
        faults = await admin(base, "GET", "/faults")
        assert faults["rules"][0]["fired"] == 1
        counts = await admin(base, "GET", "/counts")
        assert counts["file_payment"] == 1
        done = await bank.get_file_payment(payment.file_payment_id)
        assert done.status == "InitiationCompleted"
        report = await bank.get_file_payment_report(payment.file_payment_id)
        assert [line.status for line in report.lines] == ["Settled", "Settled", "Rejected"]
        # Ten minutes pass on both sides: the cached client-credentials token is renewed, not reused.
        fetched = (await admin(base, "GET", "/counts"))["access_token"]
        await admin(base, "POST", "/clock", {"advance_seconds": 601})
        clock.offset += timedelta(seconds=601)
        assert (await bank.get_file_consent(consent.consent_id)).status == "Consumed"
        assert (await admin(base, "GET", "/counts"))["access_token"] == fetched + 1  # one client-credentials token


async def test_a_call_leaves_no_cycle_holding_its_request_and_answer(sandbox_process: SandboxProcess) -> None:
    """httpx ties each response to its stream and back: unless the client unbinds it, the request (a file's body)
    and the answer (the bank's echo of the file) stay in memory until the cyclic collector happens to run."""
    integration = load_config(sandbox_process.directory / "dispersion.toml").integrations["sandbox"]
    clock = ShiftedClock()  # in step with the module's sandbox process, whose clock another test moves
    clock.offset = (
        datetime.fromtimestamp((await admin(sandbox_process.base, "GET", "/clock"))["epoch"], UTC) - clock.now()
    )
    bank = await BankClient.start(integration, sleep=Sleeps(), clock=clock)
    async with bank:
        await bank.create_file_consent(file_initiation(file_payload()), idempotency_key=new_idempotency_key())
        gc.collect()
        gc.disable()
        try:
            consent = await bank.create_file_consent(
                file_initiation(file_payload()), idempotency_key=new_idempotency_key()
            )
            assert (await bank.get_file_consent(consent.consent_id)).status == "AwaitingUpload"
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = [type(o).__name__ for o in gc.garbage if isinstance(o, httpx.Response | httpx.Request)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert left == []
