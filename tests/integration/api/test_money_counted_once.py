"""Money counted once (issue 20), over real HTTP on loopback with the sandbox bank and the engine on the real store
(SQLite and PostgreSQL): four payrolls (one paid but for a closed account, one whose failure a retry paid, one
whose retry failed again and whose retry of that retry is waiting, one waiting for approval) add up to the same
paid / failed / outstanding / in progress to the cent three ways: the console's month-end page, the report's
grand totals (admin API) and the status events. The original batch then reads as one payroll with its retries,
the retry form offers only what is outstanding, errors name the row and employee, and search finds an employee."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from html import unescape

import httpx
from console_support import CSRF, PASSWORD, operator_auth
from engine_support import Rig, batch, bound_socket, engine_rig, pay, serve
from starlette.applications import Starlette
from starlette.routing import Mount

from processor.api.admin import admin_app
from processor.api.admin_input import token_digest
from processor.api.console.app import console_app
from processor.domain.file_states import FlowState
from processor.domain.ledger import month_window
from processor.domain.roles import AdminToken, Controls, Role
from processor.store import Store

TOKEN = "admin-token-for-tests-0123456789"
TOKENS = {"admin": AdminToken("admin", token_digest(TOKEN), Role.ADMIN)}
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BUCKETS = ("paid", "failed", "outstanding", "in_progress")


@dataclass
class Both:
    rig: Rig
    console: str
    admin: httpx.AsyncClient
    http: httpx.AsyncClient

    async def csrf(self, path: str) -> str:
        page = await self.http.get(f"{self.console}{path}")
        found = CSRF.search(page.text)
        assert found is not None, page.text
        return found.group(1)

    async def retry(self, batch_id: str, **fields: str) -> httpx.Response:
        form = {"csrf": await self.csrf(f"/batches/{batch_id}"), "batch_id": batch_id, **fields}
        return await self.http.post(f"{self.console}/retry", data=form)


@asynccontextmanager
async def both(store: Store) -> AsyncIterator[Both]:
    async with engine_rig(store) as rig:
        sock, port = bound_socket()
        integrations = set(rig.config.integrations)
        app = Starlette(
            routes=[
                Mount(
                    "/console",
                    app=console_app(  # one person corrects and retries here: no second pair of eyes
                        store,
                        operator_auth(),
                        public_url=rig.public_url,
                        clock=rig.clock,
                        integrations=integrations,
                        controls=Controls(four_eyes=False),
                    ),
                ),
                Mount(
                    "/admin",
                    app=admin_app(store, tokens=TOKENS, integrations=integrations, clock=rig.clock),
                ),
            ]
        )
        base = f"http://127.0.0.1:{port}"
        async with (
            serve(app, sock),
            httpx.AsyncClient(base_url=f"{base}/admin", timeout=30) as admin,
            httpx.AsyncClient(timeout=30) as http,
        ):
            c = Both(rig, f"{base}/console", admin, http)
            form = await http.get(f"{c.console}/sign-in")
            token = CSRF.search(form.text)
            assert token is not None
            signed = await http.post(
                f"{c.console}/sign-in", data={"csrf": token.group(1), "name": "ana", "password": PASSWORD}
            )
            assert signed.status_code == 303
            yield c


async def _approve(rig: Rig, batch_id: str) -> FlowState:
    await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
    approval = await rig.approve(rig.approval_url(batch_id))
    assert approval.callback is not None and approval.callback.status_code == 200
    return FlowState((await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)).state)


def _from_events(rig: Rig, batch_ids: list[str]) -> dict[str, Decimal]:
    """Paid / failed / outstanding / in progress added up from the status events alone."""
    zero = Decimal("0.00")
    sums = dict.fromkeys(BUCKETS, zero)
    retried_away = zero
    for batch_id in batch_ids:
        last = rig.events(batch_id)[-1].payload
        is_retry = last.get("retry_of") is not None
        if last["status"] in ("COMPLETED", "FAILED"):
            sums["paid"] += Decimal(str(last["amount_completed"] or 0))
            if not is_retry:
                sums["failed"] += Decimal(str(last["amount_failed"] or 0))
            else:
                retried_away += Decimal(str(last["amount_completed"] or 0))
        else:  # not ended: its control sum is in progress (and, for a retry, no longer outstanding)
            sums["in_progress"] += Decimal(str(last["control_sum"]))
            if is_retry:
                retried_away += Decimal(str(last["control_sum"]))
    sums["outstanding"] = sums["failed"] - retried_away
    return sums


async def _retried_twice(c: Both) -> str:
    """A payroll whose one failure was retried, failed again, and was retried from the retry batch's page (the
    second retry left waiting for approval); its batch id."""
    rig = c.rig
    third_doc = batch(transfers=(("200100300", "40.00"), ("200109902", "100.00")))
    third = str(third_doc["batch_id"])
    await rig.submit(third_doc)
    assert await _approve(rig, third) == FlowState.COMPLETED
    assert (await c.retry(third, confirm="yes")).status_code == 303  # same closed account: fails again
    assert await _approve(rig, f"{third}.retry-1") == FlowState.FAILED  # its only transfer rejected: file failed
    # A bad correction names the row and the employee, not a position in the retry batch.
    bad = await c.retry(f"{third}.retry-1", account_1="2001-00377")
    assert bad.status_code == 400 and "row #1 / E-0001" in unescape(bad.text), bad.text
    # The retry's failure is retried from the retry batch's own page (a retry of a retry's failures).
    page = await c.http.get(f"{c.console}/batches/{third}.retry-1")
    assert 'id="correction-1"' in page.text and 'id="transfer-1"' in page.text  # the original transfer number
    assert 'id="transfer-0"' not in page.text
    made = await c.retry(f"{third}.retry-1", account_1="200100377", confirm="yes")
    assert made.headers["location"] == f"/console/batches/{third}.retry-2?done=retry", made.text
    await rig.to_state(f"{third}.retry-2", FlowState.AWAITING_AUTHORIZATION)  # left waiting: in progress
    return third


async def _report_and_overview_agree(c: Both, ids: list[str], expected: dict[str, Decimal]) -> None:
    """The report's grand totals, the month's totals and the console's month-end row say `expected`."""
    month = c.rig.clock.now().strftime("%Y-%m")
    since, until = month_window(month)
    window = {"since": since.date().isoformat(), "until": until.date().isoformat()}  # bare days: midnight UTC
    report = await c.admin.get("/report", params=window, headers=AUTH)
    assert report.status_code == 200, report.text
    (grand,) = report.json()["grand_totals"]
    assert grand["currency"] == "GTQ" and grand["batches"] == len(ids), str(grand)
    assert {name: Decimal(grand[name]["amount"]) for name in BUCKETS} == expected
    totals = await c.admin.get("/totals", params={"month": month}, headers=AUTH)
    assert totals.json()["totals"] == report.json()["grand_totals"]

    overview = await c.http.get(f"{c.console}/overview", params={"month": month})
    row = re.search(r'<tr id="money-GTQ">(.*?)</tr>', overview.text, re.S)
    assert row is not None, overview.text
    shown = {
        name: Decimal(re.search(rf'm-{name}"[^>]*><b>([\d,.]+)</b>', row.group(1)).group(1).replace(",", ""))  # type: ignore[union-attr]
        for name in BUCKETS
    }
    assert shown == expected


async def _search_finds_the_employee(c: Both, first: str, second: str, third: str) -> None:
    """Search by employee reference, last digits of the account, amount."""
    found = await c.admin.get("/find", params={"employee": "e-0002"}, headers=AUTH)
    outcomes = {(t["batch_id"], t["outcome"], t["by"]) for t in found.json()["transfers"]}
    assert (second, "PAID", f"{second}.retry-1") in outcomes and (first, "OUTSTANDING", None) in outcomes
    by_account = await c.admin.get("/find", params={"account": "9902", "amount": "100.00"}, headers=AUTH)
    assert [(t["batch_id"], t["index"], t["outcome"]) for t in by_account.json()["transfers"]] == [
        (third, 1, "IN_PROGRESS")
    ]
    searched = await c.http.get(f"{c.console}/", params={"q": "E-0002"})
    assert searched.text.count('class="found-row"') == 3 and "200109902" not in searched.text


async def test_paid_failed_outstanding_agree_three_ways_and_the_original_reads_as_one_payroll(store: Store) -> None:
    async with both(store) as c:
        rig = c.rig
        first = await pay(rig)  # 3500.50 paid, 750.25 failed (closed account), never retried
        second = await pay(rig)  # its failure paid by a corrected retry
        review = await c.retry(second, account_2="200100399")
        assert review.status_code == 200 and re.search(r'id="retry-count">1<', review.text)
        done = await c.retry(second, account_2="200100399", confirm="yes")
        assert done.status_code == 303, done.text
        assert await _approve(rig, f"{second}.retry-1") == FlowState.COMPLETED

        third = await _retried_twice(c)

        fourth_doc = batch()
        fourth = str(fourth_doc["batch_id"])
        await rig.submit(fourth_doc)
        await rig.to_state(fourth, FlowState.AWAITING_AUTHORIZATION)

        ids = [first, second, f"{second}.retry-1", third, f"{third}.retry-1", f"{third}.retry-2", fourth]
        events = _from_events(rig, ids)
        expected = {
            "paid": Decimal("3500.50") * 2 + Decimal("750.25") + Decimal("40.00"),
            "failed": Decimal("750.25") * 2 + Decimal("100.00"),
            "outstanding": Decimal("750.25"),
            "in_progress": Decimal("100.00") + Decimal("4250.75"),
        }
        assert events == expected

        await _report_and_overview_agree(c, ids, expected)

        # The original after its retry: its failed transfer reads "paid by" the retry, nothing is outstanding,
        # and no retry form is offered.
        original = await c.http.get(f"{c.console}/batches/{second}")
        assert f'paid by <a href="/console/batches/{second}.retry-1">' in original.text
        assert 'id="retry-form"' not in original.text
        assert re.search(r'id="payroll-outstanding"[^>]*>outstanding 0: 0.00 GTQ', original.text)
        listing = await c.http.get(f"{c.console}/")
        assert re.search(
            rf"{first}</a></td>\s*<td[^>]*><span class=\"pill s-COMPLETED\">COMPLETED</span> "
            r"<span class=\"pill s-FAILED\">1 failed</span>",
            listing.text,
        )

        await _search_finds_the_employee(c, first, second, third)
