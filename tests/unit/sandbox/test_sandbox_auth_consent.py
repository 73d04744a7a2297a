"""The consent page and the approver's decision (in-process; the callback to a real server is in integration)."""

# Fixtures are imported from sandbox_auth_fixtures by name; pytest injects them as parameters of the same name.
# ruff: noqa: F811

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urlencode

import httpx
import pytest
from manual_clock import ManualClock
from sandbox_auth_fixtures import (  # noqa: F401 (fixtures)
    ISSUER,
    REDIRECT_URI,
    Harness,
    Tpp,
    bank,
    clock,
    consent_status,
    file_consent,
    harness,
    http,
    insert_consent,
    other_tpp,
    query_of,
    tpp,
    vrp_consent,
)

from sandbox.consents import VRP_KIND
from sandbox.oauth.par import redirect_location
from sandbox.pages import format_amount
from sandbox.state import Bank


class Page(HTMLParser):
    """Text, forms and ids of a page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.ids: dict[str, dict[str, str]] = {}
        self.forms: list[dict[str, object]] = []
        self.scripts = 0
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids[a["id"]] = {"tag": tag, **a}
        if tag == "script":
            self.scripts += 1
        if tag == "form":
            self.forms.append({"action": a.get("action"), "method": a.get("method"), "fields": {}})
        if tag in ("input", "button") and self.forms and a.get("name"):
            fields = self.forms[-1]["fields"]
            assert isinstance(fields, dict)
            fields[a["name"]] = a.get("value", "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def body(self) -> str:
        return " ".join(" ".join(self.text).split())


async def open_page(harness: Harness, tpp: Tpp, consent_id: str) -> tuple[httpx.Response, str]:
    r, _, _ = await harness.push(tpp, consent_id)
    request_uri = r.json()["request_uri"]
    url = (await harness.auth_url(tpp, consent_id, request_uri)).text
    return await harness.http.get(url), request_uri


async def test_file_consent_page_shows_the_figures(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    page, request_uri = await open_page(harness, tpp, consent_id)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    parsed = Page(page.text)
    assert "PAYROLL-2026-11" in parsed.body
    assert "2,480.75 GTQ" in parsed.body
    assert parsed.ids["number-of-transactions"]
    assert "Number of transactions 2" in parsed.body
    assert "TPP tpp-one" in parsed.body and consent_id in parsed.body
    assert "5551110002" in parsed.body and "980.25" in parsed.body
    # Text from the file is escaped, never markup.
    assert "Payroll <November> 0" in parsed.body
    assert "<November>" not in page.text and "&lt;November&gt;" in page.text
    assert parsed.ids["approve"]["tag"] == "button" and parsed.ids["reject"]["tag"] == "button"
    decisions = [f["fields"] for f in parsed.forms]
    assert {"request_uri": request_uri, "decision": "approve"} in decisions
    assert {"request_uri": request_uri, "decision": "reject"} in decisions
    assert all(f["action"] == "/auth/decision" and f["method"] == "post" for f in parsed.forms)
    assert parsed.scripts == 0


async def test_vrp_consent_page_shows_creditor_limits_and_validity(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = vrp_consent(bank, tpp)
    page, _ = await open_page(harness, tpp, consent_id)
    assert page.status_code == 200
    body = Page(page.text).body
    assert "Savings pot" in body and "20000319470104" in body
    assert "Maximum per payment 100.00 GBP" in body
    assert "Month Calendar 150.00 GBP" in body
    assert "Day Consent 60.00 GBP" in body
    assert "2026-01-01T00:00:00+00:00 to 2027-12-31T00:00:00+00:00" in body
    assert "VRP - CUOTAS - Dispersion" in body


async def test_page_escapes_hostile_values(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    hostile = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    consent_id = vrp_consent(bank, tpp, name=hostile)
    page, _ = await open_page(harness, tpp, consent_id)
    parsed = Page(page.text)
    assert parsed.scripts == 0
    assert "<img" not in page.text and "<script>" not in page.text
    assert hostile in parsed.body


async def test_page_survives_a_sparse_consent(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = insert_consent(bank, VRP_KIND, tpp.client_id, {"ControlParameters": {}}, "AwaitingAuthorisation")
    page, _ = await open_page(harness, tpp, consent_id)
    assert page.status_code == 200
    assert "No limits per period" in Page(page.text).body


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"request_uri": None}, "no request_uri"),
        ({"request_uri": "urn:ietf:params:oauth:request_uri:unknown"}, "unknown"),
        ({"client_id": "tpp-two"}, "client_id of the link"),
        ({"response_type": "token"}, "response_type must be code"),
        ({"scope": "openid"}, "scope must be payments"),
    ],
)
async def test_page_for_a_bad_link(
    harness: Harness, bank: Bank, tpp: Tpp, change: dict[str, str | None], message: str
) -> None:
    consent_id = file_consent(bank, tpp)
    r, _, _ = await harness.push(tpp, consent_id)
    params = {
        "client_id": tpp.client_id,
        "response_type": "code",
        "scope": "payments",
        "request_uri": r.json()["request_uri"],
    }
    params.update(change)
    query = urlencode({k: v for k, v in params.items() if v is not None})
    page = await harness.http.get(f"/auth?{query}")
    assert page.status_code == 400
    assert page.headers["content-type"].startswith("text/html")
    parsed = Page(page.text)
    assert message in parsed.body
    assert "approve" not in parsed.ids


async def test_page_after_expiry(harness: Harness, bank: Bank, tpp: Tpp, clock: ManualClock) -> None:
    consent_id = file_consent(bank, tpp)
    r, _, _ = await harness.push(tpp, consent_id)
    url = (await harness.auth_url(tpp, consent_id, r.json()["request_uri"])).text
    clock.advance(300)
    page = await harness.http.get(url)
    assert page.status_code == 400
    assert "has expired" in Page(page.text).body


async def test_approve_redirects_with_code_state_and_iss(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    r, verifier, state = await harness.push(tpp, consent_id)
    d = await harness.decide(r.json()["request_uri"], "approve")
    assert d.status_code == 303
    location = d.headers["location"]
    assert location.startswith(REDIRECT_URI + "?")
    query = query_of(location)
    assert set(query) == {"code", "state", "iss"}
    assert query["state"] == state and query["iss"] == ISSUER
    assert consent_status(bank, consent_id) == "Authorised"
    stored = bank.store.get("auth_code", query["code"])
    assert stored is not None
    assert stored["client_id"] == tpp.client_id and stored["consent_id"] == consent_id
    assert stored["redirect_uri"] == REDIRECT_URI
    assert (await harness.exchange(tpp, query["code"], verifier)).status_code == 200


async def test_reject_redirects_with_access_denied(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = vrp_consent(bank, tpp)
    r, _, state = await harness.push(tpp, consent_id, redirect_uri="https://tpp.example/other")
    d = await harness.decide(r.json()["request_uri"], "reject")
    assert d.status_code == 303
    location = d.headers["location"]
    assert location.startswith("https://tpp.example/other?")
    query = query_of(location)
    assert query["error"] == "access_denied" and query["state"] == state and "code" not in query
    assert consent_status(bank, consent_id) == "Rejected"
    assert bank.store.count("auth_code") == 0


async def test_decision_on_a_consent_decided_through_another_request(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    consent_id = file_consent(bank, tpp)
    first, _, _ = await harness.push(tpp, consent_id)
    second, _, _ = await harness.push(tpp, consent_id)
    assert (await harness.decide(first.json()["request_uri"], "approve")).status_code == 303
    d = await harness.decide(second.json()["request_uri"], "reject")
    assert d.status_code == 400
    assert "is Authorised" in Page(d.text).body
    assert consent_status(bank, consent_id) == "Authorised"


@pytest.mark.parametrize("form", [{"decision": "maybe"}, {"decision": ""}, {}])
async def test_decision_must_be_approve_or_reject(harness: Harness, bank: Bank, tpp: Tpp, form: dict[str, str]) -> None:
    consent_id = file_consent(bank, tpp)
    r, _, _ = await harness.push(tpp, consent_id)
    d = await harness.http.post("/auth/decision", data={"request_uri": r.json()["request_uri"], **form})
    assert d.status_code == 400 and d.headers["content-type"].startswith("text/html")
    assert consent_status(bank, consent_id) == "AwaitingAuthorisation"
    # An invalid decision does not consume the request.
    assert (await harness.decide(r.json()["request_uri"], "approve")).status_code == 303


async def test_decision_posted_as_json_is_refused(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    r, _, _ = await harness.push(tpp, file_consent(bank, tpp))
    d = await harness.http.post("/auth/decision", json={"request_uri": r.json()["request_uri"], "decision": "approve"})
    assert d.status_code == 400 and "form" in Page(d.text).body


async def test_decision_without_callback_records_nothing(harness: Harness, bank: Bank, tpp: Tpp) -> None:
    r, _, _ = await harness.push(tpp, file_consent(bank, tpp))
    assert (await harness.decide(r.json()["request_uri"], "approve")).status_code == 303
    assert bank.store.count("callback_delivery") == 0


@pytest.mark.parametrize(
    ("value", "text"),
    [("1999.99", "1,999.99"), ("12", "12.00"), ("0.5", "0.50"), ("1.125", "1.125"), ("abc", "abc"), (None, "None")],
)
def test_format_amount(value: object, text: str) -> None:
    from decimal import Decimal

    assert format_amount(Decimal(value) if value not in ("abc", None) else value) == text  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("redirect_uri", "expected"),
    [
        ("https://tpp.example/cb", "https://tpp.example/cb?code=c&state=s"),
        ("https://tpp.example/cb?tenant=7", "https://tpp.example/cb?tenant=7&code=c&state=s"),
        ("https://tpp.example/cb?", "https://tpp.example/cb?code=c&state=s"),
    ],
)
def test_redirect_location_keeps_the_registered_query(redirect_uri: str, expected: str) -> None:
    assert redirect_location(redirect_uri, {"code": "c", "state": "s"}) == expected
