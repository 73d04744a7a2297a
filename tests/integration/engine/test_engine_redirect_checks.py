"""What the bank hands the approver's browser, checked both ways, over real HTTP on loopback with the sandbox:
a redirect back without `iss` is refused when the bank's discovery says it sends `iss` (RFC 9207), and our
approval link never redirects anywhere but the authorization endpoint of the bank's discovery, with the
`request_uri` we pushed, whatever a hostile resource server answers to E5."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from engine_support import CALLBACK_PATH, Rig, batch, engine_rig
from starlette.responses import PlainTextResponse

from processor.domain.file_states import FlowState
from processor.store import Store

E5_PREFIX = "/o3/v1.0/par-auth-code-url/"


async def awaiting(rig: Rig) -> str:
    document = batch()
    await rig.submit(document)
    await rig.to_state(document["batch_id"], FlowState.AWAITING_AUTHORIZATION)
    return str(document["batch_id"])


async def test_the_sandbox_says_it_sends_iss(store: Store) -> None:
    async with engine_rig(store) as rig:
        bank = await rig.engine.authorizer.banks.get("sandbox")
        assert (await bank.discovery()).authorization_response_iss_parameter_supported is True


async def test_a_redirect_without_iss_is_refused_and_its_state_stays_usable(store: Store) -> None:
    async with engine_rig(store) as rig:
        approved_id, rejected_id = await awaiting(rig), await awaiting(rig)
        callback = rig.public_url + CALLBACK_PATH
        approval = await rig.approve(rig.approval_url(approved_id), deliver=False)
        rejection = await rig.approve(rig.approval_url(rejected_id), approve=False, deliver=False)
        assert approval.query["iss"] == rejection.query["iss"] == rig.sandbox_url
        for decision in (approval, rejection):
            stripped = {k: v for k, v in decision.query.items() if k != "iss"}
            got = await rig.http.get(callback, params=stripped)
            assert got.status_code == 400 and got.json()["error"] == "missing_iss", got.text
            page = await rig.http.get(callback, params=stripped, headers={"Accept": "text/html"})
            assert page.status_code == 400 and "issuer" in page.text
            posted = await rig.http.post(callback, json={"redirect_url": f"{callback}?{urlencode(stripped)}"})
            assert posted.status_code == 400 and posted.json()["error"] == "missing_iss"
        # Nothing was exchanged or decided, and the states were not used up: the genuine redirects still work.
        assert rig.code_exchanges() == 0
        assert rig.flow(approved_id).state == rig.flow(rejected_id).state == FlowState.AWAITING_AUTHORIZATION
        assert (await rig.http.get(approval.redirect)).status_code == 200
        assert (await rig.http.get(rejection.redirect)).status_code == 200
        assert rig.flow(approved_id).state == FlowState.AUTHORIZED
        assert rig.flow(rejected_id).state == FlowState.REJECTED


class HostileBank:
    """The sandbox behind a resource server that answers E5 itself while `answer` is set: `answer(request_uri)`
    is the URL it hands out for the approver's browser."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.answer: Callable[[str], str] | None = None
        self.answered = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith(E5_PREFIX) and self.answer is not None:
            query = parse_qs(scope["query_string"].decode())
            self.answered += 1
            await PlainTextResponse(self.answer(query.get("request_uri", [""])[0]))(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def test_the_approval_link_never_redirects_outside_the_banks_authorization_endpoint(store: Store) -> None:
    hostile: list[HostileBank] = []

    def wrap(app: Any) -> HostileBank:
        hostile.append(HostileBank(app))
        return hostile[0]

    async with engine_rig(store, sandbox_wrapper=wrap) as rig:
        bank = hostile[0]
        batch_id = await awaiting(rig)
        link = rig.approval_url(batch_id)
        endpoint = f"{rig.sandbox_url}/auth"
        host = rig.sandbox_url.removeprefix("http://")
        foreign: list[Callable[[str], str]] = [
            lambda uri: f"https://evil.example/auth?request_uri={quote(uri)}",
            lambda uri: f"http://{host}@evil.example/auth?request_uri={quote(uri)}",  # userinfo: the host is evil
            lambda uri: f"{rig.sandbox_url}.evil.example/auth?request_uri={quote(uri)}",
            lambda uri: f"{endpoint}.evil.example/?request_uri={quote(uri)}",
            lambda uri: f"{endpoint}?request_uri={quote('urn:ietf:params:oauth:request_uri:theirs')}",  # not ours
            lambda uri: f"{endpoint}?client_id=x&response_type=code",  # no request_uri at all
            lambda uri: f"{endpoint}?request_uri={quote(uri)}&request_uri=urn:x",  # ours, and another
        ]
        for answer in foreign:
            bank.answer = answer
            opened = await rig.open_link(link)
            assert opened.status_code == 502, (answer("uri"), opened.status_code)
            assert "location" not in opened.headers
            assert opened.headers["content-type"].startswith("text/html")
            assert "evil" not in opened.text and "not trust" in opened.text
        assert bank.answered == len(foreign)
        assert rig.flow(batch_id).state == FlowState.AWAITING_AUTHORIZATION
        bank.answer = None  # the honest answer (discovery's endpoint with our request_uri) is followed
        approval = await rig.approve(link)
        assert approval.bank_url.startswith(endpoint + "?")
        assert approval.callback is not None and approval.callback.status_code == 200
        assert rig.flow(batch_id).state == FlowState.AUTHORIZED
