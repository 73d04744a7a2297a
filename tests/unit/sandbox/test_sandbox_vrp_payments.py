"""B2 (create domestic VRP) and its read over in-process HTTP: consent checks, every limit, status, isolation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sandbox_vrp_support import CONSENTS, PAYMENTS, consent_body, error_of, harness, limit, mutate, payment_body, utc

from sandbox.consents import VRP_KIND
from sandbox.jsonutil import dumps
from sandbox.routes.vrp import PAYMENT_KIND

LIMIT = "Data.ControlParameters.PeriodicLimits[0]"


async def test_create_and_read_a_domestic_vrp() -> None:
    async with harness(vrp_delay=5.0) as h:
        consent_id = await h.authorised_consent()
        h.clock.advance(60)
        resp = await h.pay(consent_id, "25.50", extra={"x-fapi-interaction-id": "6f1c1a52-3a8c-4c55-9a3b-0cba7c5d1e2f"})
        assert resp.status_code == 201, resp.text
        assert resp.headers["x-fapi-interaction-id"] == "6f1c1a52-3a8c-4c55-9a3b-0cba7c5d1e2f"
        out = resp.json()
        data = out["Data"]
        vrp_id = data["DomesticVRPId"]
        assert vrp_id.startswith("obvrp-")
        int(vrp_id.removeprefix("obvrp-"), 16)
        assert data["ConsentId"] == consent_id
        assert data["Status"] == "Pending"
        assert data["CreationDateTime"] == data["StatusUpdateDateTime"] == "2026-11-02T09:01:00.000Z"
        assert data["Charges"] == [
            {
                "ChargeBearer": "BorneByDebtor",
                "Type": "UK.OBIE.MoneyTransferOut",
                "Amount": {"Amount": "0.00", "Currency": "GBP"},
            }
        ]
        sent = payment_body(consent_id, "25.50")["Data"]
        assert data["Initiation"] == sent["Initiation"]
        assert data["Instruction"] == sent["Instruction"]
        assert data["Instruction"]["InstructedAmount"]["Amount"] == "25.50"
        assert out["Risk"] == {} and out["Meta"] == {}
        assert out["Links"]["Self"] == f"http://127.0.0.1:8700{PAYMENTS}/{vrp_id}"

        # Status moves on read once the delay has passed; StatusUpdateDateTime is the moment of the change.
        h.clock.advance(4.999)
        read = await h.get(f"{PAYMENTS}/{vrp_id}")
        assert read.status_code == 200, read.text
        assert read.json()["Data"]["Status"] == "Pending"
        assert read.json()["Data"]["StatusUpdateDateTime"] == "2026-11-02T09:01:00.000Z"
        h.clock.advance(0.001)
        read = await h.get(f"{PAYMENTS}/{vrp_id}")
        assert read.json()["Data"]["Status"] == "AcceptedSettlementCompleted"
        assert read.json()["Data"]["StatusUpdateDateTime"] == "2026-11-02T09:01:05.000Z"
        h.clock.advance(3600)
        read = await h.get(f"{PAYMENTS}/{vrp_id}")
        assert read.json()["Data"]["StatusUpdateDateTime"] == "2026-11-02T09:01:05.000Z"
        assert read.json()["Data"]["Charges"] == data["Charges"]
        assert read.json()["Links"] == out["Links"]


async def test_consent_must_be_authorised() -> None:
    async with harness() as h:
        consent_id = await h.create_consent()
        resp = await h.pay(consent_id, "1.00")
        assert error_of(resp)[:2] == (400, "UK.OBIE.Resource.InvalidConsentStatus")
        assert "AwaitingAuthorisation" in resp.json()["Message"]
        h.authorise(consent_id, "Rejected")
        resp = await h.pay(consent_id, "1.00")
        assert error_of(resp)[:2] == (400, "UK.OBIE.Resource.InvalidConsentStatus")
        assert h.bank.store.count(PAYMENT_KIND) == 0


async def test_token_must_be_an_auth_code_token_for_this_consent() -> None:
    async with harness() as h:
        consent_id = await h.authorised_consent()
        other_id = await h.authorised_consent()
        body = payment_body(consent_id, "1.00")
        resp = await h.post(PAYMENTS, body, h.headers(h.cc_token()))
        assert error_of(resp) == (401, "UK.OBIE.Header.Invalid", "Authorization")
        resp = await h.post(PAYMENTS, body, h.headers(h.code_token(other_id)))
        assert error_of(resp) == (401, "UK.OBIE.Header.Invalid", "Authorization")
        resp = await h.post(PAYMENTS, body, h.headers(None))
        assert error_of(resp) == (401, "UK.OBIE.Header.Missing", "Authorization")
        token = h.code_token(consent_id)
        h.clock.advance(432000)
        resp = await h.post(PAYMENTS, body, h.headers(token))
        assert error_of(resp)[:2] == (403, "UK.OBIE.Header.Invalid")
        assert resp.json()["Message"] == "token_expired"
        assert h.bank.store.count(PAYMENT_KIND) == 0


@pytest.mark.parametrize(
    ("header", "value", "expected"),
    [
        ("x-fapi-interaction-id", None, (400, "UK.OBIE.Header.Missing", "x-fapi-interaction-id")),
        ("x-fapi-financial-id", None, (400, "UK.OBIE.Header.Missing", "x-fapi-financial-id")),
        ("x-fapi-customer-ip-address", "999.1.1.1", (400, "UK.OBIE.Header.Invalid", "x-fapi-customer-ip-address")),
        ("Content-Type", "application/xml", (400, "UK.OBIE.Header.Invalid", "Content-Type")),
    ],
)
async def test_payment_headers(header: str, value: str | None, expected: tuple[int, str, str]) -> None:
    async with harness() as h:
        consent_id = await h.authorised_consent()
        hdrs = h.headers(h.code_token(consent_id))
        if value is None:
            del hdrs[header]
        else:
            hdrs[header] = value
        resp = await h.post(PAYMENTS, payment_body(consent_id, "1.00"), hdrs)
        assert error_of(resp) == expected


async def test_another_clients_consent_and_payment_are_not_found() -> None:
    async with harness() as h:
        consent_a = await h.authorised_consent(client_id="client-a")
        # Even a token of client-b naming client-a's consent cannot pay under it.
        resp = await h.pay(consent_a, "1.00", client_id="client-b")
        assert error_of(resp) == (400, "UK.OBIE.Resource.NotFound", "ConsentId")
        resp = await h.pay("vrp-unknown", "1.00")
        assert error_of(resp) == (400, "UK.OBIE.Resource.NotFound", "ConsentId")
        resp = await h.pay(consent_a, "1.00")
        vrp_id = resp.json()["Data"]["DomesticVRPId"]
        resp = await h.get(f"{PAYMENTS}/{vrp_id}", h.cc_token("client-b"))
        assert error_of(resp) == (400, "UK.OBIE.Resource.NotFound", "DomesticVRPId")
        resp = await h.get(f"{PAYMENTS}/obvrp-00")
        assert error_of(resp)[:2] == (400, "UK.OBIE.Resource.NotFound")
        resp = await h.get(f"{PAYMENTS}/{vrp_id}", h.code_token(consent_a))
        assert error_of(resp) == (401, "UK.OBIE.Header.Invalid", "Authorization")
        hdrs = h.headers(h.cc_token())
        del hdrs["x-fapi-financial-id"]
        resp = await h.http.get(f"{PAYMENTS}/{vrp_id}", headers=hdrs)
        assert error_of(resp) == (400, "UK.OBIE.Header.Missing", "x-fapi-financial-id")


@pytest.mark.parametrize(
    ("path", "value", "code", "error_path"),
    [
        ("Data.Initiation.CreditorAccount.Name", "Someone Else", "UK.OBIE.Resource.InvalidFormat", "Data.Initiation"),
        (
            "Data.Instruction.CreditorAccount.Identification",
            "40400187654321",
            "UK.OBIE.Resource.InvalidFormat",
            "Data.Instruction.CreditorAccount",
        ),
        (
            "Data.Instruction.InstructedAmount.Currency",
            "EUR",
            "UK.OBIE.Rules.FailsControlParameters",
            "Data.ControlParameters.MaximumIndividualAmount.Currency",
        ),
        (
            "Data.Instruction.InstructedAmount.Amount",
            10,
            "UK.OBIE.Resource.InvalidFormat",
            "Data.Instruction.InstructedAmount.Amount",
        ),
        ("Data.VRPType", "UK.OBIE.VRPType.Commercial", "UK.OBIE.Resource.InvalidFormat", "Data.VRPType"),
        ("Data.Instruction", ..., "UK.OBIE.Resource.InvalidFormat", "Data.Instruction"),
        ("Risk", ..., "UK.OBIE.Resource.InvalidFormat", "Risk"),
    ],
)
async def test_payment_must_match_the_consent(path: str, value: Any, code: str, error_path: str) -> None:
    async with harness() as h:
        consent_id = await h.authorised_consent()
        resp = await h.pay(consent_id, "", mutate(payment_body(consent_id, "1.00"), path, value))
        assert error_of(resp) == (400, code, error_path)
        assert h.bank.store.count(PAYMENT_KIND) == 0


@pytest.mark.parametrize("raw", [b"{}", b'{"Data": []}', b'{"Data": {"ConsentId": 7}}', b"not json", b"[]"])
async def test_malformed_payment_bodies(raw: bytes) -> None:
    async with harness() as h:
        consent_id = await h.authorised_consent()
        resp = await h.post(PAYMENTS, raw, h.headers(h.code_token(consent_id)))
        assert error_of(resp)[:2] == (400, "UK.OBIE.Resource.InvalidFormat")


async def test_validity_window() -> None:
    async with harness(start=utc(2026, 11, 1, 12)) as h:
        consent_id = await h.authorised_consent(valid_from="2026-11-02T00:00:00Z", valid_to="2026-11-03T00:00:00Z")
        resp = await h.pay(consent_id, "1.00")
        assert error_of(resp) == (
            400,
            "UK.OBIE.Rules.FailsControlParameters",
            "Data.ControlParameters.ValidFromDateTime",
        )
        h.clock.current = utc(2026, 11, 2)
        assert (await h.pay(consent_id, "1.00")).status_code == 201
        h.clock.current = utc(2026, 11, 3)
        assert (await h.pay(consent_id, "1.00")).status_code == 201
        h.clock.current = utc(2026, 11, 3) + timedelta(milliseconds=1)
        resp = await h.pay(consent_id, "1.00")
        assert error_of(resp) == (400, "UK.OBIE.Rules.FailsControlParameters", "Data.ControlParameters.ValidToDateTime")


async def test_maximum_individual_amount() -> None:
    async with harness() as h:
        consent_id = await h.authorised_consent(maximum="100.00")
        assert (await h.pay(consent_id, "100.00")).status_code == 201
        resp = await h.pay(consent_id, "100.01")
        assert error_of(resp) == (
            400,
            "UK.OBIE.Rules.FailsControlParameters",
            "Data.ControlParameters.MaximumIndividualAmount.Amount",
        )
        assert "100.01" in resp.json()["Message"]
        assert "MaximumIndividualAmount" in resp.json()["Message"]


# Consent created at T0 = Monday 2026-11-02 09:00 UTC. For each period: the last instant still in the first
# window and the first instant of the next one.
ROLLOVER = {
    ("Day", "Calendar"): (utc(2026, 11, 2, 23, 59, 59), utc(2026, 11, 3)),
    ("Day", "Consent"): (utc(2026, 11, 3, 8, 59, 59), utc(2026, 11, 3, 9)),
    ("Week", "Calendar"): (utc(2026, 11, 8, 23, 59, 59), utc(2026, 11, 9)),
    ("Week", "Consent"): (utc(2026, 11, 9, 8, 59, 59), utc(2026, 11, 9, 9)),
    ("Month", "Calendar"): (utc(2026, 11, 30, 23, 59, 59), utc(2026, 12, 1)),
    ("Month", "Consent"): (utc(2026, 12, 2, 8, 59, 59), utc(2026, 12, 2, 9)),
}


@pytest.mark.parametrize(("period", "alignment"), list(ROLLOVER))
async def test_each_periodic_limit(period: str, alignment: str) -> None:
    last_in_window, next_window = ROLLOVER[(period, alignment)]
    async with harness() as h:
        consent_id = await h.authorised_consent(limit("100.00", period, alignment))
        assert (await h.pay(consent_id, "60.00")).status_code == 201
        h.clock.current = last_in_window - timedelta(hours=1)
        assert (await h.pay(consent_id, "40.00")).status_code == 201  # exactly at the limit
        h.clock.current = last_in_window
        resp = await h.pay(consent_id, "0.01")
        assert error_of(resp) == (400, "UK.OBIE.Rules.FailsControlParameters", LIMIT)
        assert f"({period}, {alignment})" in resp.json()["Message"]
        assert "100.01" in resp.json()["Message"]
        h.clock.current = next_window
        assert (await h.pay(consent_id, "100.00")).status_code == 201  # a fresh period
        resp = await h.pay(consent_id, "0.01")
        assert error_of(resp)[2] == LIMIT
        assert h.bank.store.count(PAYMENT_KIND) == 3


async def test_rejected_payments_are_not_stored_and_do_not_count() -> None:
    async with harness() as h:
        consent_id = await h.authorised_consent(limit("50.00", "Day", "Calendar"))
        assert (await h.pay(consent_id, "30.00")).status_code == 201
        assert (await h.pay(consent_id, "20.01")).status_code == 400
        assert (await h.pay(consent_id, "20.01")).status_code == 400
        assert (await h.pay(consent_id, "20.00")).status_code == 201
        assert h.bank.store.count(PAYMENT_KIND) == 2
        ledger = h.bank.store.get(VRP_KIND, consent_id)
        assert ledger is not None
        assert [p["amount"] for p in ledger["payments"]] == ["30.00", "20.00"]


async def test_second_limit_is_named_by_its_index() -> None:
    async with harness() as h:
        consent_id = await h.authorised_consent(
            limit("1000.00", "Month", "Calendar"), limit("70.00", "Week", "Consent")
        )
        assert (await h.pay(consent_id, "70.00")).status_code == 201
        resp = await h.pay(consent_id, "0.01")
        assert error_of(resp)[2] == "Data.ControlParameters.PeriodicLimits[1]"


async def test_limits_are_per_consent() -> None:
    async with harness() as h:
        first = await h.authorised_consent(limit("10.00", "Day", "Calendar"))
        second = await h.authorised_consent(limit("10.00", "Day", "Calendar"))
        assert (await h.pay(first, "10.00")).status_code == 201
        assert (await h.pay(second, "10.00")).status_code == 201
        assert (await h.pay(first, "0.01")).status_code == 400


async def test_consent_month_from_the_31st_in_a_leap_year() -> None:
    async with harness(start=utc(2028, 1, 31, 10)) as h:
        consent_id = await h.authorised_consent(limit("100.00", "Month", "Consent"))
        h.clock.current = utc(2028, 2, 29, 9, 59, 59)
        assert (await h.pay(consent_id, "100.00")).status_code == 201
        assert error_of(await h.pay(consent_id, "0.01"))[2] == LIMIT
        h.clock.current = utc(2028, 2, 29, 10)  # Jan 31 + 1 month = Feb 29 (leap year)
        assert (await h.pay(consent_id, "100.00")).status_code == 201
        h.clock.current = utc(2028, 3, 31, 9, 59)  # the window runs to Mar 31, not Mar 29
        assert error_of(await h.pay(consent_id, "0.01"))[2] == LIMIT
        h.clock.current = utc(2028, 3, 31, 10)
        assert (await h.pay(consent_id, "0.01")).status_code == 201


async def test_calendar_month_end_in_february() -> None:
    async with harness(start=utc(2027, 2, 10)) as h:
        consent_id = await h.authorised_consent(limit("100.00", "Month", "Calendar"))
        h.clock.current = utc(2027, 2, 28, 23, 59, 59)
        assert (await h.pay(consent_id, "100.00")).status_code == 201
        assert error_of(await h.pay(consent_id, "0.01"))[2] == LIMIT
        h.clock.current = utc(2027, 3, 1)
        assert (await h.pay(consent_id, "100.00")).status_code == 201


async def test_idempotent_payment_is_counted_once() -> None:
    async with harness() as h:
        consent_id = await h.authorised_consent(limit("100.00", "Day", "Calendar"))
        token = h.code_token(consent_id)
        body = payment_body(consent_id, "60.00")
        first = await h.post(PAYMENTS, body, h.headers(token, **{"x-idempotency-key": "pay-1"}))
        again = await h.post(
            PAYMENTS, dumps(body).replace(b":", b": "), h.headers(token, **{"x-idempotency-key": "pay-1"})
        )
        assert first.status_code == again.status_code == 201
        assert again.json()["Data"]["DomesticVRPId"] == first.json()["Data"]["DomesticVRPId"]
        assert h.bank.store.count(PAYMENT_KIND) == 1
        assert (await h.pay(consent_id, "40.00")).status_code == 201  # the replay did not use the limit
        other = payment_body(consent_id, "1.00")
        resp = await h.post(PAYMENTS, other, h.headers(token, **{"x-idempotency-key": "pay-1"}))
        assert error_of(resp) == (400, "UK.OBIE.Header.Invalid", "x-idempotency-key")
        assert h.bank.store.count(PAYMENT_KIND) == 2


async def test_many_payments_under_one_consent_and_consent_read_after() -> None:
    async with harness(vrp_delay=0.0) as h:
        consent_id = await h.authorised_consent(limit("1000.00", "Month", "Consent"), maximum="10.00")
        ids = set()
        for _ in range(20):
            resp = await h.pay(consent_id, "9.99")
            assert resp.status_code == 201
            ids.add(resp.json()["Data"]["DomesticVRPId"])
            h.clock.advance(3600)
        assert len(ids) == 20
        read = await h.get(f"{PAYMENTS}/{ids.pop()}")
        assert read.json()["Data"]["Status"] == "AcceptedSettlementCompleted"
        consent = await h.get(f"{CONSENTS}/{consent_id}")
        assert consent.json()["Data"]["Status"] == "Authorised"
        assert "payments" not in consent.json()["Data"]  # the ledger is internal
        assert consent_body()["Data"]["Initiation"] == consent.json()["Data"]["Initiation"]
