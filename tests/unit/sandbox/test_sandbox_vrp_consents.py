"""B1 (create VRP consent) and B3 (read it) over in-process HTTP: shapes, headers, validation, idempotency."""

from __future__ import annotations

import uuid

import pytest
from sandbox_vrp_support import CONSENTS, consent_body, error_of, harness, limit, mutate

from sandbox.consents import FILE_KIND, VRP_KIND
from sandbox.jsonutil import dumps
from sandbox.oauth.tokens import issue_access_token


async def test_create_consent_returns_the_resource_and_stores_it() -> None:
    async with harness() as h:
        body = consent_body(limit("50.00", "Day", "Consent"), limit("300.00", "Month", "Calendar"))
        interaction = str(uuid.uuid4())
        resp = await h.post(CONSENTS, body, h.headers(h.cc_token(), **{"x-fapi-interaction-id": interaction}))
        assert resp.status_code == 201, resp.text
        assert resp.headers["x-fapi-interaction-id"] == interaction
        out = resp.json()
        data = out["Data"]
        consent_id = data["ConsentId"]
        assert consent_id.startswith("vrp-")
        uuid.UUID(consent_id.removeprefix("vrp-"))
        assert data["Status"] == "AwaitingAuthorisation"
        assert data["CreationDateTime"] == data["StatusUpdateDateTime"] == "2026-11-02T09:00:00.000Z"
        for key in ("ControlParameters", "Initiation", "RemittanceInformation"):
            assert data[key] == body["Data"][key]
        assert data["ControlParameters"]["MaximumIndividualAmount"]["Amount"] == "500.00"  # a string, as sent
        assert out["Risk"] == {}
        assert out["Meta"] == {}
        assert out["Links"]["Self"] == f"http://127.0.0.1:8700{CONSENTS}/{consent_id}"
        stored = h.bank.store.get(VRP_KIND, consent_id)
        assert stored is not None
        assert stored["client_id"] == "client-a"
        assert stored["status"] == "AwaitingAuthorisation"
        assert stored["data"] == body["Data"]


async def test_read_consent_follows_the_approvers_decision() -> None:
    async with harness() as h:
        consent_id = await h.create_consent()
        resp = await h.get(f"{CONSENTS}/{consent_id}")
        assert resp.status_code == 200, resp.text
        assert resp.json()["Data"]["Status"] == "AwaitingAuthorisation"
        h.clock.advance(90)
        h.authorise(consent_id)
        resp = await h.get(f"{CONSENTS}/{consent_id}")
        data = resp.json()["Data"]
        assert data["Status"] == "Authorised"
        assert data["CreationDateTime"] == "2026-11-02T09:00:00.000Z"
        assert data["StatusUpdateDateTime"] == "2026-11-02T09:01:30.000Z"
        assert data["ControlParameters"] == consent_body()["Data"]["ControlParameters"]
        assert resp.json()["Links"]["Self"].endswith(f"{CONSENTS}/{consent_id}")
        assert resp.json()["Risk"] == {}


async def test_read_consent_of_another_client_or_unknown_is_not_found() -> None:
    async with harness() as h:
        consent_id = await h.create_consent(client_id="client-a")
        resp = await h.get(f"{CONSENTS}/{consent_id}", h.cc_token("client-b"))
        assert error_of(resp)[:2] == (400, "UK.OBIE.Resource.NotFound")
        resp = await h.get(f"{CONSENTS}/vrp-{uuid.uuid4()}")
        assert error_of(resp)[:2] == (400, "UK.OBIE.Resource.NotFound")
        h.bank.store.put(FILE_KIND, "pay-fi-x", {"client_id": "client-a", "status": "AwaitingUpload"})
        resp = await h.get(f"{CONSENTS}/pay-fi-x")  # a file consent is not a VRP consent
        assert error_of(resp)[:2] == (400, "UK.OBIE.Resource.NotFound")


@pytest.mark.parametrize("method", ["post", "get"])
async def test_auth_errors(method: str) -> None:
    async with harness() as h:
        consent_id = await h.create_consent()
        path = CONSENTS if method == "post" else f"{CONSENTS}/{consent_id}"

        async def call(token: str | None, **headers: str) -> tuple[int, str, str | None]:
            hdrs = h.headers(token, **headers)
            resp = await (h.post(path, consent_body(), hdrs) if method == "post" else h.http.get(path, headers=hdrs))
            return error_of(resp)

        assert await call(None) == (401, "UK.OBIE.Header.Missing", "Authorization")
        assert await call("nope") == (401, "UK.OBIE.Header.Invalid", "Authorization")
        code_token = issue_access_token(h.bank, "client-a", "authorization_code", "payments", consent_id, 600).value
        assert await call(code_token) == (401, "UK.OBIE.Header.Invalid", "Authorization")
        no_scope = issue_access_token(h.bank, "client-a", "client_credentials", "openid", None, 600).value
        assert (await call(no_scope))[:2] == (401, "UK.OBIE.Header.Invalid")
        token = h.cc_token()
        h.clock.advance(600)
        resp_status, code, _ = await call(token)
        assert (resp_status, code) == (403, "UK.OBIE.Header.Invalid")


@pytest.mark.parametrize("method", ["post", "get"])
@pytest.mark.parametrize(
    ("header", "value", "expected"),
    [
        ("x-fapi-interaction-id", None, (400, "UK.OBIE.Header.Missing", "x-fapi-interaction-id")),
        ("x-fapi-interaction-id", "not-a-uuid", (400, "UK.OBIE.Header.Invalid", "x-fapi-interaction-id")),
        ("x-fapi-financial-id", None, (400, "UK.OBIE.Header.Missing", "x-fapi-financial-id")),
        ("x-fapi-financial-id", "other-bank", (400, "UK.OBIE.Header.Invalid", "x-fapi-financial-id")),
        ("x-fapi-customer-ip-address", None, (400, "UK.OBIE.Header.Missing", "x-fapi-customer-ip-address")),
        ("x-fapi-customer-ip-address", "localhost", (400, "UK.OBIE.Header.Invalid", "x-fapi-customer-ip-address")),
    ],
)
async def test_required_headers(method: str, header: str, value: str | None, expected: tuple[int, str, str]) -> None:
    async with harness() as h:
        consent_id = await h.create_consent()
        hdrs = h.headers(h.cc_token())
        if value is None:
            del hdrs[header]
        else:
            hdrs[header] = value
        if method == "post":
            resp = await h.post(CONSENTS, consent_body(), hdrs)
        else:
            resp = await h.http.get(f"{CONSENTS}/{consent_id}", headers=hdrs)
        assert error_of(resp) == expected
        assert h.bank.store.count(VRP_KIND) == 1


async def test_content_type_must_be_json_and_headers_come_before_the_body() -> None:
    async with harness() as h:
        resp = await h.post(CONSENTS, consent_body(), h.headers(h.cc_token(), **{"Content-Type": "text/plain"}))
        assert error_of(resp) == (400, "UK.OBIE.Header.Invalid", "Content-Type")
        # A broken body with no token: the token is reported, not the body.
        resp = await h.post(CONSENTS, b"{not json", h.headers(None))
        assert error_of(resp)[:2] == (401, "UK.OBIE.Header.Missing")
        assert h.bank.store.count(VRP_KIND) == 0


@pytest.mark.parametrize(
    "raw",
    [b"", b"   ", b"{", b"[]", b'"text"', b"null", b'{"Data": NaN}', b"\xff\xfe", b"[" * 100_000],
)
async def test_malformed_bodies_get_invalid_format(raw: bytes) -> None:
    async with harness() as h:
        resp = await h.post(CONSENTS, raw, h.headers(h.cc_token()))
        status, code, _ = error_of(resp)
        assert (status, code) == (400, "UK.OBIE.Resource.InvalidFormat")
        assert resp.json()["Message"].startswith("invalid_message_format")


@pytest.mark.parametrize(
    ("path", "value", "error_path"),
    [
        ("Data.ControlParameters.MaximumIndividualAmount.Amount", 10.5, "MaximumIndividualAmount.Amount"),
        ("Data.ControlParameters.PeriodicLimits[0].PeriodType", "Fortnight", "PeriodicLimits[0].PeriodType"),
        ("Data.ControlParameters.ValidToDateTime", "2025-01-01T00:00:00Z", "ValidToDateTime"),
        ("Data.ControlParameters.VRPType", ["UK.OBIE.VRPType.Commercial"], "VRPType"),
        ("Data.Initiation.CreditorAccount.Identification", "123", "CreditorAccount.Identification"),
        ("Risk", ..., "Risk"),
    ],
)
async def test_invalid_fields_are_named_in_path(path: str, value: object, error_path: str) -> None:
    async with harness() as h:
        resp = await h.post(CONSENTS, mutate(consent_body(), path, value), h.headers(h.cc_token()))
        status, code, where = error_of(resp)
        assert (status, code) == (400, "UK.OBIE.Resource.InvalidFormat")
        assert where is not None
        assert where.endswith(error_path)
        assert error_path in resp.json()["Message"]
        assert h.bank.store.count(VRP_KIND) == 0


async def test_idempotency_key_replays_the_same_consent() -> None:
    async with harness() as h:
        token = h.cc_token()
        body = consent_body()
        first = await h.post(CONSENTS, body, h.headers(token, **{"x-idempotency-key": "k-1"}))
        assert first.status_code == 201
        # Same body with other whitespace and key order: same resource, nothing new stored.
        spaced = dumps({"Risk": {}, "Data": body["Data"]}).replace(b",", b" ,\n ")
        again = await h.post(CONSENTS, spaced, h.headers(token, **{"x-idempotency-key": "k-1"}))
        assert again.status_code == 201
        assert again.json()["Data"]["ConsentId"] == first.json()["Data"]["ConsentId"]
        assert h.bank.store.count(VRP_KIND) == 1
        # Same key, another body: refused, nothing changes.
        other = consent_body(maximum="10.00")
        resp = await h.post(CONSENTS, other, h.headers(token, **{"x-idempotency-key": "k-1"}))
        assert error_of(resp) == (400, "UK.OBIE.Header.Invalid", "x-idempotency-key")
        assert h.bank.store.count(VRP_KIND) == 1
        # Keys are per client: client-b's k-1 is a new consent.
        resp = await h.post(CONSENTS, body, h.headers(h.cc_token("client-b"), **{"x-idempotency-key": "k-1"}))
        assert resp.status_code == 201
        assert resp.json()["Data"]["ConsentId"] != first.json()["Data"]["ConsentId"]
        # Too long a key.
        resp = await h.post(CONSENTS, body, h.headers(token, **{"x-idempotency-key": "k" * 41}))
        assert error_of(resp) == (400, "UK.OBIE.Header.Invalid", "x-idempotency-key")
        assert h.bank.store.count(VRP_KIND) == 2


async def test_idempotency_with_decimal_numbers_in_risk_is_not_a_crash() -> None:
    async with harness() as h:
        body = mutate(consent_body(), "Risk", {"Score": 1.25})
        hdrs = h.headers(h.cc_token(), **{"x-idempotency-key": "k-2"})
        first = await h.post(CONSENTS, body, hdrs)
        assert first.status_code == 201, first.text
        assert b'"Score":1.25' in first.content
        again = await h.post(CONSENTS, body, hdrs)
        assert again.json()["Data"]["ConsentId"] == first.json()["Data"]["ConsentId"]


async def test_wrong_method_gets_the_error_shape() -> None:
    async with harness() as h:
        resp = await h.http.delete(CONSENTS, headers=h.headers(h.cc_token()))
        assert resp.status_code == 405
        assert set(resp.json()) == {"Code", "Message", "Errors"}


async def test_a_bad_idempotency_key_is_reported_before_the_body() -> None:
    async with harness() as h:
        resp = await h.post(CONSENTS, b"{broken", h.headers(h.cc_token(), **{"x-idempotency-key": "k" * 41}))
        assert error_of(resp) == (400, "UK.OBIE.Header.Invalid", "x-idempotency-key")
