"""Every resource operation against every header and token rule of the spec, in one matrix.

The per-flow suites test each rule where it matters most; this one proves no operation was left out: for all
ten resource operations (A1-A5, the report file, B1-B3, the VRP read) a missing, unknown, wrong-grant or
expired token, a missing or malformed interaction id, a missing FAPI header where the spec lists it, another
client's token and an unknown id each get the spec's resource error with `Path` naming the offending header,
the interaction id is echoed, and a refused call creates nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sandbox_files_support import Harness, harness, initiation, with_references
from sandbox_vrp_support import consent_body, payment_body

from sandbox.consents import FILE_KIND, VRP_KIND, set_status
from sandbox.jsonutil import dumps
from sandbox.oauth.tokens import issue_access_token

PISP = "/open-banking/v3.1/pisp"
FINANCIAL_ID = "0015800001041RHAAY"
KINDS = (FILE_KIND, VRP_KIND, "file_payment", "domestic_vrp", "idempotency")


@dataclass(frozen=True)
class Op:
    """A resource operation: spec name, method, path (with `{...}` ids), grant, and whether FAPI headers apply."""

    name: str
    method: str
    path: str
    grant: str  # "cc" | "code"
    fapi: bool  # the spec lists x-fapi-financial-id and x-fapi-customer-ip-address
    id_field: str | None = None  # the path id, for the unknown-id and other-client checks


OPS = [
    Op("A1", "POST", f"{PISP}/file-payment-consents", "cc", False),
    Op("A2", "POST", f"{PISP}/file-payment-consents/{{upload_consent}}/file", "cc", False, "upload_consent"),
    Op("A3", "POST", f"{PISP}/file-payments", "code", True),
    Op("A4", "GET", f"{PISP}/file-payments/{{file_payment}}", "cc", False, "file_payment"),
    Op("A5", "GET", f"{PISP}/file-payment-consents/{{file_consent}}", "cc", True, "file_consent"),
    Op("report", "GET", f"{PISP}/file-payments/{{file_payment}}/report-file", "cc", False, "file_payment"),
    Op("B1", "POST", f"{PISP}/domestic-vrp-consents", "cc", True),
    Op("B2", "POST", f"{PISP}/domestic-vrps", "code", True),
    Op("B3", "GET", f"{PISP}/domestic-vrp-consents/{{vrp_consent}}", "cc", True, "vrp_consent"),
    Op("VRP read", "GET", f"{PISP}/domestic-vrps/{{vrp_payment}}", "cc", True, "vrp_payment"),
]
UNKNOWN = {
    "upload_consent": "pay-fi-00000000-0000-4000-8000-000000000000",
    "file_consent": "pay-fi-00000000-0000-4000-8000-000000000000",
    "file_payment": "fp-00000000000000000000000000000000",
    "vrp_consent": "vrp-00000000-0000-4000-8000-000000000000",
    "vrp_payment": "obvrp-00000000000000000000000000000000",
}


@dataclass
class World:
    h: Harness
    ids: dict[str, str]
    bodies: dict[str, Any]
    code_consent: dict[str, str]  # op name -> the consent its auth-code token must name

    def path(self, op: Op, **override: str) -> str:
        return op.path.format(**{**self.ids, **override})

    def token(self, op: Op, client_id: str = "client-a", ttl: int | None = None) -> str:
        if op.grant == "cc":
            return issue_access_token(self.h.bank, client_id, "client_credentials", "payments", None, ttl or 600).value
        consent_id = self.code_consent[op.name]
        return issue_access_token(
            self.h.bank,
            client_id,
            "authorization_code",
            f"payments:{consent_id} openid",
            consent_id,
            ttl or 432000,
        ).value

    def wrong_grant_token(self, op: Op) -> str:
        if op.grant == "code":  # a client-credentials token cannot create payments
            return issue_access_token(self.h.bank, "client-a", "client_credentials", "payments", None, 600).value
        consent_id = self.ids["vrp_consent"]
        return issue_access_token(
            self.h.bank, "client-a", "authorization_code", f"payments:{consent_id} openid", consent_id, 432000
        ).value

    def headers(
        self, op: Op, token: str | None, *, drop: tuple[str, ...] = (), extra: dict[str, str] | None = None
    ) -> dict[str, str]:
        out = {"x-fapi-interaction-id": str(uuid.uuid4())}
        if op.method == "POST":
            out["Content-Type"] = "application/json"
        if token is not None:
            out["Authorization"] = f"Bearer {token}"
        if op.fapi:
            out["x-fapi-financial-id"] = FINANCIAL_ID
            out["x-fapi-customer-ip-address"] = "203.0.113.7"
        out.update(extra or {})
        for name in drop:
            out.pop(name, None)
        return out

    async def call(self, op: Op, headers: dict[str, str], path: str | None = None) -> httpx.Response:
        content = dumps(self.bodies[op.name]) if op.method == "POST" else None
        return await self.h.http.request(op.method, path or self.path(op), content=content, headers=headers)

    def counts(self) -> dict[str, int]:
        return {kind: self.h.bank.store.count(kind) for kind in KINDS}


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with harness(file_payment_delay=0, vrp_delay=0) as h:
        # Flow A: a paid consent (A4, A5, report), one awaiting upload (A2), one authorised and unpaid (A3).
        paid_id, paid_init = await h.authorised_consent()
        resp = await h.pay(paid_id, paid_init)
        assert resp.status_code == 201, resp.text
        file_payment = resp.json()["Data"]["FilePaymentId"]
        upload_init = initiation(FileReference="UPLOAD")
        upload_consent = await h.create_consent(upload_init)
        unpaid_id, unpaid_init = await h.authorised_consent(initiation(FileReference="UNPAID"))
        # Flow B: an authorised VRP consent with one payment.
        cc = h.cc_token()
        vrp_headers = h.headers(cc, fapi=True)
        resp = await h.post(f"{PISP}/domestic-vrp-consents", consent_body(), vrp_headers)
        assert resp.status_code == 201, resp.text
        vrp_consent = resp.json()["Data"]["ConsentId"]
        set_status(h.bank, VRP_KIND, vrp_consent, "Authorised")
        code = h.code_token(vrp_consent)
        resp = await h.post(f"{PISP}/domestic-vrps", payment_body(vrp_consent, "1.00"), h.headers(code, fapi=True))
        assert resp.status_code == 201, resp.text
        vrp_payment = resp.json()["Data"]["DomesticVRPId"]
        yield World(
            h,
            ids={
                "upload_consent": upload_consent,
                "file_consent": paid_id,
                "file_payment": file_payment,
                "vrp_consent": vrp_consent,
                "vrp_payment": vrp_payment,
            },
            bodies={
                "A1": {"Data": {"Initiation": initiation(FileReference="NEW")}},
                "A2": with_references(upload_init["SupplementaryData"], upload_consent),
                "A3": {"Data": {"ConsentId": unpaid_id, "Initiation": unpaid_init}},
                "B1": consent_body(),
                "B2": payment_body(vrp_consent, "2.00"),
            },
            code_consent={"A3": unpaid_id, "B2": vrp_consent},
        )


def assert_error(resp: httpx.Response, status: int, code: str, message_start: str, path: str | None) -> None:
    """The resource error shape, exactly as the spec shows it."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"Code", "Message", "Errors"}, body
    assert body["Code"] == code, body
    assert isinstance(body["Message"], str) and body["Message"].startswith(message_start), body
    assert isinstance(body["Errors"], list) and len(body["Errors"]) >= 1
    first = body["Errors"][0]
    assert set(first) <= {"ErrorCode", "Message", "Path"} and first["ErrorCode"] == code
    assert first["Message"].startswith(message_start), body
    if path is not None:
        assert first["Path"] == path, body


by_name = pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])


@by_name
async def test_the_valid_call_succeeds_and_echoes_the_interaction_id(world: World, op: Op) -> None:
    headers = world.headers(op, world.token(op))
    resp = await world.call(op, headers)
    assert resp.status_code == (201 if op.method == "POST" else 200), resp.text
    assert resp.headers["x-fapi-interaction-id"] == headers["x-fapi-interaction-id"]


@by_name
async def test_missing_authorization(world: World, op: Op) -> None:
    before = world.counts()
    headers = world.headers(op, None)
    resp = await world.call(op, headers)
    assert_error(resp, 401, "UK.OBIE.Header.Missing", "missing_authorization_header", "Authorization")
    assert resp.headers["x-fapi-interaction-id"] == headers["x-fapi-interaction-id"]
    assert world.counts() == before


@by_name
@pytest.mark.parametrize("value", ["Bearer not-a-token", "Basic Zm9vOmJhcg==", "Bearer", "bearer  "])
async def test_invalid_token(world: World, op: Op, value: str) -> None:
    before = world.counts()
    headers = world.headers(op, None, extra={"Authorization": value})
    resp = await world.call(op, headers)
    if value.strip().lower() == "bearer":
        # An empty Bearer is as good as no token: either spec row is acceptable, but always on Authorization.
        assert resp.status_code == 401 and resp.json()["Errors"][0]["Path"] == "Authorization"
    else:
        assert_error(resp, 401, "UK.OBIE.Header.Invalid", "no_access_token", "Authorization")
    assert world.counts() == before


@by_name
async def test_token_of_the_wrong_grant(world: World, op: Op) -> None:
    before = world.counts()
    resp = await world.call(op, world.headers(op, world.wrong_grant_token(op)))
    assert_error(resp, 401, "UK.OBIE.Header.Invalid", "no_access_token", "Authorization")
    assert world.counts() == before


@by_name
async def test_token_without_the_payments_scope(world: World, op: Op) -> None:
    if op.grant == "code":
        token = issue_access_token(world.h.bank, "client-a", "authorization_code", "openid", None, 600).value
    else:
        token = issue_access_token(world.h.bank, "client-a", "client_credentials", "openid", None, 600).value
    before = world.counts()
    resp = await world.call(op, world.headers(op, token))
    assert_error(resp, 401, "UK.OBIE.Header.Invalid", "no_access_token", "Authorization")
    assert world.counts() == before


@by_name
async def test_expired_token(world: World, op: Op) -> None:
    token = world.token(op, ttl=5)
    world.h.clock.advance(5)
    before = world.counts()
    resp = await world.call(op, world.headers(op, token))
    assert_error(resp, 403, "UK.OBIE.Header.Invalid", "token_expired", "Authorization")
    assert world.counts() == before


@by_name
async def test_interaction_id_is_required_and_a_uuid(world: World, op: Op) -> None:
    before = world.counts()
    resp = await world.call(op, world.headers(op, world.token(op), drop=("x-fapi-interaction-id",)))
    assert_error(resp, 400, "UK.OBIE.Header.Missing", "missing_header", "x-fapi-interaction-id")
    resp = await world.call(op, world.headers(op, world.token(op), extra={"x-fapi-interaction-id": "42"}))
    assert_error(resp, 400, "UK.OBIE.Header.Invalid", "invalid_header", "x-fapi-interaction-id")
    assert resp.headers["x-fapi-interaction-id"] == "42"
    assert world.counts() == before


@pytest.mark.parametrize("op", [op for op in OPS if op.fapi], ids=[op.name for op in OPS if op.fapi])
@pytest.mark.parametrize("header", ["x-fapi-financial-id", "x-fapi-customer-ip-address"])
async def test_fapi_headers_where_the_spec_lists_them(world: World, op: Op, header: str) -> None:
    before = world.counts()
    resp = await world.call(op, world.headers(op, world.token(op), drop=(header,)))
    assert_error(resp, 400, "UK.OBIE.Header.Missing", "missing_header", header)
    resp = await world.call(op, world.headers(op, world.token(op), extra={header: "not valid"}))
    assert_error(resp, 400, "UK.OBIE.Header.Invalid", "invalid_header", header)
    assert world.counts() == before


@pytest.mark.parametrize("op", [op for op in OPS if op.id_field], ids=[op.name for op in OPS if op.id_field])
async def test_unknown_id_is_not_found(world: World, op: Op) -> None:
    assert op.id_field is not None
    before = world.counts()
    path = world.path(op, **{op.id_field: UNKNOWN[op.id_field]})
    resp = await world.call(op, world.headers(op, world.token(op)), path)
    assert_error(resp, 400, "UK.OBIE.Resource.NotFound", "resource_not_found", None)
    assert world.counts() == before


@pytest.mark.parametrize("op", [op for op in OPS if op.id_field], ids=[op.name for op in OPS if op.id_field])
async def test_another_client_cannot_see_the_resource(world: World, op: Op) -> None:
    before = world.counts()
    resp = await world.call(op, world.headers(op, world.token(op, client_id="client-b")))
    assert_error(resp, 400, "UK.OBIE.Resource.NotFound", "resource_not_found", None)
    assert world.counts() == before


@pytest.mark.parametrize(
    "op", [op for op in OPS if op.grant == "code"], ids=[op.name for op in OPS if op.grant == "code"]
)
async def test_payment_token_must_name_the_consent_of_the_body(world: World, op: Op) -> None:
    """An authorization-code token for another consent (here: the other flow's) cannot pay this one."""
    other = world.ids["vrp_consent"] if op.name == "A3" else world.code_consent["A3"]
    token = issue_access_token(
        world.h.bank, "client-a", "authorization_code", f"payments:{other} openid", other, 432000
    ).value
    before = world.counts()
    resp = await world.call(op, world.headers(op, token))
    assert_error(resp, 401, "UK.OBIE.Header.Invalid", "no_access_token", "Authorization")
    # Another client's token, even naming this consent, cannot pay it either.
    stolen = issue_access_token(
        world.h.bank,
        "client-b",
        "authorization_code",
        f"payments:{world.code_consent[op.name]} openid",
        world.code_consent[op.name],
        432000,
    ).value
    resp = await world.call(op, world.headers(op, stolen))
    assert resp.status_code in (400, 401), resp.text
    assert resp.json()["Code"] in ("UK.OBIE.Resource.NotFound", "UK.OBIE.Header.Invalid")
    assert world.counts() == before


CREATING = [op for op in OPS if op.method == "POST"]


def other_body(op: Op, body: Any) -> Any:
    """The same request with one value changed."""
    import copy

    changed = copy.deepcopy(body)
    if op.name == "A2":
        changed["data"]["transaction"][0]["transferInfo"]["concept"] = "changed"
    elif op.name in ("A1", "A3"):
        changed["Data"]["Initiation"]["FileReference"] = "CHANGED"
    elif op.name == "B1":
        changed["Data"]["ControlParameters"]["MaximumIndividualAmount"]["Amount"] = "499.99"
    else:
        changed["Data"]["Instruction"]["InstructedAmount"]["Amount"] = "2.01"
    return changed


def snapshot(world: World) -> dict[str, dict[str, Any]]:
    return {kind: dict(world.h.bank.store.items(kind)) for kind in KINDS}


@pytest.mark.parametrize("op", CREATING, ids=[op.name for op in CREATING])
async def test_idempotency_key_on_every_creating_post(world: World, op: Op) -> None:
    key = "k" * 40  # the longest key allowed
    token = world.token(op)
    first = await world.call(op, world.headers(op, token, extra={"x-idempotency-key": key}))
    assert first.status_code == 201, first.text
    after_first = snapshot(world)
    # Same key, same body: the same resource again, 201, nothing new.
    again = await world.call(op, world.headers(op, token, extra={"x-idempotency-key": key}))
    assert again.status_code == 201, again.text
    assert again.json() == first.json()
    assert snapshot(world) == after_first
    # Same key, another body: 400 on the key, and the resource is untouched.
    original = world.bodies[op.name]
    world.bodies[op.name] = other_body(op, original)
    resp = await world.call(op, world.headers(op, token, extra={"x-idempotency-key": key}))
    assert_error(resp, 400, "UK.OBIE.Header.Invalid", "invalid_header", "x-idempotency-key")
    assert snapshot(world) == after_first
    # Over 40 characters: 400 on the key, nothing created.
    world.bodies[op.name] = original
    resp = await world.call(op, world.headers(op, token, extra={"x-idempotency-key": "k" * 41}))
    assert_error(resp, 400, "UK.OBIE.Header.Invalid", "invalid_header", "x-idempotency-key")
    assert snapshot(world) == after_first
