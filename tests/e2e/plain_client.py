"""A deliberately plain httpx reading of the spec, used to drive the sandbox end to end.

It shares nothing with the processor's bank client or the sandbox: it is the spec as a newcomer would
follow it with curl, written once in Python so the walkthrough stays true. Only the consent page's form is pressed
with the project's one approver scraper (processor.devtools.approver), as every test and benchmark does.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import secrets
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import rfc8785

from processor.devtools.approver import decision_post

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
RS = "/open-banking/v3.1/pisp"


@dataclass
class PlainClient:
    """Credentials and addresses of one registered client."""

    http: httpx.Client
    base: str
    client_id: str
    client_secret: str
    kid: str
    key_pem: bytes
    redirect_uri: str
    financial_id: str = "0015800001041RHAAY"

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()

    def assertion(self) -> str:
        now = int(time.time())
        claims = {
            "iss": self.client_id,
            "sub": self.client_id,
            "aud": self.base,
            "iat": now,
            "exp": now + 60,
            "jti": str(uuid.uuid4()),
        }
        return jwt.encode(claims, self.key_pem, algorithm="PS256", headers={"kid": self.kid})

    def headers(self, token: str, fapi: bool = False, **extra: str) -> dict[str, str]:
        out = {
            "Authorization": f"Bearer {token}",
            "x-fapi-interaction-id": str(uuid.uuid4()),
            "Content-Type": "application/json",
            **extra,
        }
        if fapi:
            out["x-fapi-financial-id"] = self.financial_id
            out["x-fapi-customer-ip-address"] = "127.0.0.1"
        return out

    def discovery(self) -> dict[str, Any]:
        r = self.http.get(
            f"{self.base}/.well-known/openid-configuration",
            headers={"Authorization": self.basic(), "Content-Type": "application/x-www-form-urlencoded"},
        )
        r.raise_for_status()
        return dict(r.json())

    def client_credentials(self, token_endpoint: str, basic: bool) -> str:
        form = {"grand_type": "client_credentials", "scope": "payments openid"}
        headers = {}
        if basic:
            headers["Authorization"] = self.basic()
        else:
            form |= {"client_assertion_type": ASSERTION_TYPE, "client_assertion": self.assertion()}
        r = self.http.post(token_endpoint, data=form, headers=headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["token_type"] == "Bearer" and body["expires_in"] == 600 and body["scope"] == "payments"
        return str(body["access_token"])

    def start_authorization(self, discovery: dict[str, Any], consent_id: str, basic: bool) -> tuple[str, str, str]:
        """PAR then the authorization URL; returns (url, PKCE verifier, state)."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        state = secrets.token_urlsafe(24)
        form = {
            "client_id": self.client_id,
            "redirect_uri": self.redirect_uri,
            "scope": f"payments:{consent_id} openid",
            "response_type": "code",
            "state": state,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": self.assertion(),
        }
        r = self.http.post(
            discovery["pushed_authorization_request_endpoint"],
            data=form,
            headers={"Authorization": self.basic()} if basic else {},
        )
        assert r.status_code in (200, 201), r.text
        par = r.json()
        assert par["request_uri"].startswith("urn:ietf:params:oauth:request_uri:")
        assert par["expires_in"] == 300
        r = self.http.get(
            f"{self.base}/o3/v1.0/par-auth-code-url/{consent_id}",
            params={"request_uri": par["request_uri"], "response_type": "code", "scope": "payments"},
            headers={"Authorization": self.basic()},
        )
        assert r.status_code == 200, r.text
        auth_url = r.text.strip().strip('"')
        assert urlsplit(auth_url).path.endswith("/auth")
        return auth_url, verifier, state

    def authorize(
        self, discovery: dict[str, Any], consent_id: str, basic: bool, approve: bool = True
    ) -> dict[str, str]:
        """The approver's decision on the consent page, posted as its form would; returns the redirect's query."""
        auth_url, verifier, state = self.start_authorization(discovery, consent_id, basic)
        page = self.http.get(auth_url)
        assert page.status_code == 200
        assert "text/html" in page.headers["content-type"]
        location = submit_decision(self.http, auth_url, page.text, "approve" if approve else "reject")
        query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        assert location.startswith(self.redirect_uri)
        assert query["state"] == state
        query["_verifier"] = verifier
        query["_page"] = page.text
        return query

    def exchange(self, token_endpoint: str, code: str, verifier: str, basic: bool) -> dict[str, Any]:
        form = {
            "grand_type": "authorization_code",
            "scope": "payments",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": verifier,
        }
        headers = {}
        if basic:
            headers["Authorization"] = self.basic()
        else:
            form |= {"client_assertion_type": ASSERTION_TYPE, "client_assertion": self.assertion()}
        r = self.http.post(token_endpoint, data=form, headers=headers)
        assert r.status_code == 200, r.text
        return dict(r.json())


def submit_decision(http: httpx.Client, page_url: str, html: str, button_id: str) -> str:
    """Submit the consent page's form the way a browser would; return the redirect's Location."""
    target, data = decision_post(page_url, html, button_id)
    r = http.post(target, data=data, follow_redirects=False)
    assert r.status_code in (302, 303), r.text
    return str(r.headers["location"])


def file_payload(origin: str, transfers: list[tuple[str, str]]) -> dict[str, Any]:
    """A spec file payload with empty references."""
    return {
        "data": {
            "transaction": [
                {
                    "originAccount": {"accountNumber": origin, "accountType": "MONETARY", "currency": "GTQ"},
                    "destinationAccount": {
                        "accountNumber": account,
                        "accountType": "SAVINGS",
                        "currency": "GTQ",
                        "email": f"employee{i}@example.com",
                    },
                    "transferInfo": {
                        "transactionType": "THIRD_PROVIDER",
                        "debitType": "D",
                        "transactionAmount": Decimal(amount),
                        "executionType": "ONLINE",
                        "concept": f"Payroll November {i}",
                        "reference": "",
                    },
                }
                for i, (account, amount) in enumerate(transfers)
            ]
        }
    }


def with_references(payload: dict[str, Any], consent_id: str) -> dict[str, Any]:
    """A copy of the payload with every transfer reference set to the consent id (the upload body)."""
    upload = copy.deepcopy(payload)
    for tx in upload["data"]["transaction"]:
        tx["transferInfo"]["reference"] = consent_id
    return upload


def to_json(value: Any) -> str:
    """JSON text; amounts (at most 2 decimals) are written through float, which prints them exactly."""
    return json.dumps(value, default=float)


def file_hash(payload: dict[str, Any]) -> str:
    """base64(SHA-256(JCS(payload))) with the amounts as JSON numbers."""
    as_floats = json.loads(to_json(payload))
    return base64.b64encode(hashlib.sha256(rfc8785.dumps(as_floats)).digest()).decode()
