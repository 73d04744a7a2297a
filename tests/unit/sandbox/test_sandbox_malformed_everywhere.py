"""Every operation that reads a body, fed bodies that are too big, not UTF-8, not JSON or of the wrong type.

Each answers 400 in the shape the spec gives that operation (OAuth error for token and PAR, plain text for the
message-signature, the resource error for the resource server, an HTML page for the consent decision), with
or without a Content-Length, never a 500 and never a traceback, and nothing is created. The per-operation
suites test the field-level checks; this one makes sure no body-reading route was missed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from manual_clock import ManualClock
from sandbox_auth_fixtures import ISSUER, file_initiation, insert_consent, make_bank, make_tpp, vrp_data

from sandbox.app import create_app
from sandbox.consents import FILE_KIND, VRP_KIND
from sandbox.oauth.par import PAR_KIND
from sandbox.oauth.tokens import TOKEN_KIND, issue_access_token
from sandbox.state import Bank

LIMIT = 1024
FINANCIAL_ID = "0015800001041RHAAY"
PISP = "/open-banking/v3.1/pisp"


@dataclass(frozen=True)
class Op:
    """One body-reading operation: how to call it and the error shape it must answer in."""

    name: str
    method: str
    path: str
    content_type: str
    shape: str  # "oauth" | "plain" | "html" | "resource"
    token: str = ""  # "" | "cc" | "code"
    fapi: bool = False


OPS = [
    Op("message-signature", "GET", "/o3/v1.0/message-signature", "application/json", "plain"),
    Op("token", "POST", "/token", "application/x-www-form-urlencoded", "oauth"),
    Op("par", "POST", "/par", "application/x-www-form-urlencoded", "oauth"),
    Op("consent-decision", "POST", "/auth/decision", "application/x-www-form-urlencoded", "html"),
    Op("file-payment-consents.create", "POST", f"{PISP}/file-payment-consents", "application/json", "resource", "cc"),
    Op(
        "file-payment-consents.upload",
        "POST",
        f"{PISP}/file-payment-consents/{{file_consent}}/file",
        "application/json",
        "resource",
        "cc",
    ),
    Op("file-payments.create", "POST", f"{PISP}/file-payments", "application/json", "resource", "code", True),
    Op(
        "domestic-vrp-consents.create",
        "POST",
        f"{PISP}/domestic-vrp-consents",
        "application/json",
        "resource",
        "cc",
        True,
    ),
    Op("domestic-vrps.create", "POST", f"{PISP}/domestic-vrps", "application/json", "resource", "code", True),
]

JSON_BODIES = {
    "too-big": b'{"Data": "' + b"x" * (LIMIT * 4) + b'"}',
    "not-utf8": b'{"Data": "\xff\xfe"}',
    "not-json": b"{'Data': ",
    "wrong-type": b'[{"Data": {}}]',
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "big-number": b'{"Data": {"ConsentId": 1e999999}}',
}
FORM_BODIES = {
    "too-big": b"a=" + b"x" * (LIMIT * 4),
    "not-utf8": b"grand_type=\xff\xfe",
    "repeated": b"a=1&a=2",
    "json-instead": b'{"grand_type": "client_credentials"}',
    "percent-garbage": b"%%%=%zz&=&&==",
}

PARSABLE_FORMS = ("repeated", "percent-garbage", "json-instead")


@dataclass
class World:
    bank: Bank
    http: httpx.AsyncClient
    cc: str
    code: str
    file_consent: str


@pytest.fixture
async def world() -> AsyncIterator[World]:
    tpp = make_tpp("tpp-malformed", 0)
    bank = make_bank([tpp], ManualClock(), max_body_bytes=LIMIT)
    file_consent = insert_consent(bank, FILE_KIND, tpp.client_id, {"Initiation": file_initiation()}, "AwaitingUpload")
    vrp_consent = insert_consent(bank, VRP_KIND, tpp.client_id, vrp_data(), "Authorised")
    cc = issue_access_token(bank, tpp.client_id, "client_credentials", "payments", None, 600).value
    code = issue_access_token(
        bank, tpp.client_id, "authorization_code", f"payments:{vrp_consent} openid", vrp_consent, 432000
    ).value
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(bank)), base_url=ISSUER) as http:
        yield World(bank, http, cc, code, file_consent)


def counts(bank: Bank) -> dict[str, int]:
    kinds = (FILE_KIND, VRP_KIND, "file_payment", "domestic_vrp", TOKEN_KIND, PAR_KIND, "auth_code")
    return {kind: bank.store.count(kind) for kind in kinds}


async def streamed(raw: bytes) -> AsyncIterator[bytes]:
    """The body in chunks, sent without a Content-Length (chunked)."""
    for start in range(0, len(raw), 700):
        yield raw[start : start + 700]


def check_shape(op: Op, resp: httpx.Response) -> None:
    assert resp.status_code == 400, (op.name, resp.status_code, resp.text[:300])
    assert b"Traceback" not in resp.content and b'File "' not in resp.content
    ctype = resp.headers["content-type"]
    if op.shape == "oauth":
        assert ctype.startswith("application/json")
        body = resp.json()
        assert set(body) == {"error", "error_description"} and body["error"] == "invalid_request", body
    elif op.shape == "plain":
        assert ctype.startswith("text/plain") and resp.text.strip()
    elif op.shape == "html":
        assert ctype.startswith("text/html") and "<html" in resp.text.lower()
    else:
        assert ctype.startswith("application/json")
        body = resp.json()
        assert set(body) == {"Code", "Message", "Errors"}, body
        if op.name == "file-payment-consents.upload" and body["Code"] == "UK.OBIE.Field.Invalid":
            # A JSON object that is not the file payload: A2's own error row.
            assert body["Message"].startswith("incorrect_records"), body
        else:
            assert body["Code"] == "UK.OBIE.Resource.InvalidFormat", body
            assert body["Message"].startswith("invalid_message_format"), body
        assert body["Errors"][0]["ErrorCode"] == body["Code"]


def cases() -> list[tuple[Op, str, bool]]:
    out = []
    for op in OPS:
        bodies = FORM_BODIES if op.content_type.endswith("urlencoded") else JSON_BODIES
        for label in bodies:
            if op.shape == "oauth" and label in PARSABLE_FORMS:
                continue  # answered by the parameter checks: test_parsable_but_wrong_forms_get_oauth_errors
            for chunked in (False, True):
                out.append((op, label, chunked))
    return out


@pytest.mark.parametrize(
    ("op", "label", "chunked"),
    cases(),
    ids=[f"{op.name}-{label}-{'chunked' if chunked else 'length'}" for op, label, chunked in cases()],
)
async def test_bad_bodies_get_the_operations_error_shape(world: World, op: Op, label: str, chunked: bool) -> None:
    bodies = FORM_BODIES if op.content_type.endswith("urlencoded") else JSON_BODIES
    raw = bodies[label]
    headers = {"Content-Type": op.content_type, "x-fapi-interaction-id": str(uuid.uuid4())}
    if op.token:
        headers["Authorization"] = f"Bearer {world.cc if op.token == 'cc' else world.code}"
    if op.fapi:
        headers["x-fapi-financial-id"] = FINANCIAL_ID
        headers["x-fapi-customer-ip-address"] = "203.0.113.7"
    before = counts(world.bank)
    path = op.path.format(file_consent=world.file_consent)
    content = streamed(raw) if chunked else raw
    resp = await world.http.request(op.method, path, content=content, headers=headers)
    if op.shape == "html" and label in PARSABLE_FORMS:
        # A parsable form without a valid request_uri and decision: the consent page's error page.
        assert resp.status_code == 400 and "text/html" in resp.headers["content-type"]
    else:
        check_shape(op, resp)
    assert counts(world.bank) == before


@pytest.mark.parametrize("op", [op for op in OPS if op.shape == "oauth"], ids=lambda op: op.name)
@pytest.mark.parametrize("label", PARSABLE_FORMS)
async def test_parsable_but_wrong_forms_get_oauth_errors(world: World, op: Op, label: str) -> None:
    before = counts(world.bank)
    resp = await world.http.post(op.path, content=FORM_BODIES[label], headers={"Content-Type": op.content_type})
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert set(body) == {"error", "error_description"}
    assert body["error"] in ("invalid_request", "invalid_client", "unsupported_grant_type"), body
    assert counts(world.bank) == before


def test_every_body_reading_route_is_listed() -> None:
    """A new POST route must be added to OPS, so malformed bodies are tried on it too."""
    tpp = make_tpp("tpp-routes", 0)
    app = create_app(make_bank([tpp], ManualClock()))
    posts = {
        str(getattr(route, "name", "")) for route in app.routes if "POST" in (getattr(route, "methods", None) or ())
    }
    listed = {op.name for op in OPS}
    assert posts <= listed, posts - listed


async def test_a_sandbox_bug_answers_the_resource_shape_without_a_traceback() -> None:
    # Not reachable through the spec's operations (that is the point of this file); a route that raises
    # stands in for a bug, which must still get the spec's error shape and the echoed interaction id.
    app = create_app(make_bank([], ManualClock()))

    async def broken(request: object) -> None:
        raise RuntimeError("secret internals")

    app.router.add_route("/broken", broken, methods=["GET"])
    interaction = str(uuid.uuid4())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=ISSUER) as http:
        response = await http.get("/broken", headers={"x-fapi-interaction-id": interaction})
    assert response.status_code == 500
    assert response.headers["x-fapi-interaction-id"] == interaction
    body = response.json()
    assert body["Code"] == body["Errors"][0]["ErrorCode"] == "UK.OBIE.UnexpectedError"
    assert "secret internals" not in response.text and "Traceback" not in response.text
