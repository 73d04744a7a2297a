"""The real client against the real sandbox with injected faults (docs/sandbox-faults.md), in process.

Proves: transient failures are retried (5xx, 429 with Retry-After), semantic ones are not, creating calls reuse
their x-idempotency-key and body on every retry, "commit then fail" never yields a second resource, and an
ambiguous outcome that outlives the retries is resolved by reading the resource.
Dropped connections need a real server: see test_bank_client_uvicorn.py.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest
from bank_support import (
    Recording,
    SandboxRig,
    Sleeps,
    decide,
    file_initiation,
    file_payload,
    make_integration,
    sandbox_rig,
    vrp_consent_parts,
    with_references,
)

from processor.bank import errors
from processor.bank.auth import new_pkce, new_state
from processor.bank.client import BankClient, new_idempotency_key
from processor.bank.models import FileConsent, TokenResponse
from processor.bank.vrp_payments import domestic_vrp_body, vrp_consent_body

CONSENTS = "/open-banking/v3.1/pisp/file-payment-consents"
PAYMENTS = "/open-banking/v3.1/pisp/file-payments"


@dataclass
class Rig:
    sandbox: SandboxRig
    client: BankClient
    sent: Recording
    sleeps: Sleeps
    browser: httpx.AsyncClient

    def faults(self, *rules: dict[str, Any]) -> None:
        self.sandbox.set_faults(list(rules))


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    sandbox = sandbox_rig()
    sent = Recording(sandbox.transport())
    sleeps = Sleeps()
    client = await BankClient.start(
        make_integration(), transport=sent, clock=sandbox.clock, sleep=sleeps, rand=lambda: 0.5
    )
    browser = httpx.AsyncClient(transport=sandbox.transport())
    try:
        yield Rig(sandbox, client, sent, sleeps, browser)
    finally:
        await client.aclose()
        await browser.aclose()


async def uploaded_consent(rig: Rig) -> FileConsent:
    payload = file_payload()
    consent = await rig.client.create_file_consent(file_initiation(payload), idempotency_key=new_idempotency_key())
    await rig.client.upload_file(
        consent.consent_id, with_references(payload, consent.consent_id), idempotency_key=new_idempotency_key()
    )
    return consent


async def authorised(rig: Rig, consent_id: str) -> TokenResponse:
    pkce = new_pkce()
    par = await rig.client.push_authorization_request(consent_id, pkce, new_state())
    query = await decide(rig.browser, await rig.client.authorization_url(consent_id, par.request_uri))
    return await rig.client.exchange_code(query["code"], pkce.verifier, expected_consent_id=consent_id)


def assert_same_key_and_body(calls: list[Any], count: int) -> None:
    assert len(calls) == count
    assert len({c.headers["x-idempotency-key"] for c in calls}) == 1
    assert len({c.body for c in calls}) == 1
    assert len({c.headers["x-fapi-interaction-id"] for c in calls}) == count  # new id per attempt


async def test_503_twice_then_success_reuses_key_and_body(rig: Rig) -> None:
    rig.faults({"operation": "file-payment-consents.create", "fault": "error", "status": 503, "times": 2})
    key = new_idempotency_key()
    consent = await rig.client.create_file_consent(file_initiation(), idempotency_key=key)
    calls = rig.sent.to(CONSENTS, "POST")
    assert_same_key_and_body(calls, 3)
    assert calls[0].headers["x-idempotency-key"] == key
    # Full jitter at rand=0.5 over 0.25 * 2**n would wait 0.125 s and 0.25 s; a resend under the same key waits
    # at least a second.
    assert rig.sleeps.slept == [1.0, 1.0]
    assert rig.sandbox.count("file_consent") == 1
    assert consent.interaction_id == calls[-1].headers["x-fapi-interaction-id"]


async def test_commit_then_fail_on_consent_gives_back_the_same_consent(rig: Rig) -> None:
    rig.faults({"operation": "file-payment-consents.create", "fault": "commit_then_fail", "times": 1})
    consent = await rig.client.create_file_consent(file_initiation(), idempotency_key=new_idempotency_key())
    assert_same_key_and_body(rig.sent.to(CONSENTS, "POST"), 2)
    assert rig.sandbox.count("file_consent") == 1
    (stored_id,) = [k for k, _ in rig.sandbox.bank.store.items("file_consent")]
    assert consent.consent_id == stored_id


async def test_commit_then_fail_on_upload_and_payment_never_duplicates(rig: Rig) -> None:
    rig.faults({"operation": "file-payment-consents.upload", "fault": "commit_then_fail", "times": 1})
    consent = await uploaded_consent(rig)
    assert_same_key_and_body(rig.sent.to("/file", "POST"), 2)
    token = await authorised(rig, consent.consent_id)
    rig.faults({"operation": "file-payments.create", "fault": "commit_then_fail", "status": 502, "times": 1})
    payment = await rig.client.create_file_payment(
        consent.consent_id, consent.initiation, access_token=token.access_token, idempotency_key=new_idempotency_key()
    )
    assert_same_key_and_body(rig.sent.to(PAYMENTS, "POST"), 2)
    assert rig.sandbox.count("file_payment") == 1
    (stored_id,) = [k for k, _ in rig.sandbox.bank.store.items("file_payment")]
    assert payment.file_payment_id == stored_id


async def test_commit_then_fail_on_domestic_vrp_never_duplicates(rig: Rig) -> None:
    parts = vrp_consent_parts(rig.sandbox.clock.now())
    rig.faults({"operation": "domestic-vrp-consents.create", "fault": "commit_then_fail", "times": 1})
    consent = await rig.client.create_vrp_consent(vrp_consent_body(**parts), idempotency_key=new_idempotency_key())
    assert rig.sandbox.count("vrp_consent") == 1
    token = await authorised(rig, consent.consent_id)
    rig.faults({"operation": "domestic-vrps.create", "fault": "commit_then_fail", "times": 1})
    instruction = {
        "InstructionIdentification": "instr-1",
        "EndToEndIdentification": "e2e-1",
        "CreditorAccount": parts["initiation"]["CreditorAccount"],
        "InstructedAmount": {"Amount": "99.99", "Currency": "GBP"},
    }
    vrp = await rig.client.create_domestic_vrp(
        domestic_vrp_body(consent.consent_id, consent.initiation, instruction),
        access_token=token.access_token,
        idempotency_key=new_idempotency_key(),
    )
    assert_same_key_and_body(rig.sent.to("/domestic-vrps", "POST"), 2)
    assert rig.sandbox.count("domestic_vrp") == 1
    assert (await rig.client.get_domestic_vrp(vrp.domestic_vrp_id)).consent_id == consent.consent_id


async def test_rate_limit_honours_retry_after(rig: Rig) -> None:
    rig.faults({"operation": "token", "fault": "rate_limit", "retry_after": 3, "times": 2})
    token = await rig.client.client_credentials_token()
    assert token.scope == "payments"
    assert rig.sleeps.slept == [3.0, 3.0]
    calls = rig.sent.to("/token", "POST")
    assert len(calls) == 3
    # Each attempt carries a freshly signed assertion: the bank refuses a reused jti.
    jtis = {jwt.decode(c.form()["client_assertion"], options={"verify_signature": False})["jti"] for c in calls}
    assert len(jtis) == 3


async def test_retry_after_beyond_the_limit_surfaces_at_once(rig: Rig) -> None:
    rig.faults({"operation": "token", "fault": "rate_limit", "retry_after": 1000, "times": 1})
    with pytest.raises(errors.RateLimited) as caught:
        await rig.client.client_credentials_token()
    assert caught.value.retry_after == 1000.0
    assert caught.value.retry_safe
    assert len(rig.sent.to("/token", "POST")) == 1
    assert rig.sleeps.slept == []


async def test_committed_token_then_500_is_retried_with_a_new_assertion(rig: Rig) -> None:
    rig.faults({"operation": "token", "fault": "commit_then_fail", "times": 1})
    await rig.client.client_credentials_token()
    assert len(rig.sent.to("/token", "POST")) == 2
    assert rig.sandbox.count("access_token") == 2  # the lost one and ours; tokens are harmless to repeat


async def test_persistent_5xx_gives_up_after_bounded_attempts(rig: Rig) -> None:
    consent = await uploaded_consent(rig)
    rig.faults({"operation": "file-payment-consents.get", "fault": "error", "status": 500})
    with pytest.raises(errors.ServerError) as caught:
        await rig.client.get_file_consent(consent.consent_id)
    assert caught.value.attempts == rig.client.retry_policy.max_attempts == 5
    assert len(rig.sent.to(f"{CONSENTS}/{consent.consent_id}", "GET")) == 5
    assert len(rig.sleeps.slept) == 4
    assert rig.sleeps.slept[0] < 1.0  # a read is not a resend: plain backoff
    assert caught.value.code == "UK.OBIE.UnexpectedError"


async def test_semantic_errors_are_not_retried_even_with_faults_around(rig: Rig) -> None:
    rig.faults({"operation": "file-payments.get", "fault": "latency", "latency_ms": 1})
    with pytest.raises(errors.NotFound):
        await rig.client.get_file_payment("fp-unknown")
    assert len(rig.sent.to("/file-payments/fp-unknown", "GET")) == 1


async def test_ambiguous_payment_resolved_by_reading_the_consent(rig: Rig) -> None:
    consent = await uploaded_consent(rig)
    token = await authorised(rig, consent.consent_id)
    key = new_idempotency_key()
    # Every attempt's answer is lost, the first one committed.
    rig.faults(
        {"operation": "file-payments.create", "fault": "commit_then_fail", "times": 1},
        {"operation": "file-payments.create", "fault": "error", "status": 503, "times": 4},
    )
    with pytest.raises(errors.ServerError) as caught:
        await rig.client.create_file_payment(
            consent.consent_id, consent.initiation, access_token=token.access_token, idempotency_key=key
        )
    assert caught.value.ambiguous and caught.value.retry_safe
    assert caught.value.idempotency_key == key
    assert rig.sandbox.count("file_payment") == 1
    # The engine resolves it by reading: the consent is Consumed, so the payment exists; same key recovers it.
    found = await rig.client.find_file_payment(
        consent.consent_id, consent.initiation, access_token=token.access_token, idempotency_key=key
    )
    assert found is not None
    (stored_id,) = [k for k, _ in rig.sandbox.bank.store.items("file_payment")]
    assert found.file_payment_id == stored_id
    assert rig.sandbox.count("file_payment") == 1


async def test_ambiguous_payment_that_never_committed_reads_as_absent(rig: Rig) -> None:
    consent = await uploaded_consent(rig)
    token = await authorised(rig, consent.consent_id)
    key = new_idempotency_key()
    rig.faults({"operation": "file-payments.create", "fault": "error", "status": 503, "times": 5})
    with pytest.raises(errors.ServerError):
        await rig.client.create_file_payment(
            consent.consent_id, consent.initiation, access_token=token.access_token, idempotency_key=key
        )
    found = await rig.client.find_file_payment(
        consent.consent_id, consent.initiation, access_token=token.access_token, idempotency_key=key
    )
    assert found is None
    assert rig.sandbox.count("file_payment") == 0
    payment = await rig.client.create_file_payment(
        consent.consent_id, consent.initiation, access_token=token.access_token, idempotency_key=key
    )
    assert payment.status == "InitiationPending"
    assert rig.sandbox.count("file_payment") == 1


async def test_ambiguous_upload_resolved_by_reading_the_consent(rig: Rig) -> None:
    payload = file_payload()
    consent = await rig.client.create_file_consent(file_initiation(payload), idempotency_key=new_idempotency_key())
    assert not await rig.client.upload_landed(consent.consent_id)
    rig.faults(
        {"operation": "file-payment-consents.upload", "fault": "commit_then_fail", "times": 1},
        {"operation": "file-payment-consents.upload", "fault": "error", "times": 4},
    )
    with pytest.raises(errors.ServerError) as caught:
        await rig.client.upload_file(
            consent.consent_id, with_references(payload, consent.consent_id), idempotency_key=new_idempotency_key()
        )
    assert caught.value.ambiguous
    assert await rig.client.upload_landed(consent.consent_id)


async def test_code_exchange_retried_after_a_5xx_that_did_not_consume_the_code(rig: Rig) -> None:
    consent = await uploaded_consent(rig)
    pkce = new_pkce()
    par = await rig.client.push_authorization_request(consent.consent_id, pkce, new_state())
    query = await decide(rig.browser, await rig.client.authorization_url(consent.consent_id, par.request_uri))
    rig.faults({"operation": "token", "fault": "error", "status": 503, "times": 1})
    token = await rig.client.exchange_code(query["code"], pkce.verifier)
    assert token.consent_id == consent.consent_id
    assert len(rig.sent.to("/token", "POST")) == 3  # cc token earlier, then 503 + success


async def test_interaction_id_is_echoed_and_carried_by_errors(rig: Rig) -> None:
    rig.faults({"operation": "file-payments.get", "fault": "error", "status": 500, "times": 5})
    with pytest.raises(errors.ServerError) as caught:
        await rig.client.get_file_payment("fp-x")
    last = rig.sent.to("/file-payments/fp-x", "GET")[-1]
    assert caught.value.interaction_id == last.headers["x-fapi-interaction-id"]
    uuid.UUID(caught.value.interaction_id or "")


async def test_remote_signing_failure_is_not_retried_twice_over() -> None:
    sandbox = sandbox_rig()
    sent = Recording(sandbox.transport())
    sleeps = Sleeps()
    client = await BankClient.start(
        make_integration(assertion_signing="remote"), transport=sent, clock=sandbox.clock, sleep=sleeps
    )
    async with client:
        sandbox.set_faults([{"operation": "message-signature", "fault": "error", "status": 500}])
        with pytest.raises(errors.ServerError) as caught:
            await client.client_credentials_token()
        assert caught.value.operation == "E2 message-signature"
        assert len(sent.to("/o3/v1.0/message-signature")) == 5  # E2's own retries only, not 5 x 5
        assert sent.to("/token") == []
        sandbox.set_faults([{"operation": "message-signature", "fault": "error", "status": 503, "times": 1}])
        assert (await client.client_credentials_token()).scope == "payments"
