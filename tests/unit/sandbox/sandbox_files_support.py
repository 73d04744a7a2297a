"""Builders shared by the sandbox file-payment tests: payloads, a bank on a manual clock, tokens, headers."""

from __future__ import annotations

import base64
import copy
import hashlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import rfc8785
from manual_clock import ManualClock

from sandbox.app import create_app
from sandbox.clients import Client, ClientRegistry
from sandbox.config import SandboxConfig
from sandbox.consents import FILE_KIND, set_status
from sandbox.jsonutil import dumps, loads
from sandbox.oauth.tokens import issue_access_token
from sandbox.state import Bank

BASE = "http://127.0.0.1:8700"
FINANCIAL_ID = "0015800001041RHAAY"
CONSENTS = "/open-banking/v3.1/pisp/file-payment-consents"
PAYMENTS = "/open-banking/v3.1/pisp/file-payments"


def transaction(
    dest: str = "200100300",
    amount: str | int = "1500.50",
    *,
    origin: str = "100200300",
    currency: str = "GTQ",
    email: str = "ana@example.com",
    concept: str = "Payroll November",
    reference: str = "",
) -> dict[str, Any]:
    """One file record, amount as Decimal (or int) exactly as the bank parses it."""
    value: Decimal | int = Decimal(amount) if isinstance(amount, str) else amount
    return {
        "originAccount": {"accountNumber": origin, "accountType": "MONETARY", "currency": currency},
        "destinationAccount": {"accountNumber": dest, "accountType": "SAVINGS", "currency": currency, "email": email},
        "transferInfo": {
            "transactionType": "THIRD_PROVIDER",
            "debitType": "D",
            "transactionAmount": value,
            "executionType": "ONLINE",
            "concept": concept,
            "reference": reference,
        },
    }


def payload(*records: dict[str, Any]) -> dict[str, Any]:
    """A file payload; three records by default."""
    if not records:
        records = (
            transaction("200100300", "1500.50"),
            transaction("200100301", "2000.00", email="luis@example.com"),
            transaction("200100302", 750, email="eva@example.com"),
        )
    return {"data": {"transaction": list(records)}}


def oracle_hash(file_payload: dict[str, Any]) -> str:
    """FileHash computed with the `rfc8785` package (amounts go through float, exact for 2-decimal money)."""

    def floats(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: floats(v) for k, v in value.items()}
        if isinstance(value, list):
            return [floats(v) for v in value]
        if isinstance(value, Decimal):
            return float(value)
        return value

    return base64.b64encode(hashlib.sha256(rfc8785.dumps(floats(file_payload))).digest()).decode()


def initiation(file_payload: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """A consistent Data.Initiation for the payload (hash from the independent oracle)."""
    file_payload = file_payload if file_payload is not None else payload()
    txs = file_payload["data"]["transaction"]
    total = sum((Decimal(tx["transferInfo"]["transactionAmount"]) for tx in txs), Decimal(0))
    init: dict[str, Any] = {
        "SupplementaryData": file_payload,
        "FileType": "UK.OBIE.PaymentInitiation.4.0",
        "FileHash": oracle_hash(file_payload),
        "FileReference": "PAYROLL-2026-11",
        "NumberOfTransactions": str(len(txs)),
        "ControlSum": total,
    }
    init.update(overrides)
    return init


def with_references(file_payload: dict[str, Any], consent_id: str) -> dict[str, Any]:
    """The upload body: every reference set to the consent id."""
    out = copy.deepcopy(file_payload)
    for tx in out["data"]["transaction"]:
        tx["transferInfo"]["reference"] = consent_id
    return out


def new_bank(**config: Any) -> Bank:
    """A bank with two clients on a manual clock."""
    clients = {
        cid: Client(cid, f"{cid}-secret", ("https://app.example/cb",), f"{cid}-kid", "unused")
        for cid in ("client-a", "client-b")
    }
    return Bank(SandboxConfig(base_url=BASE, **config), ClientRegistry(clients), clock=ManualClock())


@dataclass
class Harness:
    """A bank, an in-process client, and token helpers."""

    bank: Bank
    http: httpx.AsyncClient

    @property
    def clock(self) -> ManualClock:
        clock = self.bank.clock
        assert isinstance(clock, ManualClock)
        return clock

    def cc_token(self, client_id: str = "client-a", scope: str = "payments") -> str:
        return issue_access_token(self.bank, client_id, "client_credentials", scope, None, 600).value

    def code_token(self, consent_id: str, client_id: str = "client-a") -> str:
        return issue_access_token(
            self.bank, client_id, "authorization_code", f"payments:{consent_id} openid", consent_id, 432000
        ).value

    def headers(self, token: str | None, *, fapi: bool = False, extra: dict[str, str] | None = None) -> dict[str, str]:
        out = {"x-fapi-interaction-id": str(uuid.uuid4()), "Content-Type": "application/json"}
        if token is not None:
            out["Authorization"] = f"Bearer {token}"
        if fapi:
            out["x-fapi-financial-id"] = FINANCIAL_ID
            out["x-fapi-customer-ip-address"] = "203.0.113.7"
        out.update(extra or {})
        return out

    async def post(self, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
        content = body if isinstance(body, bytes) else dumps(body)
        return await self.http.post(path, content=content, headers=headers)

    async def create_consent(self, init: dict[str, Any] | None = None, client_id: str = "client-a") -> str:
        resp = await self.post(
            CONSENTS, {"Data": {"Initiation": init or initiation()}}, self.headers(self.cc_token(client_id))
        )
        assert resp.status_code == 201, resp.text
        return str(resp.json()["Data"]["ConsentId"])

    async def upload(self, consent_id: str, body: Any, client_id: str = "client-a", **extra: str) -> httpx.Response:
        return await self.post(
            f"{CONSENTS}/{consent_id}/file", body, self.headers(self.cc_token(client_id), extra=extra)
        )

    def authorise(self, consent_id: str) -> None:
        """What the approver's decision does."""
        set_status(self.bank, FILE_KIND, consent_id, "Authorised")

    async def authorised_consent(self, init: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        init = init or initiation()
        consent_id = await self.create_consent(init)
        resp = await self.upload(consent_id, with_references(init["SupplementaryData"], consent_id))
        assert resp.status_code == 201, resp.text
        self.authorise(consent_id)
        return consent_id, init

    async def pay(self, consent_id: str, init: dict[str, Any], **extra: str) -> httpx.Response:
        body = {"Data": {"ConsentId": consent_id, "Initiation": init}}
        return await self.post(PAYMENTS, body, self.headers(self.code_token(consent_id), fapi=True, extra=extra))

    async def get(self, path: str, token: str | None = None, *, fapi: bool = False) -> httpx.Response:
        token = token if token is not None else self.cc_token()
        headers = self.headers(token, fapi=fapi)
        headers.pop("Content-Type")
        return await self.http.get(path, headers=headers)


def decimal_json(resp: httpx.Response) -> Any:
    """A response body parsed with exact decimals."""
    return loads(resp.content)


@asynccontextmanager
async def harness(**config: Any) -> AsyncIterator[Harness]:
    """A fresh bank and an ASGI client bound to it."""
    bank = new_bank(**config)
    transport = httpx.ASGITransport(app=create_app(bank))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        yield Harness(bank, http)
