"""The admin API (processor/api/admin.py) over real HTTP on loopback, with the sandbox bank and the engine on the
real store (SQLite and PostgreSQL):

- a batch that completed with a closed account shows that transfer FAILED (AC04); a retry with a corrected account
  is a new batch `ID.retry-1` of that transfer only, with `retry_of`, paid through its own approval; the original
  stays as it was; a second request while the retry runs, or after it paid, creates nothing;
- the report's totals per batch and currency are the status events' amounts;
- every endpoint refuses a missing or wrong token (401) and a fuzz of paths, methods, parameters and bodies never
  gets a 5xx.
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
import os
import string
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from engine_support import Rig, batch, bound_socket, engine_rig, pay, serve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import Mount

import schemas
from processor.api.admin import admin_app
from processor.api.admin_input import token_digest
from processor.domain.file_states import FlowState
from processor.domain.roles import AdminToken, ChangedAccounts, Controls, Role
from processor.engine.intake import IntakeResult, accept_batch, prepare_batch, store_batch
from processor.store import Store
from producers.relay import outbox_record
from schemas.topics import STATUS_TOPIC

TOKEN = "admin-token-for-tests-0123456789"  # the older single [admin] token: named admin, the admin role
ANA, BOB, VERA = "ana-operator-token-0123456789", "bob-approver-token-0123456789", "vera-viewer-token-0123456789"
TOKENS = {
    name: AdminToken(name, token_digest(token), role)
    for name, token, role in (
        ("admin", TOKEN, Role.ADMIN),
        ("ana", ANA, Role.OPERATOR),
        ("bob", BOB, Role.APPROVER),
        ("vera", VERA, Role.VIEWER),
    )
}


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of a token."""
    return {"Authorization": f"Bearer {token}"}


def mounted(app: Starlette) -> Starlette:
    """The admin app under `/admin`, as the processor mounts it."""
    return Starlette(routes=[Mount("/admin", app=app)])


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def admin_rig(store: Store) -> AsyncIterator[tuple[Rig, httpx.AsyncClient]]:
    """The engine rig plus the admin API served on its own loopback port; a client with its base URL."""
    async with engine_rig(store) as rig:
        sock, port = bound_socket()
        app = admin_app(store, tokens=TOKENS, integrations={"sandbox"}, clock=rig.clock)
        base = f"http://127.0.0.1:{port}/admin"
        async with serve(mounted(app), sock), httpx.AsyncClient(base_url=base, timeout=30) as http:
            yield rig, http


async def refuse_wrong_retries(http: httpx.AsyncClient, batch_id: str, fix: dict[str, object]) -> None:
    """A correction of a transfer that did not fail, a viewer, and an operator posing as another are refused."""
    refused = await http.post(
        f"/batches/{batch_id}/retry", json={"corrections": [{"index": 0, "account_number": "1"}]}, headers=AUTH
    )
    assert refused.status_code == 400 and "did not fail" in refused.json()["error"]
    viewer = await http.post(f"/batches/{batch_id}/retry", json=fix, headers=bearer(VERA))
    assert viewer.status_code == 403 and "viewer" in viewer.json()["error"]
    posing = await http.post(f"/batches/{batch_id}/retry", json={**fix, "requested_by": "bob"}, headers=bearer(ANA))
    assert posing.status_code == 403 and "requested_by" in posing.json()["error"]


async def ask_and_approve_retry(rig: Rig, http: httpx.AsyncClient, batch_id: str, fix: dict[str, object]) -> str:
    """ana asks for the corrected retry, bob approves it (not ana herself, not a viewer); the retry batch's id."""
    asked = await http.post(f"/batches/{batch_id}/retry", json={**fix, "requested_by": "ana"}, headers=bearer(ANA))
    assert asked.status_code == 202, asked.text
    request = asked.json()["request"]
    assert asked.json()["retry_batch_id"] is None and request["state"] == "PENDING"
    assert request["corrections"] == [
        {
            "index": 2,
            "employee_reference": "E-0002",
            "amount": "750.25",
            "currency": "GTQ",
            "old_account": "****9902",
            "new_account": "****0303",
        }
    ]
    assert "200100303" not in asked.text
    assert (await http.get(f"/batches/{batch_id}.retry-1", headers=AUTH)).status_code == 404
    assert rig.count("file_consent") == 1  # the original's only
    pending = (await http.get("/requests", params={"state": "PENDING"}, headers=bearer(VERA))).json()["requests"]
    assert [r["id"] for r in pending] == [request["id"]]
    own = await http.post(f"/requests/{request['id']}/approve", headers=bearer(ANA))
    assert own.status_code == 403 and "another approver" in own.json()["error"]
    not_approver = await http.post(f"/requests/{request['id']}/approve", headers=bearer(VERA))
    assert not_approver.status_code == 403
    approved = await http.post(f"/requests/{request['id']}/approve", headers=bearer(BOB))
    assert approved.status_code == 200, approved.text
    assert approved.json()["state"] == "APPROVED" and approved.json()["decided_by"] == "bob"
    retry_id: str = approved.json()["outcome"]
    assert retry_id == f"{batch_id}.retry-1"
    twice = await http.post(f"/requests/{request['id']}/approve", headers=AUTH)
    assert twice.status_code == 409
    return retry_id


async def check_retry_paid_and_original_untouched(
    rig: Rig, http: httpx.AsyncClient, batch_id: str, retry_id: str, before: dict[str, Any]
) -> None:
    """The retry paid the corrected transfer; the original is as it was, and reads as paid in full."""
    retried = (await http.get(f"/batches/{retry_id}", headers=AUTH)).json()
    assert retried["retry_of"] == batch_id
    assert [(t["account"], t["amount"], t["status"]) for t in retried["transfers"]] == [
        ("****0303", "750.25", "COMPLETED")
    ]
    completed = next(e for e in rig.events(retry_id) if e.status == "COMPLETED")
    assert completed.payload["retry_of"] == batch_id
    assert (completed.payload["transfers_completed"], completed.payload["transfers_failed"]) == (1, 0)
    after = (await http.get(f"/batches/{batch_id}", headers=AUTH)).json()
    outcomes = [(t.pop("outcome"), t.pop("paid_by")) for t in after["transfers"]]
    for line in before["transfers"]:
        del line["outcome"], line["paid_by"]
    assert after["transfers"] == before["transfers"]  # the original is untouched ...
    assert outcomes == [("PAID", batch_id), ("PAID", batch_id), ("PAID", retry_id)]  # ... and reads as paid
    assert after["payroll"]["totals"]["outstanding"] == {"transfers": 0, "amount": "0.00"}
    assert after["payroll"]["totals"]["paid"] == {"transfers": 3, "amount": "4250.75"}
    assert after["retries"] == [{"batch_id": retry_id, "number": 1, "transfer_indexes": [2]}]
    assert rig.count("file_payment") == 2  # the original and the retry, nothing else


async def check_retry_audit_trail(http: httpx.AsyncClient, batch_id: str) -> None:
    """The audit trail names who asked and who approved, with the old account masked and the new one absent."""
    trail = (await http.get("/audit", params={"since": "2026-01-01T00:00:00Z"}, headers=bearer(VERA))).json()
    actions = [(e["actor"], e["role"], e["action"], e["subject"]) for e in trail["entries"]]
    assert actions == [
        ("ana", "operator", "retry_requested", batch_id),
        ("bob", "approver", "request_approved", batch_id),
    ]
    first, second = trail["entries"]
    assert first["detail"]["corrections"][0]["old_account"] == "****9902" and "200100303" not in str(trail)
    assert second["detail"]["requested_by"] == "ana" and first["detail"]["via"] == "admin-api"


async def test_a_failed_transfer_is_retried_with_a_correction_and_paid_once(store: Store) -> None:
    async with admin_rig(store) as (rig, http):
        batch_id = await pay(rig)  # three transfers, the third to a closed account (AC04)
        first = await http.get(f"/batches/{batch_id}", headers=AUTH)
        assert first.status_code == 200, first.text
        before = first.json()
        assert [t["status"] for t in before["transfers"]] == ["COMPLETED", "COMPLETED", "FAILED"]
        assert before["transfers"][2]["reason_code"] == "AC04"
        assert before["transfers"][2]["account"] == "****9902"
        assert (before["transfers_failed"], before["amount_failed"]) == (1, "750.25")

        fix = {"corrections": [{"index": 2, "account_number": "200100303"}]}
        await refuse_wrong_retries(http, batch_id, fix)

        # ana's corrected retry waits for a second person: nothing reaches the bank until bob approves it
        retry_id = await ask_and_approve_retry(rig, http, batch_id, fix)

        # While it runs, nothing else is created for that transfer.
        again = await http.post(f"/batches/{batch_id}/retry", headers=AUTH)
        assert again.status_code == 200 and again.json()["retry_batch_id"] is None
        assert again.json()["in_flight"] == {"2": retry_id}

        await rig.to_state(retry_id, FlowState.AWAITING_AUTHORIZATION)
        approval = await rig.approve(rig.approval_url(retry_id))
        assert approval.callback is not None and approval.callback.status_code == 200
        assert (await rig.to_state(retry_id, FlowState.COMPLETED, FlowState.FAILED)).state == FlowState.COMPLETED

        await check_retry_paid_and_original_untouched(rig, http, batch_id, retry_id, before)

        nothing = await http.post(f"/batches/{batch_id}/retry", headers=AUTH)
        assert nothing.status_code == 200 and nothing.json()["retry_batch_id"] is None
        assert "no failed transfer" in nothing.json()["message"]

        await check_retry_audit_trail(http, batch_id)


async def test_concurrent_retry_requests_create_one_retry_batch(store: Store) -> None:
    async with admin_rig(store) as (rig, http):
        batch_id = await pay(rig)
        answers = await asyncio.gather(*(http.post(f"/batches/{batch_id}/retry", headers=AUTH) for _ in range(4)))
        codes = sorted(a.status_code for a in answers)
        assert codes.count(201) == 1, [a.text for a in answers]
        assert all(code in (200, 201, 409) for code in codes), [a.text for a in answers]
        created = await http.get(f"/batches/{batch_id}", headers=AUTH)
        assert [r["batch_id"] for r in created.json()["retries"]] == [f"{batch_id}.retry-1"]
        not_final = await http.post(f"/batches/{batch_id}.retry-1/retry", headers=AUTH)
        assert not_final.status_code == 409 and "not final" in not_final.json()["error"]
        unknown = await http.post("/batches/no-such-batch/retry", headers=AUTH)
        assert unknown.status_code == 404


async def test_batches_are_listed_by_status_and_time_in_pages(store: Store) -> None:
    async with admin_rig(store) as (rig, http):
        start = rig.clock.now()
        ids = []
        for _ in range(5):
            document = batch()
            ids.append(str(document["batch_id"]))
            await rig.submit(document)
            rig.clock.advance(1)
        invalid = batch(transfers=[("200100300", "-1.00")])
        await rig.submit(invalid)
        pages, cursor = [], None
        while True:
            answer = await http.get(
                "/batches", params={"limit": 2, "cursor": cursor, "status": "RECEIVED"}, headers=AUTH
            )
            assert answer.status_code == 200, answer.text
            pages.append([b["batch_id"] for b in answer.json()["batches"]])
            cursor = answer.json()["next_cursor"]
            if cursor is None:
                break
        assert pages == [ids[0:2], ids[2:4], ids[4:5]]
        window = {
            "since": (start + timedelta(seconds=1)).isoformat(),
            "until": (start + timedelta(seconds=3)).isoformat(),
        }
        listed = (await http.get("/batches", params=window, headers=AUTH)).json()["batches"]
        assert [b["batch_id"] for b in listed] == ids[1:3]
        refused = (await http.get("/batches", params={"status": "INVALID"}, headers=AUTH)).json()["batches"]
        assert [(b["batch_id"], b["status"]) for b in refused] == [(invalid["batch_id"], "INVALID")]
        for params in (
            {"status": "PAID"},
            {"since": "yesterday"},
            {"since": "2026-11-01T00:00:00"},
            {"limit": "0"},
            {"cursor": "not-a-cursor"},
        ):
            bad = await http.get("/batches", params=params, headers=AUTH)
            assert bad.status_code == 400, (params, bad.text)


async def test_the_report_totals_are_the_status_events_amounts(store: Store) -> None:
    async with admin_rig(store) as (rig, http):
        start = rig.clock.now() - timedelta(seconds=1)
        first, second = await pay(rig), await pay(rig)
        end = rig.clock.now() + timedelta(seconds=1)
        answer = await http.get("/report", params={"since": start.isoformat(), "until": end.isoformat()}, headers=AUTH)
        assert answer.status_code == 200, answer.text
        report = answer.json()
        assert [(line["batch_id"], line["index"]) for line in report["lines"]] == [
            (first, 0),
            (first, 1),
            (first, 2),
            (second, 0),
            (second, 1),
            (second, 2),
        ]
        for total in report["totals"]:
            event = next(e for e in rig.events(total["batch_id"]) if e.status == "COMPLETED")
            assert total["currency"] == event.payload["currency"] == "GTQ"
            assert (
                Decimal(total["amount_completed"]) == Decimal(event.payload["amount_completed"]) == Decimal("3500.50")
            )
            assert Decimal(total["amount_failed"]) == Decimal(event.payload["amount_failed"]) == Decimal("750.25")
            assert total["transfers_failed"] == event.payload["transfers_failed"] == 1
        failed = [line for line in report["lines"] if line["status"] == "FAILED"]
        assert [(line["reason_code"], line["file_payment_id"][:3]) for line in failed] == [("AC04", "fp-")] * 2
        outside = await http.get(
            "/report", params={"since": end.isoformat(), "until": (end + timedelta(hours=1)).isoformat()}, headers=AUTH
        )
        assert outside.json()["lines"] == []


ENDPOINTS = [
    ("GET", "/batches"),
    ("GET", "/batches/x"),
    ("POST", "/batches/x/retry"),
    ("GET", "/dead-letters"),
    ("GET", "/dead-letters/1"),
    ("POST", "/dead-letters/1/replay"),
    ("GET", "/report"),
    ("GET", "/requests"),
    ("POST", "/requests/1/approve"),
    ("POST", "/requests/1/decline"),
    ("GET", "/audit"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
@pytest.mark.parametrize("header", [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer", f"Bearer {TOKEN}x"])
async def test_every_endpoint_refuses_a_missing_or_wrong_token(
    store: Store, method: str, path: str, header: str | None
) -> None:
    sock, port = bound_socket()
    app = admin_app(store, tokens=TOKENS)
    async with serve(mounted(app), sock), httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/admin") as http:
        answer = await http.request(method, path, headers={"Authorization": header} if header else {}, json={})
        assert answer.status_code == 401, answer.text
        assert TOKEN not in answer.text
        unconfigured = admin_app(store, tokens={})
    sock2, port2 = bound_socket()
    base = f"http://127.0.0.1:{port2}/admin"
    async with serve(mounted(unconfigured), sock2), httpx.AsyncClient(base_url=base) as http:
        assert (await http.request(method, path, headers=AUTH, json={})).status_code == 401


_TEXT = st.one_of(
    st.text(alphabet=string.printable + "é€\u202e\x00\ud800", max_size=30),
    st.sampled_from(["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01", "eyJ4Ijoi"]),
)


async def test_fuzzed_admin_requests_get_a_4xx_never_a_5xx(store: Store) -> None:
    async with admin_rig(store) as (rig, http):
        batch_id = await pay(rig)
        base = str(http.base_url).rstrip("/")
        seen: list[int] = []

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(
            path=st.one_of(
                st.sampled_from([p for _, p in ENDPOINTS] + [f"/batches/{batch_id}", f"/batches/{batch_id}/retry"]),
                st.builds(lambda t: f"/batches/{quote(t, safe='', errors='surrogatepass')}/retry", _TEXT),
                st.builds(lambda t: f"/dead-letters/{quote(t, safe='', errors='surrogatepass')}/replay", _TEXT),
                st.builds(lambda t: f"/batches/{quote(t, safe='/.', errors='surrogatepass')}", _TEXT),
            ),
            method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
            params=st.dictionaries(
                st.sampled_from(["status", "since", "until", "limit", "cursor", "after", "batch_id"]), _TEXT, max_size=4
            ),
            body=st.one_of(
                st.binary(max_size=100),
                st.sampled_from([b"[]", b"{}", b"null", b'{"corrections": 5}', b'{"reason": ""}', b"[" * 5000]),
                st.builds(
                    lambda i, a: f'{{"corrections": [{{"index": {i}, "account_number": "{a}"}}]}}'.encode(),
                    st.sampled_from(["-1", "2", "true", "1e9", '"2"', "2.5"]),
                    st.sampled_from(["", "x", "200100303", "\\u202e1", "\\ud800"]),
                ),
                st.builds(
                    lambda key, value: json.dumps({key: value}).encode("utf-8", "surrogatepass"),
                    st.sampled_from(["reason", "requested_by", "replayed_by"]),
                    _TEXT,
                ),
            ),
        )
        def fuzz(path: str, method: str, params: dict[str, str], body: bytes) -> None:
            with httpx.Client(timeout=30) as client:
                query = "&".join(f"{k}={quote(v, safe='', errors='surrogatepass')}" for k, v in params.items())
                answer = client.request(
                    method, f"{base}{path}?{query}", content=body if method != "GET" else None, headers=AUTH
                )
            seen.append(answer.status_code)
            assert answer.status_code < 500, (method, path, params, body, answer.text)

        await asyncio.to_thread(fuzz)
        assert len(seen) >= 100
        assert any(code == 400 for code in seen)


# Extreme but well-formed input: times that overflow once converted to UTC, a cursor carrying one, lone surrogates.
_YEAR_ONE = "0001-01-01T00:00:00+01:00"
_YEAR_LAST = "9999-12-31T23:00:00-01:00"
_CRAFTED_CURSOR = base64.urlsafe_b64encode(json.dumps([_YEAR_ONE, "x"]).encode()).decode().rstrip("=")


async def test_extreme_times_crafted_cursors_and_lone_surrogates_are_400_not_500(store: Store) -> None:
    async with admin_rig(store) as (rig, http):
        batch_id = await pay(rig)
        for path, params in (
            ("/batches", {"since": _YEAR_ONE}),
            ("/batches", {"until": _YEAR_LAST}),
            ("/batches", {"cursor": _CRAFTED_CURSOR}),
            ("/report", {"since": _YEAR_ONE, "until": "2026-12-01T00:00:00Z"}),
            ("/report", {"since": "2026-11-01T00:00:00Z", "until": _YEAR_LAST}),
            ("/dead-letters", {"since": _YEAR_ONE}),
        ):
            answer = await http.get(path, params=params, headers=AUTH)
            assert answer.status_code == 400, (path, params, answer.text)
            assert "out of range" in answer.text or "cursor" in answer.text
        for body in (
            b'{"requested_by": "ana\\ud800"}',
            b'{"corrections": [{"index": 2, "account_number": "\\udfff"}]}',
        ):
            answer = await http.post(f"/batches/{batch_id}/retry", content=body, headers=AUTH)
            assert answer.status_code == 400 and "lone surrogate" in answer.json()["error"], answer.text
        answer = await http.post("/dead-letters/1/replay", content=b'{"reason": "\\ud83d"}', headers=AUTH)
        assert answer.status_code == 400 and "lone surrogate" in answer.json()["error"], answer.text


async def test_an_erp_batch_named_like_a_retry_is_refused_and_the_real_retry_still_works(store: Store) -> None:
    async with admin_rig(store) as (rig, http):
        batch_id = await pay(rig)  # its third transfer failed
        forged = await rig.submit(batch(f"{batch_id}.retry-1", transfers=[("6660006666", "750.25")]))
        assert forged.flow is None and forged.invalid
        assert forged.reason is not None and "reserved for retry batches" in forged.reason
        for unfit in ("ESC\x1b[2Jx", "two\nlines", "rtl\u202eexe"):
            refused = await rig.submit(batch(unfit))
            assert refused.flow is None and "control or bidi" in (refused.reason or ""), unfit
        created = await http.post(f"/batches/{batch_id}/retry", headers=AUTH)
        assert created.status_code == 201, created.text
        assert created.json()["retry_batch_id"] == f"{batch_id}.retry-1"
        bidi = batch()
        bidi["file_reference"] = "PAYROLL\u202e11-2026"
        stored = await rig.submit(bidi)
        assert stored.status == FlowState.INVALID and "file_reference" in (stored.reason or "")


async def test_the_report_command_neutralises_cells_a_spreadsheet_would_run(store: Store, tmp_path: Path) -> None:
    async with admin_rig(store) as (rig, http):
        document = batch()
        document["transactions"][0]["employee_reference"] = '=HYPERLINK("http://evil.example","pay")'
        document["transactions"][1]["employee_reference"] = "@SUM(1+1)"
        await rig.submit(document)
        batch_id = str(document["batch_id"])
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        await rig.approve(rig.approval_url(batch_id))
        await rig.to_state(batch_id, FlowState.COMPLETED)
        config = tmp_path / "dispersion.toml"
        config.write_text(f'[admin]\nurl = "{str(http.base_url).rstrip("/").removesuffix("/admin")}"\n')
        since, until = rig.clock.now() - timedelta(days=1), rig.clock.now() + timedelta(days=1)
        command = [sys.executable, "-m", "processor.cli", "report", "--config", str(config), "--format", "csv"]
        command += ["--since", since.isoformat(), "--until", until.isoformat()]
        env = {**os.environ, "DISPERSION_ADMIN_TOKEN": TOKEN}
        done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        rows = list(csv.reader(io.StringIO(done.stdout)))
        references = [row[2] for row in rows[1:]]
        assert references == ['\'=HYPERLINK("http://evil.example","pay")', "'@SUM(1+1)", "E-0002"]
        assert not any(cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row)


async def review_and_release(rig: Rig, http: httpx.AsyncClient, diverted: str) -> None:
    """The held batch is one pending request naming the changed account (masked); an operator cannot approve it,
    an approver releases it, and its AUTHORIZATION_REQUIRED says what changed and who reviewed it."""
    pending = (await http.get("/requests", params={"state": "PENDING"}, headers=bearer(VERA))).json()["requests"]
    assert [(r["kind"], r["batch_id"], r["requested_by"]) for r in pending] == [
        ("changed_accounts", diverted, "dispersion-intake")
    ]
    (change,) = pending[0]["changed"]  # E-0002 was never paid anywhere: not a change
    assert (change["index"], change["employee_reference"], change["amount"]) == (1, "E-0001", "2000.00")
    assert (change["old_account"], change["new_account"]) == ("****0301", "****0666")
    assert "666000666" not in str(pending)
    operator = await http.post(f"/requests/{pending[0]['id']}/approve", headers=bearer(ANA))
    assert operator.status_code == 403
    reviewed = await http.post(f"/requests/{pending[0]['id']}/approve", headers=bearer(BOB))
    assert reviewed.status_code == 200 and reviewed.json()["outcome"] == "released", reviewed.text
    await rig.to_state(diverted, FlowState.AWAITING_AUTHORIZATION)  # the consent is created now
    asking = next(e for e in rig.events(diverted) if e.status == "AUTHORIZATION_REQUIRED")
    flagged_transfer = {
        "index": 1,
        "employee_reference": "E-0001",
        "previous_account": "****0301",
        "account": "****0666",
    }
    assert asking.payload["changed_accounts"] == [flagged_transfer] and asking.payload["reviewed_by"] == "bob"
    wire = schemas.decode(STATUS_TOPIC, schemas.encode(STATUS_TOPIC, outbox_record(asking)))  # as the relay does
    assert wire["changed_accounts"] == [flagged_transfer] and wire["reviewed_by"] == "bob"  # status v3


async def check_reviews_report(http: httpx.AsyncClient, diverted: str, declined_id: str) -> None:
    """The report lists both reviews: the approved one and the declined one, with the masked accounts."""
    window = {"since": "2026-11-01T00:00:00Z", "until": "2027-01-01T00:00:00Z"}
    reviews = (await http.get("/report", params=window, headers=AUTH)).json()["reviews"]
    assert [(r["batch_id"], r["state"], r["reviewed_by"], r["transfers"]) for r in reviews] == sorted(
        [
            (
                diverted,
                "APPROVED",
                "bob",
                [
                    {
                        "index": 1,
                        "employee_reference": "E-0001",
                        "old_account": "****0301",
                        "new_account": "****0666",
                    }
                ],
            ),
            (
                declined_id,
                "DECLINED",
                "bob",
                [
                    {
                        "index": 0,
                        "employee_reference": "E-0000",
                        "old_account": "****0300",
                        "new_account": "****0666",
                    }
                ],
            ),
        ]
    )


async def check_review_audit(http: httpx.AsyncClient, diverted: str, declined_id: str, flagged_id: str) -> None:
    """The audit trail holds the intake's holds and flag and the approver's decisions, in order."""
    trail = (await http.get("/audit", params={"since": "2026-01-01T00:00:00Z"}, headers=AUTH)).json()["entries"]
    assert [(e["actor"], e["action"], e["subject"]) for e in trail] == [
        ("dispersion-intake", "changed_accounts_held", diverted),
        ("bob", "request_approved", diverted),
        ("dispersion-intake", "changed_accounts_held", declined_id),
        ("bob", "request_declined", declined_id),
        ("dispersion-intake", "changed_accounts_flagged", flagged_id),
    ]


async def test_a_changed_account_holds_the_batch_until_an_approver_reviews_it(store: Store) -> None:
    async with admin_rig(store) as (rig, http):
        await pay(rig)  # E-0000 and E-0001 paid to ****0300 and ****0301; E-0002 rejected (not a place it was paid)
        rig.clock.advance(30 * 86400)  # next month's payroll
        controls = Controls()  # the default: changed accounts held for review

        async def submit(*transfers: tuple[str, str], rules: Controls = controls) -> tuple[str, IntakeResult]:
            document = batch(transfers=transfers)
            result = await accept_batch(store, document, now=rig.clock.now(), integrations={"sandbox"}, controls=rules)
            return str(document["batch_id"]), result

        diverted, held = await submit(("200100300", "1500.50"), ("666000666", "2000.00"), ("200100777", "750.25"))
        assert held.review == "PENDING"
        assert await rig.run_round() == 0 and rig.flow(diverted).state == FlowState.RECEIVED
        assert rig.count("file_consent") == 1  # nothing reached the bank for it
        await review_and_release(rig, http, diverted)

        declined_id, again = await submit(("666000666", "1500.50"))  # E-0000's account changed as well
        assert again.review == "PENDING"
        (request,) = (await http.get("/requests", params={"state": "PENDING"}, headers=AUTH)).json()["requests"]
        assert (await http.post(f"/requests/{request['id']}/decline", headers=bearer(BOB))).status_code == 200
        assert rig.flow(declined_id).state == FlowState.FAILED
        failed = next(e for e in rig.events(declined_id) if e.status == "FAILED")
        assert "declined by bob" in failed.payload["reason"] and failed.payload["reviewed_by"] == "bob"

        flagged_id, flagged = await submit(
            ("666000666", "1500.50"), rules=Controls(changed_accounts=ChangedAccounts.FLAG)
        )
        assert flagged.review == "FLAGGED" and rig.flow(flagged_id).next_action_at is not None  # due: not held
        _, off = await submit(("666000666", "1500.50"), rules=Controls(changed_accounts=ChangedAccounts.OFF))
        assert off.review is None

        await rig.approve(rig.approval_url(diverted))
        assert (await rig.to_state(diverted, FlowState.COMPLETED)).state == FlowState.COMPLETED
        await check_reviews_report(http, diverted, declined_id)
        await check_review_audit(http, diverted, declined_id, flagged_id)


async def test_a_batch_stored_under_a_retry_id_before_the_rule_does_not_block_the_real_retry(store: Store) -> None:
    async with admin_rig(store) as (rig, http):
        batch_id = await pay(rig)
        # stored before intake reserved the suffix (an ERP's batch that passed for a retry): not a retry record
        legacy = prepare_batch(batch(f"{batch_id}.retry-1", transfers=[("6660006666", "750.25")]), retry=True)
        assert store.run(lambda tx: store_batch(tx, legacy, now=rig.clock.now())).created
        created = await http.post(f"/batches/{batch_id}/retry", headers=AUTH)
        assert created.status_code == 201, created.text
        assert created.json()["retry_batch_id"] == f"{batch_id}.retry-2"  # its number is skipped, not refused


async def test_without_four_eyes_a_corrected_retry_is_made_at_once_and_the_trail_says_so(store: Store) -> None:
    async with engine_rig(store) as rig:
        sock, port = bound_socket()
        app = admin_app(
            store, tokens=TOKENS, integrations={"sandbox"}, clock=rig.clock, controls=Controls(four_eyes=False)
        )
        async with serve(mounted(app), sock), httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/admin") as http:
            batch_id = await pay(rig)
            fix = {"corrections": [{"index": 2, "account_number": "200100303"}]}
            made = await http.post(f"/batches/{batch_id}/retry", json=fix, headers=bearer(ANA))
            assert made.status_code == 201 and made.json()["retry_batch_id"] == f"{batch_id}.retry-1", made.text
            assert made.json()["request"]["state"] == "APPROVED" and made.json()["request"]["decided_by"] == "ana"
            trail = (await http.get("/audit", params={"since": "2026-01-01T00:00:00Z"}, headers=AUTH)).json()
            approved = trail["entries"][-1]
            assert (approved["actor"], approved["action"]) == ("ana", "request_approved")
            assert approved["detail"]["four_eyes"] is False and approved["detail"]["approved_by_requester"] is True
