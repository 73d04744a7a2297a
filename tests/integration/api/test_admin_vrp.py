"""Flow B in the admin API and `dispersion report`, over real HTTP on loopback, with the sandbox bank process and the
VRP engine on the real store (SQLite and PostgreSQL): a mandate with two payments completed and one refused over its
monthly limit is listed with what is used and left of the limit this period (the limit ledger), shown with its
payments and timeline, its payments listed by mandate and time, and reported apart from file payments with totals
per mandate and currency; bad parameters are 400, unknown mandates 404."""

from __future__ import annotations

import asyncio
import csv
import io
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import httpx
from engine_support import bound_socket, serve
from sandbox_process import SandboxProcess
from starlette.applications import Starlette
from starlette.routing import Mount
from vrp_engine_support import (
    VRP_DELAY,
    VrpRig,
    mandate_request,
    payment_request,
    vrp_rig,
    vrp_sandbox,  # noqa: F401  (module fixture)
)

from processor.api.admin import admin_app
from processor.api.admin_input import token_digest
from processor.api.console.mandate_views import mandate_page, mandates_page
from processor.domain.roles import AdminToken, Role
from processor.store import Store
from processor.store.vrp import MandateFilter

TOKEN = "admin-token-for-vrp-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def admin_vrp_rig(sandbox: SandboxProcess, store: Store) -> AsyncIterator[tuple[VrpRig, httpx.AsyncClient]]:
    """The VRP rig plus the admin API served on its own loopback port (under `/admin`, as the processor mounts it)."""
    async with vrp_rig(sandbox, store) as rig:
        sock, port = bound_socket()
        tokens = {"vera": AdminToken("vera", token_digest(TOKEN), Role.VIEWER)}  # reading needs no more than a viewer
        app = admin_app(store, tokens=tokens, integrations={"sandbox"}, clock=rig.clock)
        base = f"http://127.0.0.1:{port}/admin"
        mounted = Starlette(routes=[Mount("/admin", app=app)])
        async with serve(mounted, sock), httpx.AsyncClient(base_url=base, timeout=30) as http:
            yield rig, http


async def _three_payments(rig: VrpRig) -> str:
    mandate = await rig.authorised_mandate()  # 500.00 a payment, 1000.00 a calendar month
    for amount in ("250.00", "300.00"):
        outcome = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, amount))
        assert outcome.payment is not None
        done = await rig.vrp.follow_payment(outcome.payment.payment_id, max_seconds=10 * VRP_DELAY)
        assert done.state == "COMPLETED"
    refused = await rig.vrp.submit_payment(payment_request(mandate.mandate_id, "500.00"))
    assert refused.payment is not None and refused.payment.state == "REFUSED"
    return mandate.mandate_id


async def test_mandates_and_their_payments_through_the_admin_api(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    async with admin_vrp_rig(vrp_sandbox, store) as (rig, http):
        mandate_id = await _three_payments(rig)
        listed = await http.get("/mandates", params={"q": mandate_id[-8:].upper()}, headers=AUTH)
        assert listed.status_code == 200, listed.text
        [row] = listed.json()["mandates"]
        assert row["mandate_id"] == mandate_id and row["status"] == "AUTHORIZED"
        assert row["creditor_account"] == "****5698 Savings pot"
        assert row["max_individual_amount"] == "500.00"
        [limit] = row["periodic_limits"]
        assert (limit["period_type"], limit["period_alignment"], limit["amount"]) == ("Month", "Calendar", "1000.00")
        assert (limit["used"], limit["left"]) == ("550.00", "450.00")
        assert limit["next_period_start"].endswith("-01T00:00:00.000Z")
        assert "08080021325698" not in listed.text
        none = await http.get("/mandates", params={"status": "REVOKED", "q": mandate_id}, headers=AUTH)
        assert none.json()["mandates"] == []
        bad = await http.get("/mandates", params={"status": "PAID"}, headers=AUTH)
        assert bad.status_code == 400 and "unknown state" in bad.json()["error"]

        one = await http.get(f"/mandates/{mandate_id}", headers=AUTH)
        assert one.status_code == 200, one.text
        body = one.json()
        assert [(p["amount"], p["state"]) for p in body["payments"]] == [
            ("250.00", "COMPLETED"),
            ("300.00", "COMPLETED"),
            ("500.00", "REFUSED"),
        ]
        assert "PeriodicLimits[0]" in body["payments"][2]["reason"]
        assert [e["status"] for e in body["timeline"]][:2] == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]
        assert "LIMIT_EXCEEDED" in [e["status"] for e in body["timeline"]]
        assert (await http.get("/mandates/m-unknown", headers=AUTH)).status_code == 404

        since = (rig.clock.now() - timedelta(hours=1)).isoformat()
        paid = await http.get("/vrp-payments", params={"mandate": mandate_id, "since": since}, headers=AUTH)
        assert paid.status_code == 200, paid.text
        assert [p["amount"] for p in paid.json()["payments"]] == ["250.00", "300.00", "500.00"]
        later = (rig.clock.now() + timedelta(hours=1)).isoformat()
        assert (await http.get("/vrp-payments", params={"since": later}, headers=AUTH)).json()["payments"] == []
        unknown = await http.get("/vrp-payments", params={"mandate": "m-unknown"}, headers=AUTH)
        assert unknown.status_code == 404
        assert (await http.get("/vrp-payments", params={"since": "yesterday"}, headers=AUTH)).status_code == 400
        assert (await http.get("/mandates")).status_code == 401


async def test_the_report_keeps_vrp_payments_apart_with_totals_per_mandate_and_currency(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
    tmp_path: Path,
) -> None:
    async with admin_vrp_rig(vrp_sandbox, store) as (rig, http):
        mandate_id = await _three_payments(rig)
        # A mandate with one payment whose amount has three decimals: INVALID, listed with what it asked for.
        other = (await rig.vrp.submit_mandate(mandate_request(now=rig.clock.now()))).mandate.mandate_id
        invalid = await rig.vrp.submit_payment(payment_request(other, "1.005"))
        assert invalid.payment is not None and invalid.payment.state == "INVALID"
        since, until = rig.clock.now() - timedelta(hours=1), rig.clock.now() + timedelta(hours=1)
        answer = await http.get(
            "/report", params={"since": since.isoformat(), "until": until.isoformat()}, headers=AUTH
        )
        assert answer.status_code == 200, answer.text
        vrp = answer.json()["vrp"]
        mine = [p for p in vrp["payments"] if p["mandate_id"] == mandate_id]
        assert [(p["amount"], p["currency"], p["state"]) for p in mine] == [
            ("250.00", "GBP", "COMPLETED"),
            ("300.00", "GBP", "COMPLETED"),
            ("500.00", "GBP", "REFUSED"),
        ]
        [total] = [t for t in vrp["totals"] if t["mandate_id"] == mandate_id]
        assert total["currency"] == "GBP" and total["payments"] == 3 and total["amount_completed"] == "550.00"
        assert total["by_state"] == {
            "COMPLETED": {"payments": 2, "amount": "550.00"},
            "REFUSED": {"payments": 1, "amount": "500.00"},
        }
        assert all(line.get("mandate_id") is None for line in answer.json()["lines"])  # file payments apart
        [asked] = [p for p in vrp["payments"] if p["mandate_id"] == other]
        assert (asked["amount"], asked["requested_amount"], asked["state"]) == (None, "1.005", "INVALID")
        assert "amount" in asked["reason"], asked
        [one] = [t for t in vrp["totals"] if t["mandate_id"] == other]
        assert one["by_state"] == {"INVALID": {"payments": 1, "amount": None}}

        config = tmp_path / "dispersion.toml"
        config.write_text(f'[admin]\nurl = "{str(http.base_url).rstrip("/").removesuffix("/admin")}"\n')
        command = [sys.executable, "-m", "processor.cli", "report", "--config", str(config), "--vrp"]
        command += ["--since", since.isoformat(), "--until", until.isoformat()]
        env = {**os.environ, "DISPERSION_ADMIN_TOKEN": TOKEN}
        done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        print(done.stdout + done.stderr)  # the command's own account (docs/operations.md quotes it)
        rows = list(csv.DictReader(io.StringIO(done.stdout)))
        assert [
            (r["instruction_id"] != "", r["amount"], r["state"]) for r in rows if r["mandate_id"] == mandate_id
        ] == [
            (True, "250.00", "COMPLETED"),
            (True, "300.00", "COMPLETED"),
            (True, "500.00", "REFUSED"),
        ]
        assert f"vrp total {mandate_id} GBP: 3 payments (2 COMPLETED 550.00, 1 REFUSED 500.00)" in done.stderr
        assert [(r["amount"], r["state"]) for r in rows if r["mandate_id"] == other] == [("", "INVALID")]
        assert f"vrp total {other} GBP: 1 payment (1 INVALID)\n" in done.stderr


async def test_an_invalid_mandate_whose_request_does_not_parse_is_listed_and_shown(
    vrp_sandbox: SandboxProcess,  # noqa: F811
    store: Store,
) -> None:
    # Stored INVALID as it came (a currency, an amount and an account that do not parse): the listing, the mandate
    # and the console's pages still answer, the account masked, nothing made up for what did not parse.
    async with admin_vrp_rig(vrp_sandbox, store) as (rig, http):
        account = {"scheme_name": "UK.OBIE.SortCodeAccountNumber", "identification": "9999991234567", "name": "Pot"}
        request = mandate_request(now=rig.clock.now(), currency="XX", max_individual_amount="abc")
        outcome = await rig.vrp.submit_mandate({**request, "creditor_account": account})
        mandate_id = outcome.mandate.mandate_id
        assert outcome.mandate.state == "INVALID"

        listed = await http.get("/mandates", params={"q": mandate_id}, headers=AUTH)
        assert listed.status_code == 200, listed.text
        [row] = listed.json()["mandates"]
        assert (row["status"], row["creditor_account"]) == ("INVALID", "****4567 Pot")
        assert row["max_individual_amount"] is None and row["periodic_limits"] == []
        one = await http.get(f"/mandates/{mandate_id}", headers=AUTH)
        assert one.status_code == 200, one.text
        assert [e["status"] for e in one.json()["timeline"]] == ["INVALID"]
        assert "9999991234567" not in listed.text + one.text

        now, url = rig.clock.now(), rig.config.processor.public_url
        page = store.run(lambda tx: mandate_page(tx, mandate_id, public_url=url, now=now), write=False)
        assert page is not None and page.view.creditor == "****4567 Pot" and page.terminal
        listing = store.run(lambda tx: mandates_page(tx, MandateFilter(text=mandate_id), 0, now), write=False)
        assert [v.mandate.mandate_id for v in listing.rows] == [mandate_id]
