"""The operator console over real HTTP on loopback, on a real store (SQLite and PostgreSQL), with the real sandbox
bank and engine behind it (engine_rig): sign-in and sessions, CSRF, headers, escaping, masking, filters, the
retry action recorded with the operator's name. The browser walk is tests/e2e/test_console_browser.py."""

from __future__ import annotations

import asyncio
import re
import string
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from html import unescape
from urllib.parse import quote

import httpx
import structlog
from console_support import CSRF, PASSWORD, operator_auth
from engine_support import Rig, batch, bound_socket, engine_rig, pay, serve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import Mount

from processor.api.console.app import console_app, console_off
from processor.domain.file_states import FlowState
from processor.store import Store


@dataclass
class Console:
    rig: Rig
    url: str
    http: httpx.AsyncClient
    stack: AsyncExitStack

    async def sign_in(self, name: str = "ana", password: str = PASSWORD, **headers: str) -> httpx.Response:
        form = await self.http.get(f"{self.url}/sign-in")
        token = CSRF.search(form.text)
        assert token is not None, form.text
        return await self.http.post(
            f"{self.url}/sign-in", data={"csrf": token.group(1), "name": name, "password": password}, headers=headers
        )

    async def person(self, name: str) -> Console:
        """Another person signed in on their own client (closed with the rig)."""
        other = Console(
            self.rig, self.url, await self.stack.enter_async_context(httpx.AsyncClient(timeout=10)), self.stack
        )
        assert (await other.sign_in(name)).status_code == 303
        return other

    async def csrf(self, path: str) -> str:
        page = await self.http.get(f"{self.url}{path}")
        assert page.status_code == 200, page.text
        found = CSRF.search(page.text)
        assert found is not None
        return found.group(1)


@asynccontextmanager
async def console(store: Store) -> AsyncIterator[Console]:
    async with engine_rig(store) as rig:
        sock, port = bound_socket()
        app = Starlette(
            routes=[
                Mount(
                    "/console",
                    app=console_app(
                        store,
                        operator_auth(),
                        public_url=rig.public_url,
                        integrations=set(rig.config.integrations),
                        clock=rig.clock,
                    ),
                )
            ]
        )
        async with serve(app, sock), httpx.AsyncClient(timeout=10) as http, AsyncExitStack() as stack:
            yield Console(rig, f"http://127.0.0.1:{port}/console", http, stack)


async def test_pages_need_a_session_and_forms_their_csrf_token(store: Store) -> None:
    async with console(store) as c:
        batch_id = await pay(c.rig)  # COMPLETED, its third transfer FAILED (AC04)
        for path in ("/", f"/batches/{batch_id}", "/dead-letters", "/overview"):
            answer = await c.http.get(f"{c.url}{path}")
            assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in", path
        answer = await c.http.post(f"{c.url}/retry", data={"batch_id": batch_id})
        assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in"

        refused = await c.sign_in(password="wrong password here")
        assert refused.status_code == 401 and "Unknown operator or wrong password" in refused.text
        assert "dispersion_console=" not in refused.headers.get("set-cookie", "")
        signed = await c.sign_in()
        assert signed.status_code == 303 and signed.headers["location"] == "/console/"
        cookie = next(v for v in signed.headers.get_list("set-cookie") if v.startswith("dispersion_console="))
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
        assert "Secure" not in cookie  # plain HTTP on loopback

        # A form without its token, or with another session's, is refused and changes nothing.
        page = f"/batches/{batch_id}"
        for data in ({"batch_id": batch_id}, {"batch_id": batch_id, "csrf": "forged"}):
            answer = await c.http.post(f"{c.url}/retry", data=data)
            assert answer.status_code == 403 and "CSRF" in answer.text
        assert store.run(lambda tx: tx.flows.get(f"{batch_id}.retry-1"), write=False) is None
        answer = await c.http.post(f"{c.url}/sign-out", data={})
        assert answer.status_code == 403
        assert (await c.http.get(f"{c.url}{page}")).status_code == 200  # still signed in

        # The sign-in form has its own token too.
        answer = await c.http.post(f"{c.url}/sign-in", data={"name": "ana", "password": PASSWORD})
        assert answer.status_code == 403

        answer = await c.http.post(f"{c.url}/sign-out", data={"csrf": await c.csrf(page)})
        assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in"
        assert (await c.http.get(f"{c.url}{page}")).status_code == 303


async def test_cookie_is_secure_behind_tls_and_headers_are_strict(store: Store) -> None:
    async with console(store) as c:
        signed = await c.sign_in(**{"X-Forwarded-Proto": "https"})
        cookie = next(v for v in signed.headers.get_list("set-cookie") if v.startswith("dispersion_console="))
        assert "Secure" in cookie
        page = await c.http.get(f"{c.url}/sign-in")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
        assert "<script>" not in page.text and "onclick" not in page.text  # no inline script at all
        script = await c.http.get(f"{c.url}/static/console.js")
        assert script.status_code == 200 and "data-live" in script.text
        assert script.headers["content-security-policy"] == csp


async def test_values_are_escaped_accounts_masked_and_filters_work(store: Store) -> None:
    async with console(store) as c:
        hostile = batch(transfers=(("200100300", "10.00"), ("200109902", "20.00")))
        hostile["transactions"][0]["concept"] = "<script>alert(1)</script>"
        hostile["file_reference"] = "REF<b>1</b>"
        await c.rig.submit(hostile)
        waiting_id = str(hostile["batch_id"])
        await c.rig.to_state(waiting_id, FlowState.AWAITING_AUTHORIZATION)
        paid_id = await pay(c.rig)
        await c.sign_in()

        page = await c.http.get(f"{c.url}/batches/{waiting_id}")
        assert page.status_code == 200
        assert "<script>alert(1)</script>" not in page.text and "<b>1</b>" not in page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text and "REF&lt;b&gt;1&lt;/b&gt;" in page.text
        assert "200100300" not in page.text and "****0300" in page.text  # masked
        assert "AUTHORIZATION_REQUIRED" in page.text
        link = re.search(r'id="approval-link" readonly value="([^"]+)"', page.text)
        assert link is not None and unescape(link[1]) == c.rig.approval_url(waiting_id)

        paid = await c.http.get(f"{c.url}/batches/{paid_id}?only=failed")
        assert "approval-link" not in paid.text  # the link is shown only while the batch waits
        rows = re.findall(r'<tr class="t-(\w+)"', paid.text)
        assert rows == ["FAILED"]
        assert "AC04" in paid.text and 'name="account_2"' in paid.text
        assert f"{c.rig.approval_url(paid_id).split('?t=')[1]}" not in paid.text

        listing = await c.http.get(f"{c.url}/", params={"status": "COMPLETED"})
        assert paid_id in listing.text and waiting_id not in listing.text
        found = await c.http.get(f"{c.url}/", params={"q": waiting_id[-8:].upper()})
        assert waiting_id in found.text and paid_id not in found.text
        assert re.search(r"AUTHORIZATION_REQUIRED <b>1</b>", found.text)
        bad = await c.http.get(f"{c.url}/", params={"from": "yesterday"})
        assert bad.status_code == 400 and "from must be a date" in bad.text

        overview = await c.http.get(f"{c.url}/overview", params={"day": c.rig.clock.now().date().isoformat()})
        assert overview.status_code == 200 and "<svg" in overview.text
        assert re.search(r"<td>COMPLETED</td><td class=\"num\">1</td>", overview.text)
        assert waiting_id in overview.text.split("Oldest batches awaiting approval")[1]


async def test_a_corrected_retry_waits_for_a_second_person_and_is_recorded(store: Store) -> None:
    async with console(store) as c:
        batch_id = await pay(c.rig)
        await c.sign_in()
        token = await c.csrf(f"/batches/{batch_id}")
        form = {"csrf": token, "batch_id": batch_id, "account_2": "200100399"}
        review = await c.http.post(f"{c.url}/retry", data=form)  # the confirmation step writes nothing
        retry_id = f"{batch_id}.retry-1"
        assert review.status_code == 200 and 'id="confirm-retry"' in review.text
        assert re.search(r'id="retry-count">1<', review.text) and "750.25 GTQ" in review.text
        assert "****0399" in review.text and "corrected" in review.text
        assert store.run(lambda tx: tx.flows.get(retry_id), write=False) is None
        answer = await c.http.post(f"{c.url}/retry", data={**form, "confirm": "yes"})
        assert answer.status_code == 303 and answer.headers["location"] == "/console/requests#request-1"
        assert store.run(lambda tx: tx.flows.get(retry_id), write=False) is None  # nothing before a second person
        waiting = await c.http.get(f"{c.url}/requests")
        assert "****9902" in waiting.text and "****0399" in waiting.text and "200100399" not in waiting.text
        assert 'id="approve-1"' not in waiting.text  # not for the requester
        own = await c.http.post(f"{c.url}/requests/1/approve", data={"csrf": token})
        assert own.status_code == 403 and "another approver" in unescape(own.text)

        viewer = await c.person("vera")
        refused = await viewer.http.post(f"{c.url}/retry", data={"csrf": await viewer.csrf("/"), "batch_id": batch_id})
        assert refused.status_code == 403 and "viewer" in refused.text
        bob = await c.person("bob")
        page = await bob.http.get(f"{c.url}/requests")
        assert 'id="approve-1"' in page.text
        approved = await bob.http.post(f"{c.url}/requests/1/approve", data={"csrf": await bob.csrf("/requests")})
        assert approved.status_code == 303, approved.text
        document = store.run(lambda tx: tx.flows.payload_document(retry_id), write=False)
        assert [t["destination_account"]["account_number"] for t in document["transactions"]] == ["200100399"]
        record = store.run(lambda tx: tx.operator.retry(retry_id), write=False)
        assert record is not None and record.requested_by == "ana"
        page = await c.http.get(f"{c.url}/batches/{retry_id}")
        assert f'href="/console/batches/{batch_id}" id="retry-of"' in page.text
        assert f"retry of {batch_id} requested by ana" in page.text  # the timeline names the operator
        original = await c.http.get(f"{c.url}/batches/{batch_id}")
        assert retry_id in original.text and "ana asked to retry 1 failed transfer(s)" in original.text

        shown = await c.http.get(f"{c.url}/batches/{retry_id}", params={"done": "retry"})
        assert f"Created {retry_id} from {batch_id}" in shown.text  # the server's own banner
        # Again: the failed transfer is in flight in retry-1, so nothing is created, and it is not a success.
        again = await c.http.post(f"{c.url}/retry", data={"csrf": token, "batch_id": batch_id, "confirm": "yes"})
        assert again.status_code == 409 and "nothing created" in again.text and 'class="problem"' in again.text
        assert store.run(lambda tx: tx.flows.get(f"{batch_id}.retry-2"), write=False) is None

        trail = await viewer.http.get(f"{c.url}/audit", params={"since": "2026-11-01"})
        actions = re.findall(r'<td class="actor">(\w+)</td><td>(\w*)</td>\s*<td class="action">(\w+)</td>', trail.text)
        assert actions == [
            ("ana", "operator", "sign_in"),
            ("ana", "operator", "retry_requested"),
            ("vera", "viewer", "sign_in"),
            ("bob", "approver", "sign_in"),
            ("bob", "approver", "request_approved"),
        ]


async def sign_in_from(address: str, url: str, name: str, password: str = PASSWORD) -> httpx.Response:
    """Sign in (the right password unless told) from another loopback address, on a fresh client."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(timeout=10, transport=transport) as http:
        form = await http.get(f"{url}/sign-in")
        token = CSRF.search(form.text)
        assert token is not None
        return await http.post(f"{url}/sign-in", data={"csrf": token[1], "name": name, "password": password})


async def test_the_sixth_wrong_password_locks_and_a_cookie_dies_at_sign_out(store: Store) -> None:
    async with console(store) as c:
        with structlog.testing.capture_logs() as logs:
            for _ in range(6):
                assert (await c.sign_in(password="not the password")).status_code == 401
            locked = await c.sign_in()  # the right password, but locked now
        assert locked.status_code == 429 and "locked until" in locked.text
        refusals = [e for e in logs if e["event"] == "console_sign_in_refused"]
        assert [(e["operator"], e["address"], e["failures"]) for e in refusals][-1] == ("ana", "127.0.0.1", 6)
        assert any(e["event"] == "console_sign_in_locked" and e["operator"] == "ana" for e in logs)
        # the address is locked too (bob from it), and the operator from any address (ana from 127.0.0.2)
        assert (await sign_in_from("127.0.0.1", c.url, "bob")).status_code == 429
        assert (await sign_in_from("127.0.0.2", c.url, "ana")).status_code == 429
        assert (await sign_in_from("127.0.0.2", c.url, "bob")).status_code == 303
        c.rig.clock.advance(61)  # the first lock lasts a minute
        signed = await c.sign_in()
        assert signed.status_code == 303
        cookie = c.http.cookies.get("dispersion_console")
        assert cookie is not None and (await c.http.get(f"{c.url}/")).status_code == 200
        out = await c.http.post(f"{c.url}/sign-out", data={"csrf": await c.csrf("/")})
        assert out.status_code == 303
        async with httpx.AsyncClient(timeout=10, cookies={"dispersion_console": cookie}) as copied:
            answer = await copied.get(f"{c.url}/")
            assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in"
        trail = store.run(lambda tx: tx.audit.since(c.rig.clock.now() - timedelta(hours=1)), write=False)
        assert [(e.action, e.address) for e in trail if e.actor == "ana"] == [
            *[("sign_in_failed", "127.0.0.1")] * 6,
            ("sign_in_refused", "127.0.0.1"),
            ("sign_in_refused", "127.0.0.2"),
            ("sign_in", "127.0.0.1"),
            ("sign_out", "127.0.0.1"),
        ]
        assert trail[5].detail["failures"] == 6 and trail[5].detail["locked_until"] is not None


async def test_a_password_change_ends_the_sessions_made_with_the_old_one(store: Store) -> None:
    async with engine_rig(store) as rig:
        sock, port = bound_socket()
        before, after = operator_auth(), operator_auth("a new password, long enough")
        apps = {"old": console_app(store, before, public_url=rig.public_url, clock=rig.clock)}
        apps["new"] = console_app(store, after, public_url=rig.public_url, clock=rig.clock)
        app = Starlette(routes=[Mount("/console", app=apps["old"]), Mount("/next", app=apps["new"])])
        async with serve(app, sock), httpx.AsyncClient(timeout=10) as http, AsyncExitStack() as stack:
            c = Console(rig, f"http://127.0.0.1:{port}/console", http, stack)
            assert (await c.sign_in()).status_code == 303
            cookie = http.cookies.get("dispersion_console")
            assert (await http.get(f"{c.url}/")).status_code == 200
            # the same session key, the same operator, another password: the old session is refused
            async with httpx.AsyncClient(timeout=10, cookies={"dispersion_console": str(cookie)}) as moved_client:
                moved = await moved_client.get(f"http://127.0.0.1:{port}/next/")
            assert moved.status_code == 303 and moved.headers["location"].endswith("/sign-in")


async def test_batches_are_paged_newest_first(store: Store) -> None:
    async with console(store) as c:
        ids = []
        for number in range(55):
            document = batch(f"page-{number:03d}", transfers=(("200100300", "1.00"),))
            document["file_reference"] = f"REF-{number:03d}"
            await c.rig.submit(document)
            ids.append(document["batch_id"])
            c.rig.clock.advance(1)
        await c.sign_in()
        first = await c.http.get(f"{c.url}/")
        shown = re.findall(r'class="batch-link">([^<]+)</a>', first.text)
        assert shown == ids[::-1][:50]  # newest first, 50 a page
        assert "55 batch(es)" in first.text and 'id="older"' in first.text and 'id="newer"' not in first.text
        second = await c.http.get(f"{c.url}/", params={"page": "1"})
        assert re.findall(r'class="batch-link">([^<]+)</a>', second.text) == ids[::-1][50:]
        assert 'id="older"' not in second.text and 'id="newer"' in second.text
        by_reference = await c.http.get(f"{c.url}/", params={"q": "ref-007"})
        assert re.findall(r'class="batch-link">([^<]+)</a>', by_reference.text) == ["page-007"]
        wildcard = await c.http.get(f"{c.url}/", params={"q": "page_0"})  # `_` is a character, not a wildcard
        assert re.findall(r'class="batch-link">([^<]+)</a>', wildcard.text) == []


_FUZZ_TEXT = st.one_of(
    st.text(alphabet=string.printable + "é\u202e\x00\ud800", max_size=20),
    st.sampled_from(["9999-12-31", "0001-01-01", "1899-12-31", "2026-02-30", "99999"]),
)


async def test_fuzzed_console_requests_get_a_4xx_never_a_5xx(store: Store) -> None:
    async with console(store) as c:
        batch_id = await pay(c.rig)
        assert (await c.sign_in()).status_code == 303
        csrf = await c.csrf("/")
        for path in ("/?to=9999-12-31", "/?from=0001-01-01", "/overview?day=9999-12-31", "/overview?day=0001-01-01"):
            answer = await c.http.get(f"{c.url}{path}")
            assert answer.status_code == 400 and "years 1900 to 8999" in unescape(answer.text), (path, answer.text)
        cookies = dict(c.http.cookies)
        seen: list[int] = []

        @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(
            path=st.one_of(
                st.sampled_from(
                    ["/", "/overview", "/dead-letters", f"/batches/{batch_id}", "/retry", "/requests", "/audit"]
                ),
                st.builds(lambda t: f"/requests/{quote(t, safe='', errors='surrogatepass')}/approve", _FUZZ_TEXT),
                st.builds(lambda t: f"/batches/{quote(t, safe='', errors='surrogatepass')}", _FUZZ_TEXT),
                st.builds(lambda t: f"/dead-letters/{quote(t, safe='', errors='surrogatepass')}", _FUZZ_TEXT),
                st.builds(lambda t: f"/dead-letters/{quote(t, safe='', errors='surrogatepass')}/replay", _FUZZ_TEXT),
            ),
            method=st.sampled_from(["GET", "POST"]),
            params=st.dictionaries(
                st.sampled_from(["status", "from", "to", "q", "page", "day", "sort", "after", "integration", "since"]),
                _FUZZ_TEXT,
                max_size=3,
            ),
            form=st.dictionaries(st.sampled_from(["batch_id", "reason", "account_2", "force"]), _FUZZ_TEXT, max_size=3),
        )
        def fuzz(path: str, method: str, params: dict[str, str], form: dict[str, str]) -> None:
            query = "&".join(f"{k}={quote(v, safe='', errors='surrogatepass')}" for k, v in params.items())
            body = "&".join(
                f"{k}={quote(v, safe='', errors='surrogatepass')}" for k, v in {**form, "csrf": csrf}.items()
            )
            with httpx.Client(timeout=30, cookies=cookies) as client:
                answer = client.request(
                    method,
                    f"{c.url}{path}?{query}",
                    content=body.encode() if method == "POST" else None,
                    headers={"Content-Type": "application/x-www-form-urlencoded"} if method == "POST" else {},
                )
            seen.append(answer.status_code)
            assert answer.status_code < 500, (method, path, params, form, answer.text[:300])

        await asyncio.to_thread(fuzz)
        assert len(seen) >= 100 and 400 in seen


async def test_the_batch_page_withdraws_confirms_a_held_batch_and_shows_a_conflict(store: Store) -> None:
    """Issue 18: the Withdraw button (with a reason) and the confirmation of a batch held as a possible duplicate
    payroll, both recorded with the operator's name; a conflicting submission shown on the batch's page."""
    from processor.engine.intake import Guard, accept_batch
    from processor.store.lifecycle import Verdict

    async with console(store) as c:
        rows = [("200100300", "100.00"), ("200100301", "200.00")]
        guard = Guard(public_url=c.rig.public_url)
        for batch_id in ("NOV-A", "NOV-B"):
            await accept_batch(store, batch(batch_id, rows), now=c.rig.clock.now(), guard=guard)
        await c.sign_in()  # ana, an operator: sees the hold, may not confirm it
        page = await c.http.get(f"{c.url}/batches/NOV-B")
        assert 'id="duplicate-hold"' in page.text and "possible duplicate payroll of batch NOV-A" in page.text
        assert 'id="confirm-duplicate-form"' not in page.text and "the approver role confirms it" in page.text
        token = await c.csrf("/batches/NOV-B")
        refused = await c.http.post(f"{c.url}/confirm-duplicate", data={"csrf": token, "batch_id": "NOV-B"})
        assert refused.status_code == 403 and c.rig.flow("NOV-B").duplicate_confirmed_by is None
        bob = await c.person("bob")  # an approver
        answer = await bob.http.post(
            f"{c.url}/confirm-duplicate", data={"csrf": await bob.csrf("/batches/NOV-B"), "batch_id": "NOV-B"}
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/console/batches/NOV-B"
        assert c.rig.flow("NOV-B").duplicate_confirmed_by == "bob"
        page = await c.http.get(f"{c.url}/batches/NOV-B")
        assert 'id="duplicate-confirmed"' in page.text and "confirmed by bob" in page.text
        audit = store.run(lambda tx: tx.audit.since(c.rig.clock.now() - timedelta(days=1)), write=False)
        assert [(row.action, row.actor, row.subject) for row in audit][-1] == ("confirm-duplicate", "bob", "NOV-B")

        vera = await c.person("vera")  # a viewer may not withdraw
        page = await vera.http.get(f"{c.url}/batches/NOV-A")
        assert 'id="withdraw-form"' not in page.text
        viewer = await vera.http.post(
            f"{c.url}/withdraw",
            data={"csrf": await vera.csrf("/batches/NOV-A"), "batch_id": "NOV-A", "reason": "no"},
        )
        assert viewer.status_code == 403 and c.rig.flow("NOV-A").state == FlowState.RECEIVED

        refused = await c.http.post(f"{c.url}/withdraw", data={"csrf": token, "batch_id": "NOV-A", "reason": ""})
        assert refused.status_code == 400 and c.rig.flow("NOV-A").state == FlowState.RECEIVED
        answer = await c.http.post(
            f"{c.url}/withdraw", data={"csrf": token, "batch_id": "NOV-A", "reason": "sent by mistake"}
        )
        assert answer.status_code == 303
        assert c.rig.flow("NOV-A").state == FlowState.WITHDRAWN and c.rig.flow("NOV-A").withdrawn_by == "ana"
        page = await c.http.get(f"{c.url}/batches/NOV-A")
        assert 'id="withdrawn"' in page.text and "Withdrawn by ana at " in page.text
        assert "dispersion submit EXPORT --batch-id NOV-A" in page.text and 'id="withdraw-form"' not in page.text
        again = await c.http.post(f"{c.url}/withdraw", data={"csrf": token, "batch_id": "NOV-A", "reason": "x"})
        assert again.status_code == 409 and "already withdrawn by ana" in unescape(again.text)

        conflict = Verdict(
            "payroll.batches",
            3,
            17,
            "NOV-B",
            "conflict",
            "transfers: 1 changed (#1 amount 200.00 -> 250.00)",
            1,
            c.rig.clock.now(),
        )
        store.run(lambda tx: tx.lifecycle.record_verdict(conflict))
        page = await c.http.get(f"{c.url}/batches/NOV-B")
        assert 'id="conflicts"' in page.text and "payroll.batches/3/17" in page.text
        assert "#1 amount 200.00 -&gt; 250.00" in page.text


async def test_an_unconfigured_console_says_how_to_turn_it_on() -> None:
    sock, port = bound_socket()
    app = Starlette(routes=[Mount("/console", app=console_off())])
    async with serve(app, sock), httpx.AsyncClient(timeout=10) as http:
        for path in ("/console/", "/console/batches/X"):
            page = await http.get(f"http://127.0.0.1:{port}{path}")
            assert page.status_code == 404 and "The operator console is off" in page.text
            assert "[console]" in page.text and "dispersion console hash-password" in page.text
            assert page.headers["x-frame-options"] == "DENY"
        style = await http.get(f"http://127.0.0.1:{port}/console/static/console.css")
        assert style.status_code == 200


async def test_wrong_passwords_sent_at_once_are_counted_one_by_one(store: Store) -> None:
    async with console(store) as c:
        burst = [sign_in_from("127.0.0.3", c.url, "vera", "not the password") for _ in range(10)]
        codes = sorted(answer.status_code for answer in await asyncio.gather(*burst))
        assert codes == [401] * 6 + [429] * 4  # the sixth locks, whatever arrived at the same moment
