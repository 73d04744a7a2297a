"""What the bank's customer does in their banking app, through the admin interface: revoke a VRP consent, revoke
the refresh token of its grants; and re-authenticating an authorised VRP consent to obtain new tokens."""

# Fixtures are imported from sandbox_auth_fixtures by name; pytest injects them as parameters of the same name.
# ruff: noqa: F811

from __future__ import annotations

import uuid

import httpx
import pytest
from manual_clock import ManualClock
from sandbox_auth_fixtures import (  # noqa: F401 (fixtures)
    Harness,
    Tpp,
    clock,
    consent_status,
    file_consent,
    harness,
    http,
    make_bank,
    other_tpp,
    tpp,
    vrp_consent,
)

from sandbox.app import create_app
from sandbox.state import Bank

FAPI = {"x-fapi-financial-id": "0015800001041RHAAY", "x-fapi-customer-ip-address": "203.0.113.7"}


@pytest.fixture
def bank(tpp: Tpp, other_tpp: Tpp, clock: ManualClock) -> Bank:
    return make_bank([tpp, other_tpp], clock, admin=True)


async def _authorised_with_tokens(harness: Harness, tpp: Tpp, bank: Bank) -> tuple[str, dict[str, str]]:
    consent_id = vrp_consent(bank, tpp)
    auth = await harness.authorise(tpp, consent_id)
    answer = await harness.exchange(tpp, auth.code, auth.verifier)
    assert answer.status_code == 200, answer.text
    return consent_id, answer.json()


async def _refresh(harness: Harness, tpp: Tpp, refresh_token: str) -> httpx.Response:
    form = {"grand_type": "refresh_token", "refresh_token": refresh_token}
    return await harness.http.post("/token", data=form, headers=tpp.basic())


async def _read_consent(harness: Harness, tpp: Tpp, consent_id: str) -> httpx.Response:
    cc = await harness.http.post(
        "/token", data={"grand_type": "client_credentials", "scope": "payments openid"}, headers=tpp.basic()
    )
    headers = {"Authorization": f"Bearer {cc.json()['access_token']}", "x-fapi-interaction-id": str(uuid.uuid4())}
    return await harness.http.get(
        f"/open-banking/v3.1/pisp/domestic-vrp-consents/{consent_id}", headers={**headers, **FAPI}
    )


async def test_a_revoked_consent_reads_revoked_and_its_tokens_stop_working(
    harness: Harness, tpp: Tpp, bank: Bank, clock: ManualClock
) -> None:
    consent_id, tokens = await _authorised_with_tokens(harness, tpp, bank)
    clock.advance(5)
    answer = await harness.http.post(f"/__sandbox/vrp-consents/{consent_id}/revoke")
    assert answer.status_code == 200, answer.text
    assert answer.json()["Status"] == "Revoked" and answer.json()["revoked_tokens"] == 2
    read = await _read_consent(harness, tpp, consent_id)
    assert read.status_code == 200, read.text
    data = read.json()["Data"]
    assert data["Status"] == "Revoked"
    assert data["StatusUpdateDateTime"] > data["CreationDateTime"]
    refused = await _refresh(harness, tpp, tokens["refresh_token"])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    # Only an authorised consent can be revoked; a second revocation changes nothing.
    again = await harness.http.post(f"/__sandbox/vrp-consents/{consent_id}/revoke")
    assert again.status_code == 400 and again.json()["Code"] == "UK.OBIE.Resource.InvalidConsentStatus"
    assert consent_status(bank, consent_id) == "Revoked"
    # A revoked consent cannot be authorised again.
    pushed, _, _ = await harness.push(tpp, consent_id)
    assert pushed.status_code == 400 and "is Revoked" in pushed.json()["error_description"]


async def test_unknown_awaiting_and_file_consents_cannot_be_revoked(harness: Harness, tpp: Tpp, bank: Bank) -> None:
    waiting = vrp_consent(bank, tpp)
    file_id = file_consent(bank, tpp, status="Authorised")
    for consent_id, code in (
        ("vrp-unknown", "UK.OBIE.Resource.NotFound"),
        (file_id, "UK.OBIE.Resource.NotFound"),
        (waiting, "UK.OBIE.Resource.InvalidConsentStatus"),
    ):
        for action in ("revoke", "revoke-refresh-token"):
            answer = await harness.http.post(f"/__sandbox/vrp-consents/{consent_id}/{action}")
            assert answer.status_code == 400 and answer.json()["Code"] == code, (consent_id, action, answer.text)
    assert consent_status(bank, waiting) == "AwaitingAuthorisation"
    assert consent_status(bank, file_id) == "Authorised"


async def test_a_revoked_refresh_token_is_refused_and_re_authentication_gives_new_tokens(
    harness: Harness, tpp: Tpp, bank: Bank
) -> None:
    consent_id, tokens = await _authorised_with_tokens(harness, tpp, bank)
    answer = await harness.http.post(f"/__sandbox/vrp-consents/{consent_id}/revoke-refresh-token")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"ConsentId": consent_id, "revoked_refresh_tokens": 1}
    refused = await _refresh(harness, tpp, tokens["refresh_token"])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    assert consent_status(bank, consent_id) == "Authorised"  # the consent itself stays
    # The customer signs in again for the same consent: a new code, new tokens, the consent still Authorised.
    again = await harness.authorise(tpp, consent_id)
    exchanged = await harness.exchange(tpp, again.code, again.verifier)
    assert exchanged.status_code == 200, exchanged.text
    assert exchanged.json()["scope"] == f"payments:{consent_id} openid"
    assert (await _refresh(harness, tpp, exchanged.json()["refresh_token"])).status_code == 200
    assert consent_status(bank, consent_id) == "Authorised"


async def test_an_authorised_file_consent_cannot_be_authorised_again(harness: Harness, tpp: Tpp, bank: Bank) -> None:
    consent_id = file_consent(bank, tpp, status="Authorised")
    pushed, _, _ = await harness.push(tpp, consent_id)
    assert pushed.status_code == 400 and "is Authorised" in pushed.json()["error_description"]


async def test_without_admin_the_customer_routes_are_not_served(tpp: Tpp, other_tpp: Tpp, clock: ManualClock) -> None:
    plain = make_bank([tpp, other_tpp], clock)
    consent_id = vrp_consent(plain, tpp, status="Authorised")
    transport = httpx.ASGITransport(app=create_app(plain))
    async with httpx.AsyncClient(transport=transport, base_url="http://sandbox.test") as client:
        answer = await client.post(f"/__sandbox/vrp-consents/{consent_id}/revoke")
    assert answer.status_code == 404
    assert consent_status(plain, consent_id) == "Authorised"
