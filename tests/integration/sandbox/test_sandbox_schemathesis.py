"""Schemathesis against the sandbox, driven by the sandbox's own OpenAPI document (in-process ASGI).

Every operation of the document gets generated requests (schema-valid and invalid ones, the document's
explicit examples, and schemathesis' coverage cases). To get past authentication into the body checks,
requests carry a valid credential (Basic for the authorization server, a Bearer token of the right grant
for resources) and the bank's FAPI headers; half of the calls on a path with an id use a resource that
really exists (a consent, a file payment, a domestic VRP created up front), so reads return 200 and
payment creation reaches its comparison with the consent.

Checks: no 5xx (`not_a_server_error`), and status codes, content types and bodies conform to the
document. Examples per operation are bounded (MAX_EXAMPLES) so the run stays well under two minutes.
The `openapi` operation itself is skipped by schemathesis (it is the schema's own address).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import uuid
from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import HealthCheck, settings
from manual_clock import ManualClock
from sandbox_process import file_consent_example, vrp_consent_example
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from sandbox.app import create_app
from sandbox.clients import Client, ClientRegistry
from sandbox.config import SandboxConfig
from sandbox.consents import FILE_KIND, VRP_KIND, set_status
from sandbox.jsonutil import dumps, loads
from sandbox.oauth.tokens import issue_access_token
from sandbox.state import Bank

BASE_URL = "http://127.0.0.1:8700"
FINANCIAL_ID = "0015800001041RHAAY"
CLIENT_ID = "schemathesis-client"
CLIENT_SECRET = "schemathesis-secret"
RS = "/open-banking/v3.1/pisp"
MAX_EXAMPLES = 60
LONG = 10**8  # token lifetime: the run never sees a token expire

BASIC_OPERATIONS = {"discovery", "authorization-url", "token", "par"}
NO_AUTH_OPERATIONS = {"message-signature", "consent-page", "consent-decision", "openapi"}


def _public_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return public.decode()


def _bank() -> Bank:
    client = Client(
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        redirect_uris=("http://127.0.0.1:9/callback",),
        kid="schemathesis-kid",
        public_key_pem=_public_key_pem(),
    )
    config = SandboxConfig(base_url=BASE_URL, financial_id=FINANCIAL_ID)
    return Bank(config=config, clients=ClientRegistry({CLIENT_ID: client}), clock=ManualClock())


def _resource_headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "x-fapi-interaction-id": str(uuid.uuid4()),
        "x-fapi-financial-id": FINANCIAL_ID,
        "x-fapi-customer-ip-address": "203.0.113.7",
    }


class World:
    """The resources created up front, through the app, and the tokens to use them."""

    def __init__(self, bank: Bank) -> None:
        self.cc_token = issue_access_token(bank, CLIENT_ID, "client_credentials", "payments", None, LONG).value
        self.turn = itertools.count()
        asyncio.run(self._create(bank))

    async def _create(self, bank: Bank) -> None:
        transport = httpx.ASGITransport(app=create_app(bank))
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:

            async def post(path: str, body: dict[str, Any], token: str) -> dict[str, Any]:
                headers = {**_resource_headers(token), "Content-Type": "application/json"}
                r = await http.post(path, content=dumps(body), headers=headers)
                assert r.status_code == 201, r.text
                return dict(loads(r.content)["Data"])

            # A file consent left in AwaitingUpload (for uploads), and one authorised and paid.
            consents = f"{RS}/file-payment-consents"
            self.upload_consent = (await post(consents, file_consent_example(), self.cc_token))["ConsentId"]
            paid = await post(consents, file_consent_example(), self.cc_token)
            self.file_consent = paid["ConsentId"]
            set_status(bank, FILE_KIND, self.file_consent, "Authorised")
            self.file_token = self._code_token(bank, self.file_consent)
            payment_body = {"Data": {"ConsentId": self.file_consent, "Initiation": paid["Initiation"]}}
            payment = await post(f"{RS}/file-payments", payment_body, self.file_token)
            self.file_payment = payment["FilePaymentId"]
            # A second authorised file consent, still unpaid, for generated payment requests.
            self.spare_file_consent = (await post(consents, file_consent_example(), self.cc_token))["ConsentId"]
            set_status(bank, FILE_KIND, self.spare_file_consent, "Authorised")
            self.spare_file_token = self._code_token(bank, self.spare_file_consent)
            # An authorised VRP consent with one payment.
            vrp = await post(
                f"{RS}/domestic-vrp-consents",
                vrp_consent_example(),
                self.cc_token,
            )
            self.vrp_consent = vrp["ConsentId"]
            set_status(bank, VRP_KIND, self.vrp_consent, "Authorised")
            self.vrp_token = self._code_token(bank, self.vrp_consent)
            vrp_payment = {
                "Data": {
                    "ConsentId": self.vrp_consent,
                    "Initiation": vrp["Initiation"],
                    "PSUAuthenticationMethod": "UK.OBIE.SCA",
                    "VRPType": "UK.OBIE.VRPType.Sweeping",
                    "Instruction": {
                        "InstructionIdentification": "INSTR-1",
                        "EndToEndIdentification": "E2E-1",
                        "CreditorAccount": vrp["Initiation"]["CreditorAccount"],
                        "InstructedAmount": {"Amount": "10.00", "Currency": "GBP"},
                    },
                },
                "Risk": {},
            }
            self.domestic_vrp = (await post(f"{RS}/domestic-vrps", vrp_payment, self.vrp_token))["DomesticVRPId"]

    @staticmethod
    def _code_token(bank: Bank, consent_id: str) -> str:
        scope = f"payments:{consent_id} openid"
        return issue_access_token(bank, CLIENT_ID, "authorization_code", scope, consent_id, LONG).value

    def prepare(self, case: Any, operation_id: str) -> dict[str, str]:
        """Point half of the cases at real resources; return the credential headers for the call."""
        real = next(self.turn) % 2 == 0
        params = case.path_parameters if case.path_parameters is not None else {}
        ids = {
            "file-payment-consents.upload": ("consent_id", self.upload_consent),
            "file-payment-consents.get": ("consent_id", self.file_consent),
            "file-payments.get": ("file_payment_id", self.file_payment),
            "file-payments.report": ("file_payment_id", self.file_payment),
            "domestic-vrp-consents.get": ("consent_id", self.vrp_consent),
            "domestic-vrps.get": ("domestic_vrp_id", self.domestic_vrp),
        }
        if real and operation_id in ids and params:
            name, value = ids[operation_id]
            params[name] = value
        # Payment creation: the token names one consent; let the body name it too, half of the time.
        consents = {
            "file-payments.create": (self.spare_file_consent, self.spare_file_token),
            "domestic-vrps.create": (self.vrp_consent, self.vrp_token),
        }
        if operation_id in consents:
            consent_id, token = consents[operation_id]
            body = case.body
            if real and isinstance(body, dict) and isinstance(body.get("Data"), dict):
                body["Data"]["ConsentId"] = consent_id
            return _credentials(token)
        if operation_id in NO_AUTH_OPERATIONS:
            return {}
        if operation_id in BASIC_OPERATIONS:
            basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
            return {"Authorization": f"Basic {basic}"}
        return _credentials(self.cc_token)


def _credentials(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "x-fapi-financial-id": FINANCIAL_ID,
        "x-fapi-customer-ip-address": "203.0.113.7",
    }


BANK = _bank()
WORLD = World(BANK)
SEEN: dict[str, Counter[int]] = {}
# Built at import: schemathesis' lazy fixture loader does not work with this pytest version.
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(BANK))


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_errors_and_responses_match_the_document(case: Any) -> None:
    """No generated request makes the sandbox fail, and every answer is the documented one."""
    operation_id = str(case.operation.definition.raw.get("operationId", ""))
    headers = WORLD.prepare(case, operation_id)
    response = case.call_and_validate(
        headers=headers,
        checks=[not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance],
    )
    SEEN.setdefault(operation_id, Counter())[response.status_code] += 1


def test_the_run_reached_every_operation_and_real_successes() -> None:
    """Guards the harness: credentials and real ids did get requests past the first checks."""
    if not SEEN:
        pytest.skip("runs after the generated tests of this module")
    documented = {
        op["operationId"]
        for item in schema.raw_schema["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "operationId" in op
    }
    assert documented - set(SEEN) <= {"openapi"}, f"never exercised: {sorted(documented - set(SEEN) - {'openapi'})}"
    for operation_id in (
        "discovery",
        "token",
        "file-payment-consents.create",
        "file-payment-consents.get",
        "file-payments.get",
        "file-payments.report",
        "domestic-vrp-consents.create",
        "domestic-vrp-consents.get",
        "domestic-vrps.get",
    ):
        assert any(200 <= status < 300 for status in SEEN[operation_id]), (operation_id, SEEN[operation_id])
