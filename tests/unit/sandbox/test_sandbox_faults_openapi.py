"""The OpenAPI document: valid, complete against the app's routes, and true to what the sandbox answers."""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any

import httpx
import jsonschema  # type: ignore[import-untyped]
import pytest
from manual_clock import ManualClock
from paths import ROOT
from sandbox_process import file_consent_example, vrp_consent_example
from starlette.routing import Route

from sandbox.app import create_app
from sandbox.clients import Client, ClientRegistry
from sandbox.config import SandboxConfig
from sandbox.jsonutil import dumps
from sandbox.oauth.tokens import issue_access_token
from sandbox.openapi import build_document
from sandbox.state import Bank

BASE = "http://127.0.0.1:8711"
FINANCIAL_ID = "0015800001041RHAAY"
DOCS = ROOT / "docs" / "sandbox-faults.md"


def make_bank(admin: bool = False) -> Bank:
    client = Client("c1", "s1", ("http://127.0.0.1:9/cb",), "kid-1", "unused")
    return Bank(
        config=SandboxConfig(base_url=BASE, admin=admin), clients=ClientRegistry({"c1": client}), clock=ManualClock()
    )


def operations(document: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """operationId -> (METHOD, path)."""
    out: dict[str, tuple[str, str]] = {}
    for path, item in document["paths"].items():
        for method, op in item.items():
            out[op["operationId"]] = (method.upper(), path)
    return out


def validator(document: dict[str, Any], schema_name: str) -> jsonschema.Draft202012Validator:
    """A validator for one component schema, its `$ref`s resolved within the document."""
    root = {"$ref": f"#/components/schemas/{schema_name}", "components": document["components"]}
    return jsonschema.Draft202012Validator(root, format_checker=jsonschema.FormatChecker())


def test_the_document_is_valid_openapi_3_1() -> None:
    spec_validator = pytest.importorskip("openapi_spec_validator")
    document = build_document(BASE)
    assert document["openapi"].startswith("3.1")
    spec_validator.validate(document)


def test_every_route_is_documented_with_its_method_path_and_name() -> None:
    app = create_app(make_bank(admin=True))
    routes = {
        route.name: (sorted(route.methods - {"HEAD"}), route.path)
        for route in app.routes
        if isinstance(route, Route) and route.methods and not route.name.startswith("admin.")
    }
    documented = operations(build_document(BASE))
    assert set(routes) == set(documented)
    for name, (methods, path) in routes.items():
        assert methods == [documented[name][0]], name
        assert path == documented[name][1], name


def test_operation_names_in_the_faults_guide_match_the_document() -> None:
    table = DOCS.read_text().split("## Operation names", 1)[1].split("\n## ", 1)[0]
    names = set(re.findall(r"^\| `([a-z.-]+)` \|", table, flags=re.MULTILINE))
    assert names == set(operations(build_document(BASE)))


def test_every_operation_documents_the_injected_faults() -> None:
    for path, item in build_document(BASE)["paths"].items():
        for method, op in item.items():
            assert {"429", "5XX"} <= set(op["responses"]), (method, path)


def test_resource_operations_require_the_spec_headers() -> None:
    document = build_document(BASE)
    params = document["components"]["parameters"]

    def headers(path: str, method: str) -> set[str]:
        refs = document["paths"][path][method].get("parameters", [])
        resolved = [params[p["$ref"].rsplit("/", 1)[1]] if "$ref" in p else p for p in refs]
        return {p["name"] for p in resolved if p["in"] == "header" and p["required"]}

    rs = "/open-banking/v3.1/pisp"
    fapi = {"x-fapi-interaction-id", "x-fapi-financial-id", "x-fapi-customer-ip-address"}
    assert headers(f"{rs}/file-payment-consents", "post") == {"x-fapi-interaction-id"}
    assert headers(f"{rs}/file-payment-consents/{{consent_id}}", "get") == fapi
    assert headers(f"{rs}/file-payments", "post") == fapi
    assert headers(f"{rs}/domestic-vrp-consents", "post") == fapi
    assert headers(f"{rs}/domestic-vrps", "post") == fapi
    assert document["paths"]["/o3/v1.0/message-signature"]["get"]["requestBody"]["required"] is True
    token_body = document["paths"]["/token"]["post"]["requestBody"]["content"]
    assert list(token_body) == ["application/x-www-form-urlencoded"]


async def test_served_document_names_the_banks_base_address() -> None:
    app = create_app(make_bank())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        r = await http.get("/openapi.json")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["servers"] == [{"url": BASE}]
    assert r.json()["paths"].keys() == build_document(BASE)["paths"].keys()


async def test_examples_are_accepted_and_answers_match_the_schemas() -> None:
    bank = make_bank()
    token = issue_access_token(bank, "c1", "client_credentials", "payments", None, 600).value
    document = json.loads(dumps(build_document(BASE)))
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "x-fapi-interaction-id": str(uuid.uuid4()),
        "x-fapi-financial-id": FINANCIAL_ID,
        "x-fapi-customer-ip-address": "198.51.100.4",
    }
    rs = "/open-banking/v3.1/pisp"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(bank)), base_url=BASE) as http:
        consent = await http.post(
            f"{rs}/file-payment-consents",
            content=dumps(file_consent_example()),
            headers=headers,
        )
        assert consent.status_code == 201, consent.text
        validator(document, "FileConsentRequest").validate(json.loads(dumps(file_consent_example())))
        validator(document, "FileConsentResponse").validate(consent.json())

        consent_id = consent.json()["Data"]["ConsentId"]
        read = await http.get(f"{rs}/file-payment-consents/{consent_id}", headers=headers)
        validator(document, "FileConsentResponse").validate(read.json())

        vrp = await http.post(
            f"{rs}/domestic-vrp-consents",
            content=dumps(vrp_consent_example()),
            headers=headers,
        )
        assert vrp.status_code == 201, vrp.text
        validator(document, "VRPConsentRequest").validate(vrp_consent_example())
        validator(document, "VRPConsentResponse").validate(vrp.json())

        missing = await http.get(f"{rs}/file-payment-consents/{consent_id}", headers={})
        assert missing.status_code == 401
        validator(document, "OBError").validate(missing.json())

        basic = base64.b64encode(b"c1:s1").decode()
        cc = await http.post(
            "/token",
            data={"grand_type": "client_credentials", "scope": "payments openid"},
            headers={"Authorization": f"Basic {basic}"},
        )
        assert cc.status_code == 200, cc.text
        validator(document, "TokenResponse").validate(cc.json())
        bad = await http.post("/token", data={"grand_type": "client_credentials"})
        assert bad.status_code == 400
        validator(document, "OAuthError").validate(bad.json())

        discovery = await http.get("/.well-known/openid-configuration", headers={"Authorization": f"Basic {basic}"})
        validator(document, "DiscoveryDocument").validate(discovery.json())


def test_schemas_refuse_what_the_sandbox_refuses() -> None:
    document = json.loads(dumps(build_document(BASE)))
    body = json.loads(dumps(file_consent_example()))
    body["Data"]["Initiation"]["Extra"] = 1
    assert not validator(document, "FileConsentRequest").is_valid(body)
    vrp = vrp_consent_example()
    vrp["Data"]["ControlParameters"]["MaximumIndividualAmount"]["Amount"] = "10.123"
    assert not validator(document, "VRPConsentRequest").is_valid(vrp)
