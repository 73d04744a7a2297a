"""The approval link and the redirect callback: PAR renewal, deadlines, forged / replayed / misdirected
redirects, the bank's POSTed delivery, malformed input, and tokens expiring mid-flow."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from engine_support import CALLBACK_PATH, Rig, batch, engine_rig

from processor.domain.file_states import FlowState
from processor.engine.settings import EngineSettings
from processor.engine.tracing import tracing_on
from processor.store import Store


async def awaiting(rig: Rig) -> str:
    """Submit a batch and drive it to AWAITING_AUTHORIZATION; its batch id."""
    document = batch()
    await rig.submit(document)
    await rig.to_state(document["batch_id"], FlowState.AWAITING_AUTHORIZATION)
    return str(document["batch_id"])


def request_uri(bank_url: str) -> str:
    return parse_qs(urlsplit(bank_url).query)["request_uri"][0]


class Transactions:
    """A store observer counting transactions (writes apart)."""

    def __init__(self) -> None:
        self.reads = 0
        self.writes = 0

    @contextmanager
    def transaction(self, *, write: bool, dialect: str) -> Iterator[None]:
        if write:
            self.writes += 1
        else:
            self.reads += 1
        yield

    @contextmanager
    def event(self, *, topic: str, key: str, status: str | None) -> Iterator[dict[str, str]]:
        yield {}


def attempts(rig: Rig, batch_id: str) -> list[str]:
    return [a.state for a in rig.store.run(lambda tx: tx.auth.for_flow("file", batch_id), write=False)]


async def test_link_opened_after_the_request_uri_expired_pushes_a_new_one(store: Store) -> None:
    async with engine_rig(store) as rig:
        batch_id = await awaiting(rig)
        link = rig.approval_url(batch_id)
        first = await rig.open_link(link)
        assert first.status_code == 302
        assert first.headers["referrer-policy"] == "no-referrer" and first.headers["cache-control"] == "no-store"
        stale_url = first.headers["location"]

        rig.clock.advance(301)  # the request_uri lives 300 s
        stale = await rig.http.get(stale_url)
        assert stale.status_code == 400  # the bank's page refuses the expired request

        approval = await rig.approve(link)  # the same link, hours later: a fresh PAR
        assert request_uri(approval.bank_url) != request_uri(stale_url)
        assert approval.callback is not None and approval.callback.status_code == 200
        assert rig.flow(batch_id).state == FlowState.AUTHORIZED
        assert len(attempts(rig, batch_id)) == 2
        # Every state we generated carries at least 128 bits.
        assert all(len(s) >= 22 for s in attempts(rig, batch_id))


async def test_a_redirect_takes_three_store_transactions(store: Store) -> None:
    """The state read; the state used up with the flow read for the exchange (the payday comes with it); the
    tokens and the move kept. (Five before: the flow read and the payday each had a transaction of their own.)
    With traces on, the trace context is one read more: a test before this one in the session may have installed
    a tracer provider, which OpenTelemetry allows once per process."""
    async with engine_rig(store) as rig:
        batch_id = await awaiting(rig)
        approval = await rig.approve(rig.approval_url(batch_id), deliver=False)
        counted = Transactions()
        store.observer = counted
        try:
            answer = await rig.http.get(approval.redirect)
        finally:
            store.observer = None
        assert answer.status_code == 200 and rig.flow(batch_id).state == FlowState.AUTHORIZED
        assert (counted.reads, counted.writes) == (2 if tracing_on() else 1, 2)


async def test_deadline_passed_expires_the_flow_and_the_link_refuses(store: Store) -> None:
    settings = EngineSettings(authorization_deadline=600, lease_seconds=30, duplicate_wait=0.2)
    async with engine_rig(store, settings=settings) as rig:
        batch_id = await awaiting(rig)
        link = rig.approval_url(batch_id)
        opened = await rig.open_link(link)  # an approver who opens the page but never decides
        assert opened.status_code == 302
        rig.clock.advance(600)
        refused = await rig.open_link(link)
        assert refused.status_code == 410 and "deadline" in refused.text
        flow = await rig.to_state(batch_id, FlowState.EXPIRED, expire=True)
        assert flow.next_action_at is None
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "EXPIRED"]
        assert "deadline" in rig.events(batch_id)[-1].payload["reason"]
        assert (await rig.open_link(link)).status_code == 410
        assert rig.count("file_payment") == 0


async def test_decision_after_the_deadline_is_not_exchanged(store: Store) -> None:
    settings = EngineSettings(authorization_deadline=600, lease_seconds=30, duplicate_wait=0.2)
    async with engine_rig(store, settings=settings) as rig:
        batch_id = await awaiting(rig)
        opened = await rig.open_link(rig.approval_url(batch_id))
        rig.clock.advance(250)  # still within the PAR's life, but ...
        redirect = await rig.decide(opened.headers["location"])
        rig.clock.advance(360)  # ... the redirect arrives after the flow's deadline
        answer = await rig.http.get(redirect)
        assert answer.status_code >= 400
        assert rig.code_exchanges() == 0
        await rig.to_state(batch_id, FlowState.EXPIRED, expire=True)


async def test_forged_state_never_leads_to_an_exchange(store: Store) -> None:
    async with engine_rig(store) as rig:
        batch_id = await awaiting(rig)
        await rig.open_link(rig.approval_url(batch_id))
        callback = rig.public_url + CALLBACK_PATH
        forged = await rig.http.get(callback, params={"code": "made-up", "state": "A" * 43, "iss": rig.sandbox_url})
        assert forged.status_code == 400 and "not one we started" in forged.text
        posted = await rig.http.post(callback, json={"redirect_url": f"{callback}?code=made-up&state={'B' * 43}"})
        assert posted.status_code == 400 and posted.json()["error"] == "unknown_state"
        denied = await rig.http.get(callback, params={"error": "access_denied", "state": "C" * 43})
        assert denied.status_code == 400
        assert rig.code_exchanges() == 0
        assert rig.flow(batch_id).state == FlowState.AWAITING_AUTHORIZATION


async def test_replayed_callback_is_a_no_op(store: Store) -> None:
    async with engine_rig(store) as rig:
        batch_id = await awaiting(rig)
        approval = await rig.approve(rig.approval_url(batch_id))
        assert approval.callback is not None and approval.callback.status_code == 200
        tokens_before = rig.count("access_token")
        again = await rig.http.get(approval.redirect)
        assert again.status_code == 200 and "already received" in again.text
        posted = await rig.http.post(rig.public_url + CALLBACK_PATH, json={"redirect_url": approval.redirect})
        assert posted.status_code == 200 and posted.json()["status"] == "success"
        assert rig.code_exchanges() == 1
        assert rig.count("access_token") == tokens_before
        assert rig.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]


async def test_the_redirect_get_answers_a_browser_with_a_page_and_other_clients_with_json(store: Store) -> None:
    browser = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    async with engine_rig(store) as rig:
        batch_id = await awaiting(rig)
        approval = await rig.approve(rig.approval_url(batch_id), deliver=False)
        first = await rig.http.get(approval.redirect)  # httpx sends Accept: */*, like curl
        assert first.status_code == 200 and first.headers["content-type"].startswith("application/json")
        assert first.json()["status"] == "success" and first.json()["message"]
        assert first.headers["vary"] == "Accept"  # one URL, two answers: caches must key on Accept
        again = await rig.http.get(approval.redirect, headers=browser)
        assert again.status_code == 200 and again.headers["content-type"].startswith("text/html")
        assert "Already received" in again.text and again.headers["cache-control"] == "no-store"
        assert again.headers["vary"] == "Accept"
        forged = rig.public_url + CALLBACK_PATH + "?" + urlencode({"code": "c", "state": "forged-state"})
        refused = await rig.http.get(forged)
        assert refused.status_code >= 400 and refused.json()["status"] == "error" and refused.json()["message"]
        page = await rig.http.get(forged, headers=browser)
        assert page.status_code == refused.status_code and page.headers["content-type"].startswith("text/html")
        bad = await rig.http.get(rig.public_url + CALLBACK_PATH)
        assert bad.status_code == 400 and bad.json()["status"] == "error" and "state" in bad.json()["message"]
        assert rig.code_exchanges() == 1
        assert rig.flow(batch_id).state == FlowState.AUTHORIZED


async def test_callback_meant_for_another_flow_authorizes_nothing(store: Store) -> None:
    async with engine_rig(store) as rig:
        first = await awaiting(rig)
        second = await awaiting(rig)
        # The approver of the second flow decides; the code comes back paired with the FIRST flow's state.
        opened_first = await rig.open_link(rig.approval_url(first))
        assert opened_first.status_code == 302
        state_first = attempts(rig, first)[0]
        approval = await rig.approve(rig.approval_url(second), deliver=False)
        mixed = (
            rig.public_url
            + CALLBACK_PATH
            + "?"
            + urlencode({"code": approval.query["code"], "state": state_first, "iss": rig.sandbox_url})
        )
        answer = await rig.http.get(mixed)
        assert answer.status_code >= 400
        # The bank refuses the exchange (the code is bound to the other flow's PKCE challenge): no tokens, no move.
        assert rig.flow(first).state == FlowState.AWAITING_AUTHORIZATION
        first_consent = rig.flow(first).consent_id or ""
        assert store.run(lambda tx: tx.tokens.get(first_consent), write=False) is None
        # A state of a flow that no longer awaits authorization is refused before any exchange.
        await rig.open_link(rig.approval_url(first))  # an attempt that is never completed ...
        unused_state = attempts(rig, first)[-1]
        rejected = await rig.approve(rig.approval_url(first), approve=False)  # ... then the flow ends
        assert rejected.callback is not None and rejected.callback.status_code == 200
        assert rig.flow(first).state == FlowState.REJECTED
        exchanges = rig.code_exchanges()
        late = await rig.http.get(
            rig.public_url + CALLBACK_PATH, params={"code": "x" * 20, "state": unused_state, "iss": rig.sandbox_url}
        )
        assert late.status_code == 409
        assert rig.code_exchanges() == exchanges


async def test_redirect_from_another_issuer_is_refused_without_using_the_state(store: Store) -> None:
    async with engine_rig(store) as rig:
        batch_id = await awaiting(rig)
        approval = await rig.approve(rig.approval_url(batch_id), deliver=False)
        query = dict(approval.query, iss="https://evil.example")
        evil = await rig.http.get(rig.public_url + CALLBACK_PATH, params=query)
        assert evil.status_code == 400 and "another issuer" in evil.text
        assert rig.code_exchanges() == 0
        genuine = await rig.http.get(approval.redirect)  # the state was not used up by the forgery
        assert genuine.status_code == 200
        assert rig.flow(batch_id).state == FlowState.AUTHORIZED


async def test_bank_posts_the_redirect_url_to_the_callback(store: Store) -> None:
    async with engine_rig(store, callback_url=True) as rig:
        batch_id = await awaiting(rig)
        approval = await rig.approve(rig.approval_url(batch_id), deliver=False)
        assert approval.query["iss"] == rig.sandbox_url
        for _ in range(200):  # the bank posts after answering the browser
            if rig.flow(batch_id).state == FlowState.AUTHORIZED:
                break
            await asyncio.sleep(0.02)
        assert rig.flow(batch_id).state == FlowState.AUTHORIZED
        for _ in range(200):
            deliveries = [d for _, d in rig.bank.store.items("callback_delivery")]
            if deliveries:
                break
            await asyncio.sleep(0.02)
        assert [d["outcome"] for d in deliveries] == ["delivered"]
        browser = await rig.http.get(approval.redirect)  # then the browser arrives too: a no-op
        assert browser.status_code == 200
        assert rig.code_exchanges() == 1
        flow = await rig.to_state(batch_id, FlowState.COMPLETED)
        assert flow.bank_status == "InitiationCompleted"


async def test_malformed_requests_get_clear_4xx(store: Store) -> None:
    async with engine_rig(store) as rig:
        batch_id = await awaiting(rig)
        link = rig.approval_url(batch_id)
        callback = rig.public_url + CALLBACK_PATH
        http = rig.http
        cases: list[tuple[httpx.Response, int]] = [
            (await http.get(callback), 400),
            (await http.get(callback, params={"state": "x"}), 400),
            (await http.get(callback + "?state=a&state=b&code=c"), 400),
            (await http.get(callback, params={"code": "c", "state": "s" * 5000}), 400),
            (await http.post(callback, content=b"not json", headers={"content-type": "application/json"}), 400),
            (await http.post(callback, content=b"{}", headers={"content-type": "text/plain"}), 400),
            (await http.post(callback, json={"nope": 1}), 400),
            (await http.post(callback, json={"redirect_url": 42}), 400),
            (await http.post(callback, json={"redirect_url": "ftp://x/callback?code=a&state=b"}), 400),
            (await http.post(callback, json={"redirect_url": "http://x/elsewhere?code=a&state=b"}), 400),
            (await http.post(callback, json=["redirect_url"]), 400),
            (await http.post(callback, content=b"\xff\xfe", headers={"content-type": "application/json"}), 400),
            (await http.get(link.replace("?t=", "?t=wrong")), 404),
            (await http.get(link.split("?")[0]), 404),
            (await http.get(link.replace("/approve/file/", "/approve/cheese/")), 404),
            (await http.get(rig.public_url + "/approve/file/no-such-batch?t=abc"), 404),
        ]
        for response, status in cases:
            assert response.status_code == status, (response.request.url, response.text)
        health = await http.get(rig.public_url + "/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert rig.code_exchanges() == 0
        assert rig.flow(batch_id).state == FlowState.AWAITING_AUTHORIZATION


async def test_tokens_expiring_mid_flow_are_renewed(store: Store) -> None:
    async with engine_rig(store) as rig:
        batch_id = await awaiting(rig)
        cc_before = rig.count("access_token")
        rig.clock.advance(700)  # the client-credentials token (600 s) ran out while the approver thought
        await rig.approve(rig.approval_url(batch_id))
        assert rig.flow(batch_id).state == FlowState.AUTHORIZED
        rig.clock.advance(432_001)  # ... and so did the authorization-code token (432000 s) before A3 ran
        flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        assert flow.state == FlowState.COMPLETED
        # A new client-credentials token was fetched, and the consent's token was refreshed (refresh grant).
        refreshes = [s for s in rig.sent.to("/token", "POST") if b"refresh_token" in s.body]
        assert len(refreshes) == 1
        assert rig.count("access_token") >= cc_before + 2
        assert rig.count("file_payment") == 1
