"""The OpenAPI document as data (sandbox/openapi.json): shipped, loaded with its one dynamic part, served as is."""

from __future__ import annotations

import tomllib
from decimal import Decimal

import httpx
import pytest
from manual_clock import ManualClock
from paths import ROOT

from sandbox.app import create_app
from sandbox.clients import ClientRegistry
from sandbox.config import SandboxConfig
from sandbox.filecheck import payload_hash
from sandbox.jsonutil import dumps, loads
from sandbox.openapi import DOCUMENT_FILE, build_document
from sandbox.state import Bank

RS = "/open-banking/v3.1/pisp"


def valid_example(document: dict[str, object], path: str) -> object:
    operation = document["paths"][path]["post"]  # type: ignore[index]
    return operation["requestBody"]["content"]["application/json"]["examples"]["valid"]["value"]


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:8700", "https://bank.example/sandbox/"])
async def test_the_served_document_is_the_data_file_with_this_issuer(base_url: str) -> None:
    bank = Bank(config=SandboxConfig(base_url=base_url), clients=ClientRegistry({}), clock=ManualClock())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(bank)), base_url="http://testserver"
    ) as http:
        r = await http.get("/openapi.json")
    assert r.status_code == 200
    assert r.content == dumps(build_document(base_url))
    served = loads(r.content)
    assert served["servers"] == [{"url": base_url.rstrip("/")}]
    # Everything else is the file as shipped.
    shipped = loads((ROOT / "sandbox" / DOCUMENT_FILE).read_bytes())
    assert {k: v for k, v in served.items() if k != "servers"} == {k: v for k, v in shipped.items() if k != "servers"}


def test_key_facts_of_the_document() -> None:
    document = build_document("http://127.0.0.1:8700")
    assert document["openapi"] == "3.1.0"
    operations = {op["operationId"] for item in document["paths"].values() for op in item.values()}
    assert operations == {
        "discovery", "message-signature", "token", "par", "authorization-url", "consent-page", "consent-decision",
        "file-payment-consents.create", "file-payment-consents.get", "file-payment-consents.upload",
        "file-payments.create", "file-payments.get", "file-payments.report",
        "domestic-vrp-consents.create", "domestic-vrp-consents.get", "domestic-vrps.create", "domestic-vrps.get",
        "openapi",
    }  # fmt: skip
    assert set(document["components"]["securitySchemes"]) == {"bearerAuth", "basicAuth"}
    assert {"FileConsentRequest", "VRPConsentRequest", "OAuthError", "OBError"} <= set(
        document["components"]["schemas"]
    )


def test_the_file_consent_example_carries_the_hash_of_its_payload() -> None:
    # The old generator computed FileHash when building the document; the data must still hold the true hash.
    initiation = valid_example(build_document("http://x"), f"{RS}/file-payment-consents")["Data"]["Initiation"]  # type: ignore[index]
    assert initiation["FileHash"] == payload_hash(initiation["SupplementaryData"])
    # Amounts are exact decimals, as the bank reads every body.
    assert initiation["ControlSum"] == Decimal("1750.5")
    amounts = [tx["transferInfo"]["transactionAmount"] for tx in initiation["SupplementaryData"]["data"]["transaction"]]
    assert sum(amounts) == initiation["ControlSum"]


def test_each_load_is_a_fresh_copy() -> None:
    first = build_document("http://a")
    first["paths"].clear()
    assert build_document("http://b")["paths"]


def test_the_data_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert DOCUMENT_FILE in config["tool"]["setuptools"]["package-data"]["sandbox"]
