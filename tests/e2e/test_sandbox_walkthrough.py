"""Flow A and flow B driven by a plain httpx client against a real `dispersion sandbox` process."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import httpx
import pytest
from plain_client import RS, PlainClient, file_hash, file_payload, to_json, with_references
from sandbox_process import running_sandbox


@pytest.fixture(scope="module")
def bank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlainClient]:
    directory = tmp_path_factory.mktemp("sandbox")
    with (
        running_sandbox(directory, "--admin", "--file-payment-delay", "2", "--vrp-delay", "1") as sandbox,
        httpx.Client(timeout=10) as http,
    ):
        c = sandbox.client
        yield PlainClient(
            http,
            sandbox.base_url,
            c["client_id"],
            c["client_secret"],
            c["kid"],
            sandbox.signing_key_pem,
            c["redirect_uris"][0],
        )


def advance(bank: PlainClient, seconds: float) -> None:
    r = bank.http.post(f"{bank.base}/__sandbox/clock", json={"advance_seconds": seconds})
    assert r.status_code == 200, r.text


def test_flow_a_file_payment(bank: PlainClient) -> None:
    disc = bank.discovery()
    assert disc["issuer"] == bank.base
    assert disc["code_challenge_methods_supported"] == []
    token = bank.client_credentials(disc["token_endpoint"], basic=False)

    payload = file_payload("1234567890", [("5551110001", "1500.50"), ("5551110002", "980.25"), ("5551110003", "12.00")])
    initiation = {
        "SupplementaryData": payload,
        "FileType": "UK.OBIE.PaymentInitiation.4.0",
        "FileHash": file_hash(payload),
        "FileReference": "PAYROLL-2026-11",
        "NumberOfTransactions": "3",
        "ControlSum": Decimal("2492.75"),
    }
    r = bank.http.post(
        f"{bank.base}{RS}/file-payment-consents",
        content=to_json({"Data": {"Initiation": initiation}}),
        headers=bank.headers(token),
    )
    assert r.status_code == 201, r.text
    consent = r.json()["Data"]
    consent_id = consent["ConsentId"]
    assert consent_id.startswith("pay-fi-") and consent["Status"] == "AwaitingUpload"
    assert r.json()["Links"]["Self"].endswith(f"/file-payment-consents/{consent_id}")

    r = bank.http.post(
        f"{bank.base}{RS}/file-payment-consents/{consent_id}/file",
        content=to_json(with_references(payload, consent_id)),
        headers=bank.headers(token),
    )
    assert r.status_code == 201, r.text
    assert r.json() == {"controlSum": 2492.75, "numberOfTransactions": "3"}

    redirect = bank.authorize(disc, consent_id, basic=False)
    page = redirect["_page"]
    assert "PAYROLL-2026-11" in page and ("2492.75" in page or "2,492.75" in page) and "GTQ" in page
    assert redirect["iss"] == bank.base
    tokens = bank.exchange(disc["token_endpoint"], redirect["code"], redirect["_verifier"], basic=False)
    assert tokens["scope"] == f"payments:{consent_id} openid" and tokens["expires_in"] == 432000
    assert tokens["refresh_token"]

    body = {"Data": {"ConsentId": consent_id, "Initiation": initiation}}
    r = bank.http.post(
        f"{bank.base}{RS}/file-payments", content=to_json(body), headers=bank.headers(tokens["access_token"], fapi=True)
    )
    assert r.status_code == 201, r.text
    payment = r.json()["Data"]
    assert payment["Status"] == "InitiationPending"
    assert payment["MultiAuthorisation"]["Status"] == "AwaitingFurtherAuthorisation"
    assert payment["FilePaymentId"].startswith("fp-")

    # A second payment under the same consent is refused: one payment per consent.
    r = bank.http.post(
        f"{bank.base}{RS}/file-payments", content=to_json(body), headers=bank.headers(tokens["access_token"], fapi=True)
    )
    assert r.status_code == 400 and r.json()["Code"]

    advance(bank, 3)
    token = bank.client_credentials(disc["token_endpoint"], basic=False)
    r = bank.http.get(f"{bank.base}{RS}/file-payments/{payment['FilePaymentId']}", headers=bank.headers(token))
    assert r.status_code == 200 and r.json()["Data"]["Status"] == "InitiationCompleted", r.text
    r = bank.http.get(f"{bank.base}{RS}/file-payment-consents/{consent_id}", headers=bank.headers(token, fapi=True))
    assert r.status_code == 200 and r.json()["Data"]["Status"] == "Consumed"
    r = bank.http.get(
        f"{bank.base}{RS}/file-payments/{payment['FilePaymentId']}/report-file", headers=bank.headers(token)
    )
    assert r.status_code == 200, r.text
    assert "5551110002" in r.text


def test_flow_b_vrp(bank: PlainClient) -> None:
    disc = bank.discovery()
    token = bank.client_credentials(disc["token_endpoint"], basic=True)
    creditor = {
        "SchemeName": "UK.OBIE.SortCodeAccountNumber",
        "Identification": "20000319470104",
        "Name": "Savings pot",
    }
    data = {
        "ControlParameters": {
            "PSUAuthenticationMethods": ["UK.OBIE.SCA"],
            "VRPType": ["UK.OBIE.VRPType.Sweeping"],
            "ValidFromDateTime": "2020-01-01T00:00:00+00:00",
            "ValidToDateTime": "2099-12-31T00:00:00+00:00",
            "MaximumIndividualAmount": {"Amount": "100.00", "Currency": "GBP"},
            "PeriodicLimits": [
                {"Amount": "150.00", "Currency": "GBP", "PeriodType": "Month", "PeriodAlignment": "Calendar"}
            ],
        },
        "Initiation": {"CreditorAccount": creditor},
        "RemittanceInformation": {"Reference": "SWEEP-01", "Unstructured": "VRP - CUOTAS - Dispersion"},
    }
    r = bank.http.post(
        f"{bank.base}{RS}/domestic-vrp-consents",
        json={"Data": data, "Risk": {}},
        headers=bank.headers(token, fapi=True),
    )
    assert r.status_code == 201, r.text
    consent_id = r.json()["Data"]["ConsentId"]
    assert consent_id.startswith("vrp-") and r.json()["Data"]["Status"] == "AwaitingAuthorisation"

    redirect = bank.authorize(disc, consent_id, basic=True)
    assert "Savings pot" in redirect["_page"]
    tokens = bank.exchange(disc["token_endpoint"], redirect["code"], redirect["_verifier"], basic=True)

    def pay(amount: str, n: int) -> httpx.Response:
        body = {
            "Data": {
                "ConsentId": consent_id,
                "Initiation": {"CreditorAccount": creditor},
                "PSUAuthenticationMethod": "UK.OBIE.SCA",
                "VRPType": "UK.OBIE.VRPType.Sweeping",
                "Instruction": {
                    "InstructionIdentification": f"I{n}",
                    "EndToEndIdentification": f"E{n}",
                    "CreditorAccount": creditor,
                    "InstructedAmount": {"Amount": amount, "Currency": "GBP"},
                    "RemittanceInformation": {"Unstructured": "sweep"},
                },
            },
            "Risk": {},
        }
        return bank.http.post(
            f"{bank.base}{RS}/domestic-vrps", json=body, headers=bank.headers(tokens["access_token"], fapi=True)
        )

    r = pay("100.00", 1)
    assert r.status_code == 201, r.text
    vrp_id = r.json()["Data"]["DomesticVRPId"]
    assert vrp_id.startswith("obvrp-") and r.json()["Data"]["Status"] == "Pending"
    r = pay("100.01", 2)
    assert r.status_code == 400 and r.json()["Code"] == "UK.OBIE.Rules.FailsControlParameters"
    r = pay("50.01", 3)
    assert r.status_code == 400 and r.json()["Code"] == "UK.OBIE.Rules.FailsControlParameters"
    assert pay("50.00", 4).status_code == 201

    advance(bank, 2)
    r = bank.http.get(f"{bank.base}{RS}/domestic-vrps/{vrp_id}", headers=bank.headers(token, fapi=True))
    assert r.status_code == 200 and r.json()["Data"]["Status"] == "AcceptedSettlementCompleted", r.text
    r = bank.http.get(f"{bank.base}{RS}/domestic-vrp-consents/{consent_id}", headers=bank.headers(token, fapi=True))
    assert r.status_code == 200 and r.json()["Data"]["Status"] == "Authorised"


def test_rejected_authorisation_redirects_with_access_denied(bank: PlainClient) -> None:
    disc = bank.discovery()
    token = bank.client_credentials(disc["token_endpoint"], basic=True)
    creditor = {"SchemeName": "UK.OBIE.SortCodeAccountNumber", "Identification": "20000319470104", "Name": "Pot"}
    data = {
        "ControlParameters": {
            "PSUAuthenticationMethods": ["UK.OBIE.SCA"],
            "VRPType": ["UK.OBIE.VRPType.Sweeping"],
            "ValidFromDateTime": "2020-01-01T00:00:00+00:00",
            "ValidToDateTime": "2099-12-31T00:00:00+00:00",
            "MaximumIndividualAmount": {"Amount": "10.00", "Currency": "GBP"},
            "PeriodicLimits": [],
        },
        "Initiation": {"CreditorAccount": creditor},
        "RemittanceInformation": {"Reference": "R", "Unstructured": "VRP - CUOTAS - Dispersion"},
    }
    r = bank.http.post(
        f"{bank.base}{RS}/domestic-vrp-consents",
        json={"Data": data, "Risk": {}},
        headers=bank.headers(token, fapi=True),
    )
    assert r.status_code == 201, r.text
    consent_id = r.json()["Data"]["ConsentId"]
    redirect = bank.authorize(disc, consent_id, basic=True, approve=False)
    assert redirect["error"] == "access_denied" and "code" not in redirect
    r = bank.http.get(f"{bank.base}{RS}/domestic-vrp-consents/{consent_id}", headers=bank.headers(token, fapi=True))
    assert r.json()["Data"]["Status"] == "Rejected"
