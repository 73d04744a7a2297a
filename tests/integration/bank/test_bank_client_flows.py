"""The real bank client against the real sandbox app, in process (httpx.ASGITransport): both flows end to end.

Covers discovery and the issuer check, both token auth methods and both grant spellings, remote signing (E2),
the client-credentials token cache on the sandbox's manual clock, auth-code refresh, and the headers sent.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import jwt
import pytest
from bank_support import (
    BASE,
    FINANCIAL_ID,
    REDIRECT_URI,
    Recording,
    SandboxRig,
    Sleeps,
    decide,
    file_initiation,
    file_payload,
    key_pair,
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


@dataclass
class Rig:
    sandbox: SandboxRig
    client: BankClient
    sent: Recording
    sleeps: Sleeps
    browser: httpx.AsyncClient


@pytest.fixture
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    overrides: dict[str, Any] = getattr(request, "param", {})
    sandbox = sandbox_rig()
    sent = Recording(sandbox.transport())
    sleeps = Sleeps()
    client = await BankClient.start(
        make_integration(**overrides), transport=sent, clock=sandbox.clock, sleep=sleeps, rand=lambda: 0.5
    )
    browser = httpx.AsyncClient(transport=sandbox.transport())
    try:
        yield Rig(sandbox, client, sent, sleeps, browser)
    finally:
        await client.aclose()
        await browser.aclose()


async def authorise(rig: Rig, consent_id: str, *, approve: bool = True) -> tuple[dict[str, str], str, str]:
    """PAR + authorization URL + the approver's decision; (redirect query, verifier, state)."""
    pkce = new_pkce()
    state = new_state()
    par = await rig.client.push_authorization_request(consent_id, pkce, state)
    assert par.request_uri.startswith("urn:ietf:params:oauth:request_uri:")
    assert par.expires_in == 300
    url = await rig.client.authorization_url(consent_id, par.request_uri)
    assert url.startswith(f"{BASE}/auth?")
    query = await decide(rig.browser, url, approve=approve)
    assert query["state"] == state
    return query, pkce.verifier, state


async def consent_and_upload(client: BankClient) -> tuple[FileConsent, dict[str, Any]]:
    payload = file_payload()
    consent = await client.create_file_consent(file_initiation(payload), idempotency_key=new_idempotency_key())
    upload = await client.upload_file(
        consent.consent_id, with_references(payload, consent.consent_id), idempotency_key=new_idempotency_key()
    )
    assert upload.number_of_transactions == 3
    assert upload.control_sum == Decimal("4250.75")
    return consent, payload


# -- discovery ------------------------------------------------------------------------------------------------


async def test_discovery_gives_the_endpoints(rig: Rig) -> None:
    discovery = await rig.client.discovery()
    assert discovery.issuer == BASE
    assert discovery.token_endpoint == f"{BASE}/token"
    assert discovery.pushed_authorization_request_endpoint == f"{BASE}/par"
    assert "private_key_jwt" in discovery.token_endpoint_auth_methods_supported
    (call,) = rig.sent.to("/.well-known/openid-configuration")
    assert (
        call.headers["authorization"] == "Basic " + base64.b64encode(b"dispersion-test:s3cret-value-for-tests").decode()
    )
    assert call.headers["content-type"] == "application/x-www-form-urlencoded"


@pytest.mark.parametrize("configured", ["http://bank.example", f"{BASE}/", "https://bank.test"])
async def test_a_foreign_issuer_is_refused_at_start(configured: str) -> None:
    sandbox = sandbox_rig()  # its discovery says issuer http://bank.test
    sent = Recording(sandbox.transport())
    integration = make_integration(BASE, issuer=configured)
    with pytest.raises(errors.IssuerMismatch) as caught:
        await BankClient.start(integration, transport=sent, clock=sandbox.clock)
    assert "refusing" in str(caught.value)
    assert not caught.value.retry_safe
    assert [s.url.path for s in sent.sent] == ["/.well-known/openid-configuration"]  # nothing after it
    assert sandbox.count("access_token") == 0


async def test_wrong_basic_credential_fails_discovery_with_invalid_client() -> None:
    sandbox = sandbox_rig()
    sent = Recording(sandbox.transport())
    with pytest.raises(errors.InvalidClient) as caught:
        await BankClient.start(make_integration(client_secret="wrong"), transport=sent, clock=sandbox.clock)
    assert caught.value.status == 400
    assert len(sent.sent) == 1  # a semantic 4xx is not retried


# -- token auth methods and grant spellings ----------------------------------------------------------------------

METHODS = [
    {"token_auth_method": "private_key_jwt", "grant_parameter": "grand_type"},
    {"token_auth_method": "private_key_jwt", "grant_parameter": "grant_type"},
    {"token_auth_method": "client_secret_basic", "grant_parameter": "grand_type"},
    {"token_auth_method": "client_secret_basic", "grant_parameter": "grant_type"},
]


@pytest.mark.parametrize(
    "rig", METHODS, indirect=True, ids=lambda p: f"{p['token_auth_method']}-{p['grant_parameter']}"
)
async def test_flow_a_end_to_end(rig: Rig) -> None:
    integration = rig.client.integration
    consent, _ = await consent_and_upload(rig.client)
    assert consent.status == "AwaitingUpload"
    assert consent.consent_id.startswith("pay-fi-")
    query, verifier, _ = await authorise(rig, consent.consent_id)
    assert query["iss"] == BASE
    token = await rig.client.exchange_code(query["code"], verifier, expected_consent_id=consent.consent_id)
    assert token.consent_id == consent.consent_id
    assert token.expires_in == 432000
    assert token.refresh_token
    payment = await rig.client.create_file_payment(
        consent.consent_id, consent.initiation, access_token=token.access_token, idempotency_key=new_idempotency_key()
    )
    assert payment.status == "InitiationPending"
    assert payment.multi_authorisation_status == "AwaitingFurtherAuthorisation"
    assert payment.file_payment_id.startswith("fp-")
    # Read without the echoed file: the same payment, the file not kept.
    lean = await rig.client.get_file_payment(payment.file_payment_id, echo_file=False)
    assert (lean.file_payment_id, lean.consent_id) == (payment.file_payment_id, payment.consent_id)
    assert lean.initiation == {**payment.initiation, "SupplementaryData": None}
    assert payment.initiation == consent.initiation  # the default keeps the whole echo
    rig.sandbox.clock.advance(rig.sandbox.bank.config.file_payment_delay + 1)
    read = await rig.client.get_file_payment(payment.file_payment_id)
    assert read.status == "InitiationCompleted"
    assert (await rig.client.get_file_consent(consent.consent_id)).status == "Consumed"
    report = await rig.client.get_file_payment_report(payment.file_payment_id)
    assert [line.status for line in report.lines] == ["Settled", "Settled", "Rejected"]
    assert report.lines[2].reason_code == "AC04"
    assert report.lines[0].amount == Decimal("1500.50")

    # What went over the wire for the token calls.
    grant = integration.grant_parameter
    other = "grant_type" if grant == "grand_type" else "grand_type"
    token_calls = rig.sent.to("/token", "POST")
    assert [c.form()[grant] for c in token_calls] == ["client_credentials", "authorization_code"]
    assert all(other not in c.form() for c in token_calls)
    for call in token_calls:
        form = call.form()
        if integration.token_auth_method == "client_secret_basic":
            assert call.headers["authorization"].startswith("Basic ")
            assert "client_assertion" not in form
        else:
            assert "authorization" not in call.headers
            assert form["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
            claims = jwt.decode(
                form["client_assertion"],
                key_pair().public_pem,
                algorithms=["PS256"],
                audience=BASE,
                options={"verify_exp": False, "verify_iat": False},
            )
            assert claims["iss"] == claims["sub"] == integration.client_id
    assert token_calls[0].form()["scope"] == "payments openid"
    exchange = token_calls[1].form()
    assert exchange["code_verifier"] == verifier
    assert exchange["redirect_uri"] == REDIRECT_URI
    (par,) = rig.sent.to("/par", "POST")
    assert par.form()["code_challenge_method"] == "S256"
    assert par.form()["scope"] == f"payments:{consent.consent_id} openid"
    assert ("authorization" in par.headers) == (integration.token_auth_method == "client_secret_basic")


async def test_resource_headers_follow_the_spec(rig: Rig) -> None:
    consent, _ = await consent_and_upload(rig.client)
    await rig.client.get_file_consent(consent.consent_id)
    a1 = rig.sent.to("/file-payment-consents", "POST")[0]
    a2 = rig.sent.to("/file", "POST")[0]
    a5 = rig.sent.to(f"/file-payment-consents/{consent.consent_id}", "GET")[0]
    for call in (a1, a2, a5):
        assert call.headers["content-type"] == "application/json"
        assert call.headers["authorization"].startswith("Bearer ")
        uuid.UUID(call.headers["x-fapi-interaction-id"])
    assert a5.headers["x-fapi-financial-id"] == FINANCIAL_ID
    assert a5.headers["x-fapi-customer-ip-address"] == "127.0.0.1"
    assert "x-fapi-financial-id" not in a1.headers  # A1 lists none
    assert "x-idempotency-key" in a1.headers and "x-idempotency-key" not in a5.headers
    ids = [s.headers["x-fapi-interaction-id"] for s in rig.sent.sent]
    assert len(set(ids)) == len(ids)  # a new interaction id for every call
    assert consent.interaction_id == a1.headers["x-fapi-interaction-id"]


@pytest.mark.parametrize("rig", [{"assertion_signing": "remote"}], indirect=True)
async def test_remote_signing_uses_the_message_signature_operation(rig: Rig) -> None:
    token = await rig.client.client_credentials_token()
    assert token.scope == "payments"
    (e2,) = rig.sent.to("/o3/v1.0/message-signature", "GET")
    (e3,) = rig.sent.to("/token", "POST")
    assert e2.headers["content-type"] == "application/json"
    assert b'"signingKeyPEM"' in e2.body
    claims = jwt.decode(
        e3.form()["client_assertion"],
        key_pair().public_pem,
        algorithms=["PS256"],
        audience=BASE,
        options={"verify_exp": False, "verify_iat": False},
    )
    assert jwt.get_unverified_header(e3.form()["client_assertion"])["kid"] == "kid-1"
    assert claims["iss"] == "dispersion-test"


# -- client-credentials token cache ----------------------------------------------------------------------------


async def test_client_credentials_token_is_cached_and_renewed_before_expiry(rig: Rig) -> None:
    first = await rig.client.client_credentials_token()
    await rig.client.client_credentials_token()
    consent, _ = await consent_and_upload(rig.client)
    assert rig.sent.token_requests("client_credentials") == 1
    assert rig.sandbox.count("access_token") == 1
    rig.sandbox.clock.advance(600 - 60 - 1)  # inside the refresh margin's safe zone
    assert await rig.client.client_credentials_token() is first
    rig.sandbox.clock.advance(2)  # 541 s: within 60 s of expiry, renewed before it runs out
    await rig.client.get_file_consent(consent.consent_id)
    assert rig.sent.token_requests("client_credentials") == 2
    second = await rig.client.client_credentials_token()
    assert second is not first
    assert second.access_token != first.access_token


async def test_concurrent_callers_share_one_token_fetch(rig: Rig) -> None:
    consent, _ = await consent_and_upload(rig.client)
    rig.client.forget_client_credentials_token()
    before = rig.sent.token_requests("client_credentials")
    results = await asyncio.gather(*(rig.client.get_file_consent(consent.consent_id) for _ in range(8)))
    assert {r.consent_id for r in results} == {consent.consent_id}
    assert rig.sent.token_requests("client_credentials") == before + 1


async def test_token_the_bank_calls_expired_is_renewed_once() -> None:
    """The bank's clock runs a second ahead of ours: it answers 403 token_expired to a token we think fresh."""
    sandbox = sandbox_rig()
    from manual_clock import ManualClock

    our_clock = ManualClock(sandbox.clock.now())
    sent = Recording(sandbox.transport())
    client = await BankClient.start(make_integration(token_refresh_margin=0), transport=sent, clock=our_clock)
    async with client:
        consent, _ = await consent_and_upload(client)
        our_clock.advance(599)
        sandbox.clock.advance(600)
        read = await client.get_file_consent(consent.consent_id)
        assert read.consent_id == consent.consent_id
        assert sent.token_requests("client_credentials") == 2
        statuses = [s.url.path for s in sent.sent][-3:]
        assert statuses == [
            f"/open-banking/v3.1/pisp/file-payment-consents/{consent.consent_id}",
            "/token",
            f"/open-banking/v3.1/pisp/file-payment-consents/{consent.consent_id}",
        ]


# -- flow B and refresh ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("rig", [{"token_auth_method": "client_secret_basic"}], indirect=True)
async def test_flow_b_end_to_end_with_refresh(rig: Rig) -> None:
    parts = vrp_consent_parts(rig.sandbox.clock.now())
    consent = await rig.client.create_vrp_consent(vrp_consent_body(**parts), idempotency_key=new_idempotency_key())
    assert consent.status == "AwaitingAuthorisation"
    assert consent.maximum_individual_amount.amount == Decimal("500.00")
    query, verifier, _ = await authorise(rig, consent.consent_id)
    token = await rig.client.exchange_code(query["code"], verifier, expected_consent_id=consent.consent_id)
    assert (await rig.client.get_vrp_consent(consent.consent_id)).status == "Authorised"

    async def pay(tok: TokenResponse, amount: str) -> Any:
        instruction = {
            "InstructionIdentification": uuid.uuid4().hex[:20],
            "EndToEndIdentification": uuid.uuid4().hex[:20],
            "CreditorAccount": parts["initiation"]["CreditorAccount"],
            "InstructedAmount": {"Amount": amount, "Currency": "GBP"},
            "RemittanceInformation": {"Unstructured": "sweep"},
        }
        return await rig.client.create_domestic_vrp(
            domestic_vrp_body(consent.consent_id, consent.initiation, instruction),
            access_token=tok.access_token,
            idempotency_key=new_idempotency_key(),
        )

    vrp = await pay(token, "120.00")
    assert vrp.status == "Pending"
    assert vrp.instructed_amount is not None and vrp.instructed_amount.amount == Decimal("120.00")
    assert (await rig.client.get_domestic_vrp(vrp.domestic_vrp_id)).domestic_vrp_id == vrp.domestic_vrp_id

    with pytest.raises(errors.FailsControlParameters) as breach:
        await pay(token, "500.01")
    assert breach.value.status == 400 and not breach.value.retry_safe

    # The access token runs out (432000 s); the refresh token keeps the mandate usable.
    rig.sandbox.clock.advance(432000 + 1)
    with pytest.raises(errors.TokenExpired) as expired:
        await pay(token, "10.00")
    assert expired.value.status == 403
    assert token.refresh_token is not None
    renewed = await rig.client.refresh(token.refresh_token)
    assert renewed.consent_id == consent.consent_id
    assert (await pay(renewed, "10.00")).status == "Pending"
    refresh_call = rig.sent.to("/token", "POST")[-1]
    assert refresh_call.form()["grand_type"] == "refresh_token"
    assert refresh_call.headers["authorization"].startswith("Basic ")


# -- error shapes through the real bank -----------------------------------------------------------------------


async def test_error_shapes_from_the_bank(rig: Rig) -> None:
    with pytest.raises(errors.InvalidFormat) as bad_consent:
        await rig.client.create_file_consent({"FileType": "x"}, idempotency_key=new_idempotency_key())
    sent = rig.sent.sent[-1]
    assert bad_consent.value.interaction_id == sent.headers["x-fapi-interaction-id"]
    assert bad_consent.value.status == 400 and not bad_consent.value.retry_safe
    assert bad_consent.value.message.startswith("invalid_message_format")

    payload = file_payload()
    consent = await rig.client.create_file_consent(file_initiation(payload), idempotency_key=new_idempotency_key())
    wrong = with_references(payload, consent.consent_id)
    wrong["data"]["transaction"][0]["transferInfo"]["transactionAmount"] = Decimal("1500.51")
    with pytest.raises(errors.FieldInvalid) as bad_file:
        await rig.client.upload_file(consent.consent_id, wrong, idempotency_key=new_idempotency_key())
    assert bad_file.value.message.startswith("incorrect_records")

    with pytest.raises(errors.NotFound):
        await rig.client.get_file_payment("fp-00000000000000000000000000000000")

    with pytest.raises(errors.GeneralError):
        await rig.client.authorization_url(consent.consent_id, "urn:ietf:params:oauth:request_uri:nope")

    with pytest.raises(errors.InvalidGrant) as bad_code:
        await rig.client.exchange_code("no-such-code", new_pkce().verifier)
    assert "invalid_auth_code_request_uri" in bad_code.value.message

    with pytest.raises(errors.HeaderInvalid) as bad_token:
        await rig.client.create_file_payment(
            consent.consent_id, consent.initiation, access_token="forged", idempotency_key=new_idempotency_key()
        )
    assert bad_token.value.status == 401
    assert bad_token.value.message.startswith("no_access_token")
    assert bad_token.value.errors[0].path == "Authorization"
    assert not isinstance(bad_token.value, errors.TokenExpired)
    assert rig.sandbox.count("file_payment") == 0


async def test_creating_calls_demand_a_persisted_key(rig: Rig) -> None:
    with pytest.raises(ValueError, match="idempotency"):
        await rig.client.create_file_consent(file_initiation(), idempotency_key="")
    with pytest.raises(ValueError, match="1-40"):
        await rig.client.create_file_consent(file_initiation(), idempotency_key="k" * 41)
    assert rig.sandbox.count("file_consent") == 0


async def test_same_key_same_resource_other_body_refused(rig: Rig) -> None:
    key = new_idempotency_key()
    first = await rig.client.create_file_consent(file_initiation(), idempotency_key=key)
    again = await rig.client.create_file_consent(file_initiation(), idempotency_key=key)
    assert again.consent_id == first.consent_id
    assert rig.sandbox.count("file_consent") == 1
    other = file_initiation()
    other["FileReference"] = "ANOTHER"
    with pytest.raises(errors.HeaderInvalid) as caught:
        await rig.client.create_file_consent(other, idempotency_key=key)
    assert caught.value.errors[0].path == "x-idempotency-key"
    assert rig.sandbox.count("file_consent") == 1


async def test_message_signature_plain_text_error_and_success(rig: Rig) -> None:
    with pytest.raises(errors.BankHTTPError) as caught:
        await rig.client.message_signature({"alg": "PS256", "kid": "kid-1"}, {})
    assert type(caught.value) is errors.BankHTTPError  # plain text: neither JSON shape
    assert caught.value.status == 400
    assert "body.aud" in caught.value.message
    assert not caught.value.retry_safe
    assert len(rig.sent.to("/o3/v1.0/message-signature")) == 1
    signed = await rig.client.message_signature(
        {"alg": "PS256", "kid": "kid-1"},
        {"aud": BASE, "iss": "me", "sub": "me", "iat": 1, "exp": 2, "jti": "j"},
    )
    assert (
        jwt.decode(signed, key_pair().public_pem, algorithms=["PS256"], audience=BASE, options={"verify_exp": False})[
            "jti"
        ]
        == "j"
    )


async def test_each_bank_call_is_logged_with_the_interaction_id_it_sent(rig: Rig) -> None:
    import structlog

    rig.sent.sent.clear()
    with structlog.testing.capture_logs() as logs:
        consent, _ = await consent_and_upload(rig.client)
        await rig.client.get_file_consent(consent.consent_id)
    sent_ids = [s.headers["x-fapi-interaction-id"] for s in rig.sent.sent]
    logged = [entry for entry in logs if entry.get("event") == "bank call"]
    assert len(sent_ids) >= 3 and len(set(sent_ids)) == len(sent_ids)  # a new id for every call
    assert [entry["correlation_id"] for entry in logged] == sent_ids  # one log line per call, with its id


async def test_no_secret_reaches_the_logs(rig: Rig) -> None:
    import structlog

    with structlog.testing.capture_logs() as logs:
        consent, _ = await consent_and_upload(rig.client)
        query, verifier, _ = await authorise(rig, consent.consent_id)
        token = await rig.client.exchange_code(query["code"], verifier)
        await rig.client.create_file_payment(
            consent.consent_id,
            consent.initiation,
            access_token=token.access_token,
            idempotency_key=new_idempotency_key(),
        )
        with pytest.raises(errors.InvalidGrant):
            await rig.client.exchange_code(query["code"], verifier)  # a replay, logged as a failure
    cc = await rig.client.client_credentials_token()
    text = repr(logs)
    assert any(entry.get("correlation_id") for entry in logs)
    integration = rig.client.integration
    secrets = [
        token.access_token,
        token.refresh_token,
        cc.access_token,
        query["code"],
        verifier,
        integration.client_secret.reveal(),
        integration.basic_credential().reveal(),
        "PRIVATE KEY",
    ]
    secrets += [c.form().get("client_assertion", "") for c in rig.sent.to("/token")]
    for secret in filter(None, secrets):
        assert secret not in text
    assert "200100300" not in text  # account numbers neither
