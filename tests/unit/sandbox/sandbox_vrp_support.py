"""Builders shared by the sandbox VRP tests: bodies, a bank on a manual clock, tokens and headers."""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from manual_clock import ManualClock

from sandbox.app import create_app
from sandbox.clients import Client, ClientRegistry
from sandbox.config import SandboxConfig
from sandbox.consents import VRP_KIND, set_status
from sandbox.jsonutil import dumps
from sandbox.oauth.tokens import issue_access_token
from sandbox.state import Bank

BASE = "http://127.0.0.1:8700"
FINANCIAL_ID = "0015800001041RHAAY"
CONSENTS = "/open-banking/v3.1/pisp/domestic-vrp-consents"
PAYMENTS = "/open-banking/v3.1/pisp/domestic-vrps"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)  # a Monday

CREDITOR = {"SchemeName": "UK.OBIE.SortCodeAccountNumber", "Identification": "40400112345678", "Name": "Ana Savings"}


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    """A UTC instant."""
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def limit(amount: str, period: str, alignment: str, currency: str = "GBP") -> dict[str, str]:
    """One PeriodicLimits entry."""
    return {"Amount": amount, "Currency": currency, "PeriodType": period, "PeriodAlignment": alignment}


def consent_body(
    *limits: dict[str, str],
    maximum: str = "500.00",
    valid_from: str = "2026-01-01T00:00:00+00:00",
    valid_to: str = "2030-01-01T00:00:00+00:00",
    currency: str = "GBP",
) -> dict[str, Any]:
    """A valid B1 body (one monthly calendar limit unless limits are given)."""
    return {
        "Data": {
            "ControlParameters": {
                "PSUAuthenticationMethods": ["UK.OBIE.SCA"],
                "VRPType": ["UK.OBIE.VRPType.Sweeping"],
                "ValidFromDateTime": valid_from,
                "ValidToDateTime": valid_to,
                "MaximumIndividualAmount": {"Amount": maximum, "Currency": currency},
                "PeriodicLimits": list(limits) if limits else [limit("1000.00", "Month", "Calendar", currency)],
            },
            "Initiation": {"CreditorAccount": dict(CREDITOR)},
            "RemittanceInformation": {"Reference": "SWEEP-0001", "Unstructured": "VRP - CUOTAS - Acme Pay"},
        },
        "Risk": {},
    }


def payment_body(consent_id: str, amount: str, currency: str = "GBP", **instruction: Any) -> dict[str, Any]:
    """A valid B2 body for the default creditor."""
    body: dict[str, Any] = {
        "Data": {
            "ConsentId": consent_id,
            "Initiation": {"CreditorAccount": dict(CREDITOR)},
            "PSUAuthenticationMethod": "UK.OBIE.SCA",
            "VRPType": "UK.OBIE.VRPType.Sweeping",
            "Instruction": {
                "InstructionIdentification": "INSTR-1",
                "EndToEndIdentification": "E2E-1",
                "CreditorAccount": dict(CREDITOR),
                "InstructedAmount": {"Amount": amount, "Currency": currency},
                "RemittanceInformation": {"Unstructured": "VRP - CUOTAS - Acme Pay"},
            },
        },
        "Risk": {},
    }
    body["Data"]["Instruction"].update(instruction)
    return body


def mutate(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `body` with the dotted `path` set to `value` (`...` deletes it); `[i]` indexes a list."""
    out = copy.deepcopy(body)
    parts = path.replace("[", ".").replace("]", "").split(".")
    node: Any = out
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last: Any = int(parts[-1]) if isinstance(node, list) else parts[-1]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return out


def new_bank(start: datetime = T0, **config: Any) -> Bank:
    """A bank with two clients on a manual clock."""
    clients = {
        cid: Client(cid, f"{cid}-secret", ("https://app.example/cb",), f"{cid}-kid", "unused")
        for cid in ("client-a", "client-b")
    }
    return Bank(SandboxConfig(base_url=BASE, **config), ClientRegistry(clients), clock=ManualClock(start))


@dataclass
class Harness:
    """A bank, an in-process client, and helpers for tokens, headers and the common calls."""

    bank: Bank
    http: httpx.AsyncClient

    @property
    def clock(self) -> ManualClock:
        clock = self.bank.clock
        assert isinstance(clock, ManualClock)
        return clock

    def cc_token(self, client_id: str = "client-a") -> str:
        return issue_access_token(self.bank, client_id, "client_credentials", "payments", None, 600).value

    def code_token(self, consent_id: str, client_id: str = "client-a") -> str:
        return issue_access_token(
            self.bank, client_id, "authorization_code", f"payments:{consent_id} openid", consent_id, 432000
        ).value

    def headers(self, token: str | None, **extra: str) -> dict[str, str]:
        out = {
            "x-fapi-interaction-id": str(uuid.uuid4()),
            "x-fapi-financial-id": FINANCIAL_ID,
            "x-fapi-customer-ip-address": "203.0.113.7",
            "Content-Type": "application/json",
        }
        if token is not None:
            out["Authorization"] = f"Bearer {token}"
        out.update(extra)
        return out

    async def post(self, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
        content = body if isinstance(body, bytes) else dumps(body)
        return await self.http.post(path, content=content, headers=headers)

    async def get(self, path: str, token: str | None = None, **extra: str) -> httpx.Response:
        headers = self.headers(token if token is not None else self.cc_token(), **extra)
        headers.pop("Content-Type")
        return await self.http.get(path, headers=headers)

    async def create_consent(self, body: dict[str, Any] | None = None, client_id: str = "client-a") -> str:
        resp = await self.post(CONSENTS, body or consent_body(), self.headers(self.cc_token(client_id)))
        assert resp.status_code == 201, resp.text
        return str(resp.json()["Data"]["ConsentId"])

    def authorise(self, consent_id: str, status: str = "Authorised") -> None:
        """What the approver's decision on the consent page does."""
        set_status(self.bank, VRP_KIND, consent_id, status)

    async def authorised_consent(self, *limits: dict[str, str], client_id: str = "client-a", **kw: Any) -> str:
        consent_id = await self.create_consent(consent_body(*limits, **kw), client_id)
        self.authorise(consent_id)
        return consent_id

    async def pay(
        self,
        consent_id: str,
        amount: str,
        body: dict[str, Any] | None = None,
        client_id: str = "client-a",
        extra: dict[str, str] | None = None,
    ) -> httpx.Response:
        body = body if body is not None else payment_body(consent_id, amount)
        return await self.post(PAYMENTS, body, self.headers(self.code_token(consent_id, client_id), **(extra or {})))


@asynccontextmanager
async def harness(start: datetime = T0, **config: Any) -> AsyncIterator[Harness]:
    """A fresh bank and an ASGI client bound to it."""
    bank = new_bank(start, **config)
    transport = httpx.ASGITransport(app=create_app(bank))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        yield Harness(bank, http)


def error_of(resp: httpx.Response) -> tuple[int, str, str | None]:
    """(status, Code, Path of the first entry) of a resource error."""
    body = resp.json()
    assert set(body) == {"Code", "Message", "Errors"}, body
    return resp.status_code, body["Code"], body["Errors"][0].get("Path")
