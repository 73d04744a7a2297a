"""Flow A over HTTP (in-process ASGI, manual clock): A1-A5, the report file, headers, errors, idempotency."""

from __future__ import annotations

import json
import re
import uuid
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sandbox_files_support import (
    CONSENTS,
    PAYMENTS,
    Harness,
    decimal_json,
    harness,
    initiation,
    payload,
    transaction,
    with_references,
)

from sandbox.consents import FILE_KIND, set_status
from sandbox.jsonutil import dumps
from sandbox.routes.files import routes

UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def error(resp: httpx.Response, status: int, code: str, message_start: str, path: str | None = None) -> None:
    """The resource error shape of the spec, with the expected code, message and Path."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"Code", "Message", "Errors"}
    assert body["Code"] == code
    assert body["Message"].startswith(message_start), body["Message"]
    assert body["Errors"][0]["ErrorCode"] == code
    if path is not None:
        assert body["Errors"][0].get("Path") == path, body


@pytest.fixture
async def h() -> Any:
    async with harness() as value:
        yield value


# --- A1 ---------------------------------------------------------------------------------------------------


async def test_a1_creates_consent_awaiting_upload(h: Harness) -> None:
    init = initiation()
    headers = h.headers(h.cc_token())
    resp = await h.post(CONSENTS, {"Data": {"Initiation": init}}, headers)
    assert resp.status_code == 201, resp.text
    assert resp.headers["x-fapi-interaction-id"] == headers["x-fapi-interaction-id"]
    body = decimal_json(resp)
    data = body["Data"]
    assert re.fullmatch(f"pay-fi-{UUID_RE}", data["ConsentId"])
    assert data["Status"] == "AwaitingUpload"
    assert data["CreationDateTime"] == data["StatusUpdateDateTime"] == "2026-11-02T09:00:00.000Z"
    assert data["Initiation"] == init
    # Echoed exactly: amounts keep their spelling (1500.50, 2000.00), not a float's.
    assert b'"transactionAmount":1500.50' in resp.content
    assert b'"transactionAmount":2000.00' in resp.content
    assert b'"ControlSum":4250.50' in resp.content
    assert body["Links"] == {"Self": f"http://127.0.0.1:8700{CONSENTS}/{data['ConsentId']}"}
    assert body["Meta"] == {}
    stored = h.bank.store.get(FILE_KIND, data["ConsentId"])
    assert stored is not None
    assert stored["client_id"] == "client-a"
    assert stored["status"] == "AwaitingUpload"
    assert stored["data"] == {"Initiation": init}


async def test_a1_invalid_format_names_the_field(h: Harness) -> None:
    # The spec's A1 error row: 400 UK.OBIE.Resource.InvalidFormat.
    init = initiation(ControlSum=Decimal("4250.51"))
    resp = await h.post(CONSENTS, {"Data": {"Initiation": init}}, h.headers(h.cc_token()))
    error(resp, 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format", "Data.Initiation.ControlSum")
    assert h.bank.store.count(FILE_KIND) == 0


async def test_a1_hash_must_match(h: Harness) -> None:
    init = initiation(FileHash=initiation(payload(transaction()))["FileHash"])
    resp = await h.post(CONSENTS, {"Data": {"Initiation": init}}, h.headers(h.cc_token()))
    error(resp, 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format", "Data.Initiation.FileHash")


async def test_a1_hash_computed_on_the_wire_spelling_is_stable(h: Harness) -> None:
    # A client writes 1500.5 and 2000 on the wire for the same values: same hash, accepted.
    init = initiation()
    raw = dumps({"Data": {"Initiation": init}}).replace(b"1500.50", b"1500.5").replace(b"2000.00", b"2e3")
    resp = await h.post(CONSENTS, raw, h.headers(h.cc_token()))
    assert resp.status_code == 201, resp.text
    assert b'"transactionAmount":2000,' in resp.content


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"Data": {"Initiation": initiation()}, "Risk": {}}, "Risk"),
        ({"Initiation": initiation()}, "Data"),
        ({"Data": {"Initiation": initiation(), "ConsentId": "pay-fi-x"}}, "Data.ConsentId"),
        (
            {"Data": {"Initiation": {**initiation(), "DebtorAccount": {"Identification": "1"}}}},
            "Data.Initiation.DebtorAccount",
        ),
        ({"Data": []}, "Data"),
        ({"Data": {"Initiation": "x"}}, "Data.Initiation"),
    ],
)
async def test_a1_body_shape(h: Harness, body: Any, path: str) -> None:
    resp = await h.post(CONSENTS, body, h.headers(h.cc_token()))
    error(resp, 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format", path)


async def test_a1_too_many_transactions() -> None:
    async with harness(max_transactions=2) as h:
        resp = await h.post(CONSENTS, {"Data": {"Initiation": initiation()}}, h.headers(h.cc_token()))
        error(resp, 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format")
        assert "at most 2" in resp.json()["Message"]


# --- headers and tokens --------------------------------------------------------------------------------------


async def test_missing_authorization_is_401_header_missing(h: Harness) -> None:
    # Also the spec's A5 error row; checked before the (bad) body.
    resp = await h.post(CONSENTS, b"{not json", h.headers(None))
    error(resp, 401, "UK.OBIE.Header.Missing", "missing_authorization_header", "Authorization")
    consent_id = await h.create_consent()
    headers = h.headers(None, fapi=True)
    resp = await h.http.get(f"{CONSENTS}/{consent_id}", headers=headers)
    error(resp, 401, "UK.OBIE.Header.Missing", "missing_authorization_header", "Authorization")
    assert resp.headers["x-fapi-interaction-id"] == headers["x-fapi-interaction-id"]


async def test_invalid_and_expired_tokens(h: Harness) -> None:
    resp = await h.post(CONSENTS, {"Data": {"Initiation": initiation()}}, h.headers("not-a-token"))
    error(resp, 401, "UK.OBIE.Header.Invalid", "no_access_token", "Authorization")
    token = h.cc_token()
    h.clock.advance(600)
    resp = await h.post(CONSENTS, {"Data": {"Initiation": initiation()}}, h.headers(token))
    error(resp, 403, "UK.OBIE.Header.Invalid", "token_expired", "Authorization")
    resp = await h.post(CONSENTS, {"Data": {"Initiation": initiation()}}, h.headers(h.cc_token(scope="openid")))
    error(resp, 401, "UK.OBIE.Header.Invalid", "no_access_token")
    resp = await h.post(CONSENTS, {"Data": {"Initiation": initiation()}}, h.headers(h.code_token("pay-fi-x")))
    error(resp, 401, "UK.OBIE.Header.Invalid", "no_access_token", "Authorization")
    assert h.bank.store.count(FILE_KIND) == 0


async def test_interaction_id_and_content_type(h: Harness) -> None:
    body = {"Data": {"Initiation": initiation()}}
    headers = h.headers(h.cc_token())
    del headers["x-fapi-interaction-id"]
    error(
        await h.post(CONSENTS, body, headers), 400, "UK.OBIE.Header.Missing", "missing_header", "x-fapi-interaction-id"
    )
    resp = await h.post(CONSENTS, body, h.headers(h.cc_token(), extra={"x-fapi-interaction-id": "abc"}))
    error(resp, 400, "UK.OBIE.Header.Invalid", "invalid_header", "x-fapi-interaction-id")
    assert resp.headers["x-fapi-interaction-id"] == "abc"
    resp = await h.post(CONSENTS, body, h.headers(h.cc_token(), extra={"Content-Type": "text/plain"}))
    error(resp, 400, "UK.OBIE.Header.Invalid", "invalid_message_format", "Content-Type")
    assert h.bank.store.count(FILE_KIND) == 0


MALFORMED: list[bytes] = [
    b"",
    b"{",
    b"[]",
    b'"Data"',
    b"null",
    b'{"Data": {"Initiation": NaN}}',
    b"\xff\xfe",
    b"[" * 50_000 + b"]" * 50_000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b'{"Data":' * 100 + b"1" + b"}" * 100,
    b'{"Data": {"Initiation": {"ControlSum": 1e999999999}}}',
    b'{"Data": {"Initiation": {"SupplementaryData": "\\ud800"}}}',
    b'{"Data": {"Initiation": {"NumberOfTransactions": ' + b"9" * 5000 + b"}}}",
]


@pytest.mark.parametrize("raw", MALFORMED, ids=range(len(MALFORMED)))
async def test_malformed_bodies_get_spec_errors_never_500(h: Harness, raw: bytes) -> None:
    consent_id, _ = await h.authorised_consent()
    awaiting_upload = await h.create_consent()
    for path, headers in (
        (CONSENTS, h.headers(h.cc_token())),
        (f"{CONSENTS}/{awaiting_upload}/file", h.headers(h.cc_token())),
        (PAYMENTS, h.headers(h.code_token(consent_id), fapi=True)),
    ):
        for extra in ({}, {"x-idempotency-key": "k-1"}):
            resp = await h.post(path, raw, {**headers, **extra})
            assert resp.status_code == 400, (path, resp.text)
            assert resp.json()["Code"] in {"UK.OBIE.Resource.InvalidFormat", "UK.OBIE.Field.Invalid"}
            assert "Traceback" not in resp.text


async def test_huge_body_is_refused() -> None:
    async with harness(max_body_bytes=2048) as h:
        init = initiation(payload(*[transaction(str(200100300 + i)) for i in range(20)]))
        resp = await h.post(CONSENTS, {"Data": {"Initiation": init}}, h.headers(h.cc_token()))
        error(resp, 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format: body larger than 2048")


# --- A2 upload -------------------------------------------------------------------------------------------------


async def test_a2_upload_moves_consent_to_awaiting_authorisation(h: Harness) -> None:
    init = initiation()
    consent_id = await h.create_consent(init)
    h.clock.advance(5)
    resp = await h.upload(consent_id, with_references(init["SupplementaryData"], consent_id))
    assert resp.status_code == 201, resp.text
    assert resp.content == b'{"controlSum":4250.50,"numberOfTransactions":"3"}'
    got = decimal_json(await h.get(f"{CONSENTS}/{consent_id}", fapi=True))["Data"]
    assert got["Status"] == "AwaitingAuthorisation"
    assert got["StatusUpdateDateTime"] == "2026-11-02T09:00:05.000Z"
    assert got["CreationDateTime"] == "2026-11-02T09:00:00.000Z"


async def test_a2_upload_spelling_and_whitespace_do_not_matter(h: Harness) -> None:
    init = initiation()
    consent_id = await h.create_consent(init)
    upload = json.loads(dumps(with_references(init["SupplementaryData"], consent_id)))
    raw = json.dumps(upload, indent=2).replace("1500.5", "1500.50000").encode()
    resp = await h.upload(consent_id, raw)
    assert resp.status_code == 201, resp.text


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (
            lambda u, c: u["data"]["transaction"][0]["transferInfo"].update(reference=""),
            "data.transaction[0].transferInfo.reference",
        ),
        (
            lambda u, c: u["data"]["transaction"][1]["transferInfo"].update(transactionAmount=Decimal("2000.10")),
            "data.transaction[1].transferInfo.transactionAmount",
        ),
        (
            lambda u, c: u["data"]["transaction"][2]["destinationAccount"].update(accountNumber="999"),
            "data.transaction[2].destinationAccount.accountNumber",
        ),
        (lambda u, c: u["data"]["transaction"].pop(), "data.transaction"),
        (lambda u, c: u["data"]["transaction"][0].pop("transferInfo"), "data.transaction[0].transferInfo"),
        (lambda u, c: u.update(Data={}), "Data"),
    ],
)
async def test_a2_discrepancies_are_incorrect_records(h: Harness, mutate: Any, path: str) -> None:
    # The spec's A2 error row: 400 UK.OBIE.Field.Invalid, message beginning incorrect_records.
    init = initiation()
    consent_id = await h.create_consent(init)
    upload = with_references(init["SupplementaryData"], consent_id)
    mutate(upload, consent_id)
    resp = await h.upload(consent_id, upload)
    error(resp, 400, "UK.OBIE.Field.Invalid", "incorrect_records", path)
    stored = h.bank.store.get(FILE_KIND, consent_id)
    assert stored is not None
    assert stored["status"] == "AwaitingUpload"


async def test_a2_bad_json_is_invalid_format(h: Harness) -> None:
    consent_id = await h.create_consent()
    error(await h.upload(consent_id, b"{"), 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format")


async def test_a2_second_upload_is_refused_unless_replayed(h: Harness) -> None:
    init = initiation()
    consent_id = await h.create_consent(init)
    upload = with_references(init["SupplementaryData"], consent_id)
    first = await h.upload(consent_id, upload, **{"x-idempotency-key": "upload-1"})
    assert first.status_code == 201
    replay = await h.upload(consent_id, upload, **{"x-idempotency-key": "upload-1"})
    assert replay.status_code == 201
    assert replay.content == first.content
    again = await h.upload(consent_id, upload)
    error(again, 400, "UK.OBIE.Resource.InvalidConsentStatus", "invalid_consent_status")
    assert "AwaitingAuthorisation" in again.json()["Message"]


async def test_a2_unknown_or_foreign_consent_is_not_found(h: Harness) -> None:
    init = initiation()
    consent_id = await h.create_consent(init)
    upload = with_references(init["SupplementaryData"], consent_id)
    error(
        await h.upload(consent_id, upload, client_id="client-b"), 400, "UK.OBIE.Resource.NotFound", "resource_not_found"
    )
    error(await h.upload("pay-fi-nope", upload), 400, "UK.OBIE.Resource.NotFound", "resource_not_found")
    stored = h.bank.store.get(FILE_KIND, consent_id)
    assert stored is not None
    assert stored["status"] == "AwaitingUpload"


# --- A5 ------------------------------------------------------------------------------------------------------------


async def test_a5_reads_the_consent_with_fapi_headers(h: Harness) -> None:
    init = initiation()
    consent_id = await h.create_consent(init)
    resp = await h.get(f"{CONSENTS}/{consent_id}", fapi=True)
    assert resp.status_code == 200
    body = decimal_json(resp)
    assert body["Data"]["Initiation"] == init
    assert body["Data"]["ConsentId"] == consent_id
    assert body["Data"]["Status"] == "AwaitingUpload"
    assert body["Links"]["Self"].endswith(f"{CONSENTS}/{consent_id}")
    assert body["Meta"] == {}
    resp = await h.get(f"{CONSENTS}/{consent_id}")
    error(resp, 400, "UK.OBIE.Header.Missing", "missing_header", "x-fapi-financial-id")
    headers = h.headers(h.cc_token(), fapi=True, extra={"x-fapi-financial-id": "other-bank"})
    resp = await h.http.get(f"{CONSENTS}/{consent_id}", headers=headers)
    error(resp, 400, "UK.OBIE.Header.Invalid", "invalid_header", "x-fapi-financial-id")
    headers = h.headers(h.cc_token(), fapi=True, extra={"x-fapi-customer-ip-address": "not-an-ip"})
    resp = await h.http.get(f"{CONSENTS}/{consent_id}", headers=headers)
    error(resp, 400, "UK.OBIE.Header.Invalid", "invalid_header", "x-fapi-customer-ip-address")


async def test_a5_other_client_and_unknown_id(h: Harness) -> None:
    consent_id = await h.create_consent()
    resp = await h.get(f"{CONSENTS}/{consent_id}", token=h.cc_token("client-b"), fapi=True)
    error(resp, 400, "UK.OBIE.Resource.NotFound", "resource_not_found")
    resp = await h.get(f"{CONSENTS}/pay-fi-{uuid.uuid4()}", fapi=True)
    error(resp, 400, "UK.OBIE.Resource.NotFound", "resource_not_found")


# --- A3 ------------------------------------------------------------------------------------------------------------


async def test_a3_creates_the_payment_and_consumes_the_consent(h: Harness) -> None:
    consent_id, init = await h.authorised_consent()
    h.clock.advance(30)
    resp = await h.pay(consent_id, init)
    assert resp.status_code == 201, resp.text
    body = decimal_json(resp)
    data = body["Data"]
    assert re.fullmatch(r"fp-[0-9a-f]+", data["FilePaymentId"])
    assert data["ConsentId"] == consent_id
    assert data["Status"] == "InitiationPending"
    assert data["MultiAuthorisation"] == {"Status": "AwaitingFurtherAuthorisation"}
    assert data["CreationDateTime"] == data["StatusUpdateDateTime"] == "2026-11-02T09:00:30.000Z"
    assert data["Initiation"] == init
    assert body["Links"]["Self"] == f"http://127.0.0.1:8700{PAYMENTS}/{data['FilePaymentId']}"
    assert body["Meta"] == {}
    consent = decimal_json(await h.get(f"{CONSENTS}/{consent_id}", fapi=True))["Data"]
    assert consent["Status"] == "Consumed"
    # One payment per consent.
    again = await h.pay(consent_id, init)
    error(again, 400, "UK.OBIE.Resource.InvalidConsentStatus", "invalid_consent_status")
    assert h.bank.store.count("file_payment") == 1


async def test_a3_needs_an_authorisation_code_token_for_that_consent(h: Harness) -> None:
    consent_id, init = await h.authorised_consent()
    body = {"Data": {"ConsentId": consent_id, "Initiation": init}}
    # The spec's A3 error row: a client-credentials token cannot create payments.
    resp = await h.post(PAYMENTS, body, h.headers(h.cc_token(), fapi=True))
    error(resp, 401, "UK.OBIE.Header.Invalid", "no_access_token", "Authorization")
    other_id, _ = await h.authorised_consent()
    resp = await h.post(PAYMENTS, body, h.headers(h.code_token(other_id), fapi=True))
    error(resp, 401, "UK.OBIE.Header.Invalid", "no_access_token", "Authorization")
    resp = await h.post(PAYMENTS, body, h.headers(None, fapi=True))
    error(resp, 401, "UK.OBIE.Header.Missing", "missing_authorization_header", "Authorization")
    token = h.code_token(consent_id)
    h.clock.advance(432000)
    resp = await h.post(PAYMENTS, body, h.headers(token, fapi=True))
    error(resp, 403, "UK.OBIE.Header.Invalid", "token_expired")
    assert h.bank.store.count("file_payment") == 0


async def test_a3_requires_fapi_headers(h: Harness) -> None:
    consent_id, init = await h.authorised_consent()
    body = {"Data": {"ConsentId": consent_id, "Initiation": init}}
    resp = await h.post(PAYMENTS, body, h.headers(h.code_token(consent_id)))
    error(resp, 400, "UK.OBIE.Header.Missing", "missing_header", "x-fapi-financial-id")
    headers = h.headers(h.code_token(consent_id), fapi=True)
    del headers["x-fapi-customer-ip-address"]
    error(
        await h.post(PAYMENTS, body, headers),
        400,
        "UK.OBIE.Header.Missing",
        "missing_header",
        "x-fapi-customer-ip-address",
    )


async def test_a3_initiation_must_equal_the_consents(h: Harness) -> None:
    consent_id, init = await h.authorised_consent()
    changed = {**init, "FileReference": "OTHER"}
    resp = await h.pay(consent_id, changed)
    error(resp, 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format", "Data.Initiation.FileReference")
    changed = json.loads(dumps(init))
    changed["SupplementaryData"]["data"]["transaction"][1]["transferInfo"]["transactionAmount"] = 2000.01
    resp = await h.pay(consent_id, changed)
    path = "Data.Initiation.SupplementaryData.data.transaction[1].transferInfo.transactionAmount"
    error(resp, 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format", path)
    resp = await h.pay(consent_id, {k: v for k, v in init.items() if k != "ControlSum"})
    error(resp, 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format", "Data.Initiation.ControlSum")
    bad = {"Data": {"ConsentId": consent_id, "Initiation": init, "Extra": 1}}
    resp = await h.post(PAYMENTS, bad, h.headers(h.code_token(consent_id), fapi=True))
    error(resp, 400, "UK.OBIE.Resource.InvalidFormat", "invalid_message_format", "Data.Extra")
    stored = h.bank.store.get(FILE_KIND, consent_id)
    assert stored is not None
    assert stored["status"] == "Authorised"
    # Decimal-equal numbers with another spelling are the same Initiation.
    raw = dumps({"Data": {"ConsentId": consent_id, "Initiation": init}}).replace(b"4250.50", b"4250.5")
    resp = await h.post(PAYMENTS, raw, h.headers(h.code_token(consent_id), fapi=True))
    assert resp.status_code == 201, resp.text


@pytest.mark.parametrize("status", ["AwaitingUpload", "AwaitingAuthorisation", "Rejected"])
async def test_a3_consent_must_be_authorised(h: Harness, status: str) -> None:
    init = initiation()
    consent_id = await h.create_consent(init)
    if status != "AwaitingUpload":
        assert (await h.upload(consent_id, with_references(init["SupplementaryData"], consent_id))).status_code == 201
    if status == "Rejected":
        set_status(h.bank, FILE_KIND, consent_id, "Rejected")
    resp = await h.pay(consent_id, init)
    error(resp, 400, "UK.OBIE.Resource.InvalidConsentStatus", "invalid_consent_status")
    assert status in resp.json()["Message"]


async def test_a3_foreign_consent_is_not_found(h: Harness) -> None:
    consent_id, init = await h.authorised_consent()
    body = {"Data": {"ConsentId": consent_id, "Initiation": init}}
    token = h.code_token(consent_id, client_id="client-b")
    error(
        await h.post(PAYMENTS, body, h.headers(token, fapi=True)),
        400,
        "UK.OBIE.Resource.NotFound",
        "resource_not_found",
    )


# --- A4, status progression and the report -------------------------------------------------------------------


async def _pay(h: Harness, init: dict[str, Any] | None = None) -> tuple[str, str]:
    consent_id, init = await h.authorised_consent(init)
    resp = await h.pay(consent_id, init)
    assert resp.status_code == 201, resp.text
    return consent_id, str(resp.json()["Data"]["FilePaymentId"])


async def test_a4_status_moves_after_the_delay(h: Harness) -> None:
    _, payment_id = await _pay(h)
    got = decimal_json(await h.get(f"{PAYMENTS}/{payment_id}"))
    assert got["Data"]["Status"] == "InitiationPending"
    assert got["Data"]["StatusUpdateDateTime"] == "2026-11-02T09:00:00.000Z"
    assert got["Data"]["Initiation"] == initiation()
    assert got["Links"]["Self"].endswith(f"{PAYMENTS}/{payment_id}")
    h.clock.advance(1.999)
    assert (await h.get(f"{PAYMENTS}/{payment_id}")).json()["Data"]["Status"] == "InitiationPending"
    h.clock.advance(0.001)
    data = (await h.get(f"{PAYMENTS}/{payment_id}")).json()["Data"]
    assert data["Status"] == "InitiationCompleted"
    assert data["StatusUpdateDateTime"] == "2026-11-02T09:00:02.000Z"
    assert data["CreationDateTime"] == "2026-11-02T09:00:00.000Z"
    h.clock.advance(3600)
    assert (await h.get(f"{PAYMENTS}/{payment_id}")).json()["Data"][
        "StatusUpdateDateTime"
    ] == "2026-11-02T09:00:02.000Z"


async def test_a4_fails_when_no_transfer_settles(h: Harness) -> None:
    init = initiation(payload(transaction("11119901"), transaction("22229902", "10.00")))
    _, payment_id = await _pay(h, init)
    h.clock.advance(2)
    assert (await h.get(f"{PAYMENTS}/{payment_id}")).json()["Data"]["Status"] == "InitiationFailed"
    report = decimal_json(await h.get(f"{PAYMENTS}/{payment_id}/report-file"))["Data"]
    assert [(t["Status"], t["ReasonCode"]) for t in report["Transactions"]] == [
        ("Rejected", "AC01"),
        ("Rejected", "AC04"),
    ]


async def test_a4_origin_rule_fails_the_whole_file(h: Harness) -> None:
    init = initiation(payload(transaction("1", origin="55509904"), transaction("2", origin="55509904")))
    _, payment_id = await _pay(h, init)
    h.clock.advance(2)
    assert (await h.get(f"{PAYMENTS}/{payment_id}")).json()["Data"]["Status"] == "InitiationFailed"
    report = (await h.get(f"{PAYMENTS}/{payment_id}/report-file")).json()["Data"]
    assert {t["ReasonCode"] for t in report["Transactions"]} == {"AM04"}


async def test_a4_token_rules_and_isolation(h: Harness) -> None:
    consent_id, payment_id = await _pay(h)
    # The spec's A4 error row: an expired token is 403 token_expired.
    token = h.cc_token()
    h.clock.advance(600)
    error(await h.get(f"{PAYMENTS}/{payment_id}", token=token), 403, "UK.OBIE.Header.Invalid", "token_expired")
    error(
        await h.get(f"{PAYMENTS}/{payment_id}", token=h.code_token(consent_id)),
        401,
        "UK.OBIE.Header.Invalid",
        "no_access_token",
    )
    other = h.cc_token("client-b")
    error(await h.get(f"{PAYMENTS}/{payment_id}", token=other), 400, "UK.OBIE.Resource.NotFound", "resource_not_found")
    error(
        await h.get(f"{PAYMENTS}/{payment_id}/report-file", token=other),
        400,
        "UK.OBIE.Resource.NotFound",
        "resource_not_found",
    )
    error(await h.get(f"{PAYMENTS}/fp-00"), 400, "UK.OBIE.Resource.NotFound", "resource_not_found")
    error(await h.get(f"{PAYMENTS}/fp-00/report-file"), 400, "UK.OBIE.Resource.NotFound", "resource_not_found")


async def test_report_file_lists_each_transfer_and_totals(h: Harness) -> None:
    init = initiation(
        payload(
            transaction("200100300", "1500.50"),
            transaction("200109903", "99.95", email="blocked@example.com"),
            transaction("200100302", 750, email="eva@example.com"),
        )
    )
    consent_id, payment_id = await _pay(h, init)
    pending = decimal_json(await h.get(f"{PAYMENTS}/{payment_id}/report-file"))
    assert pending["Data"]["Status"] == "InitiationPending"
    assert [t["Status"] for t in pending["Data"]["Transactions"]] == ["Pending"] * 3
    assert pending["Links"]["Self"].endswith(f"{PAYMENTS}/{payment_id}/report-file")
    h.clock.advance(2)
    resp = await h.get(f"{PAYMENTS}/{payment_id}/report-file")
    assert resp.status_code == 200
    data = decimal_json(resp)["Data"]
    assert data["Status"] == "InitiationCompleted"
    assert data["FileReference"] == "PAYROLL-2026-11"
    assert data["ConsentId"] == consent_id
    assert data["Transactions"][1] == {
        "Index": 1,
        "DestinationAccount": "200109903",
        "Amount": Decimal("99.95"),
        "Currency": "GTQ",
        "Reference": consent_id,
        "Status": "Rejected",
        "ReasonCode": "AC06",
        "Reason": "BlockedAccount: the destination account is blocked",
    }
    assert [t["Status"] for t in data["Transactions"]] == ["Settled", "Rejected", "Settled"]
    assert data["Totals"]["Settled"] == {"Count": 2, "Amount": Decimal("2250.50")}
    assert data["Totals"]["Rejected"] == {"Count": 1, "Amount": Decimal("99.95")}
    assert data["Totals"]["ControlSum"] == Decimal("2350.45")
    assert data["Totals"]["NumberOfTransactions"] == "3"


# --- idempotency ----------------------------------------------------------------------------------------------


async def test_a1_idempotent_replay_ignores_whitespace_and_key_order(h: Harness) -> None:
    token = h.cc_token()
    init = initiation()
    first = await h.post(
        CONSENTS, {"Data": {"Initiation": init}}, h.headers(token, extra={"x-idempotency-key": "batch-42"})
    )
    assert first.status_code == 201
    respelled = json.dumps(json.loads(dumps({"Data": {"Initiation": init}})), indent=3, sort_keys=True).encode()
    second = await h.post(CONSENTS, respelled, h.headers(token, extra={"x-idempotency-key": "batch-42"}))
    assert second.status_code == 201
    assert second.json()["Data"]["ConsentId"] == first.json()["Data"]["ConsentId"]
    assert h.bank.store.count(FILE_KIND) == 1
    changed = initiation(FileReference="OTHER")
    third = await h.post(
        CONSENTS, {"Data": {"Initiation": changed}}, h.headers(token, extra={"x-idempotency-key": "batch-42"})
    )
    error(third, 400, "UK.OBIE.Header.Invalid", "invalid_header", "x-idempotency-key")
    assert h.bank.store.count(FILE_KIND) == 1
    # Keys are per client: another client's same key is a new consent.
    other = await h.post(
        CONSENTS,
        {"Data": {"Initiation": init}},
        h.headers(h.cc_token("client-b"), extra={"x-idempotency-key": "batch-42"}),
    )
    assert other.status_code == 201
    assert other.json()["Data"]["ConsentId"] != first.json()["Data"]["ConsentId"]


async def test_idempotency_key_longer_than_40_is_refused(h: Harness) -> None:
    resp = await h.post(
        CONSENTS, {"Data": {"Initiation": initiation()}}, h.headers(h.cc_token(), extra={"x-idempotency-key": "k" * 41})
    )
    error(resp, 400, "UK.OBIE.Header.Invalid", "invalid_header", "x-idempotency-key")
    assert h.bank.store.count(FILE_KIND) == 0
    resp = await h.post(
        CONSENTS, {"Data": {"Initiation": initiation()}}, h.headers(h.cc_token(), extra={"x-idempotency-key": "k" * 40})
    )
    assert resp.status_code == 201


async def test_a3_idempotent_replay_returns_the_same_payment(h: Harness) -> None:
    consent_id, init = await h.authorised_consent()
    first = await h.pay(consent_id, init, **{"x-idempotency-key": "pay-1"})
    assert first.status_code == 201
    h.clock.advance(10)
    second = await h.pay(consent_id, init, **{"x-idempotency-key": "pay-1"})
    assert second.status_code == 201
    assert second.json()["Data"]["FilePaymentId"] == first.json()["Data"]["FilePaymentId"]
    different = await h.pay(consent_id, {**init, "FileReference": "X"}, **{"x-idempotency-key": "pay-1"})
    error(different, 400, "UK.OBIE.Header.Invalid", "invalid_header", "x-idempotency-key")
    assert h.bank.store.count("file_payment") == 1


async def test_a2_same_key_other_body_changes_nothing(h: Harness) -> None:
    init = initiation()
    consent_id = await h.create_consent(init)
    bad = with_references(init["SupplementaryData"], consent_id)
    bad["data"]["transaction"][0]["transferInfo"]["concept"] = "edited"
    error(
        await h.upload(consent_id, bad, **{"x-idempotency-key": "u"}), 400, "UK.OBIE.Field.Invalid", "incorrect_records"
    )
    # A failed attempt stores nothing: the key can carry the right file afterwards.
    good = with_references(init["SupplementaryData"], consent_id)
    assert (await h.upload(consent_id, good, **{"x-idempotency-key": "u"})).status_code == 201
    error(
        await h.upload(consent_id, bad, **{"x-idempotency-key": "u"}), 400, "UK.OBIE.Header.Invalid", "invalid_header"
    )
    stored = h.bank.store.get(FILE_KIND, consent_id)
    assert stored is not None
    assert stored["status"] == "AwaitingAuthorisation"


async def test_route_names_for_fault_injection(h: Harness) -> None:
    names = {getattr(r, "name", None) for r in routes(h.bank)}
    assert names == {
        "file-payment-consents.create",
        "file-payment-consents.upload",
        "file-payment-consents.get",
        "file-payments.create",
        "file-payments.get",
        "file-payments.report",
    }
