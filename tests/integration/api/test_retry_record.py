"""`retry_of` comes from the retry record only (issue 19 point 7): a batch stored under an `ID.retry-N` id without
a `batch_retries` record (stored before intake reserved the suffix, or forged) is no retry anywhere: not in its
status and transfer events, not in the admin API's listing, batch and report, not on the console; the real retry
made next is. Real HTTP on loopback, the sandbox bank and engine behind it, SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
from console_support import CSRF, PASSWORD, operator_auth
from engine_support import batch, bound_socket, engine_rig, pay, serve
from starlette.applications import Starlette
from starlette.routing import Mount

from processor.api.admin import admin_app
from processor.api.admin_input import token_digest
from processor.api.console.app import console_app
from processor.domain.file_states import FlowState
from processor.domain.roles import AdminToken, Controls, Role
from processor.engine.intake import accept_batch, prepare_batch, store_batch
from processor.store import Store
from schemas.topics import TRANSFERS_TOPIC

TOKEN = "admin-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_a_batch_named_like_a_retry_without_its_record_is_no_retry(store: Store) -> None:
    async with engine_rig(store) as rig:
        sock, port = bound_socket()
        tokens = {"admin": AdminToken("admin", token_digest(TOKEN), Role.ADMIN)}
        admin = admin_app(store, tokens=tokens, integrations={"sandbox"}, clock=rig.clock)
        console = console_app(
            store, operator_auth(), public_url=rig.public_url, integrations={"sandbox"}, clock=rig.clock
        )
        app = Starlette(routes=[Mount("/admin", app=admin), Mount("/console", app=console)])
        async with serve(app, sock), httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            original = await pay(rig)  # its third transfer (750.25) failed at the bank
            forged_id = f"{original}.retry-1"
            forged = prepare_batch(batch(forged_id, transfers=[("6660006666", "750.25")]), retry=True)
            assert store.run(lambda tx: store_batch(tx, forged, now=rig.clock.now())).created
            await rig.to_state(forged_id, FlowState.AWAITING_AUTHORIZATION)
            approval = await rig.approve(rig.approval_url(forged_id))
            assert approval.callback is not None and approval.callback.status_code == 200
            assert (await rig.to_state(forged_id, FlowState.COMPLETED)).state == FlowState.COMPLETED
            made = await http.post(f"/admin/batches/{original}/retry", headers=AUTH)
            assert made.status_code == 201, made.text
            real_id = made.json()["retry_batch_id"]
            assert real_id == f"{original}.retry-2"
            await rig.to_state(real_id, FlowState.AWAITING_AUTHORIZATION)

            # status and transfer events
            forged_events = rig.events(forged_id)
            assert [e.status for e in forged_events][-1] == "COMPLETED"
            assert all(e.payload["retry_of"] is None for e in forged_events)
            assert all(e.payload["retry_of"] == original for e in rig.events(real_id))
            transfers = store.run(lambda tx: tx.outbox.events(TRANSFERS_TOPIC, forged_id), write=False)
            assert [(t.payload["outcome"], t.payload["retry_of"]) for t in transfers] == [("COMPLETED", None)]
            assert transfers[0].payload["original_index"] is None

            # the admin API: listing, batch, report (the original's failed transfer is still outstanding)
            listed = (await http.get("/admin/batches", headers=AUTH)).json()["batches"]
            retry_of = {b["batch_id"]: b["retry_of"] for b in listed}
            assert (retry_of[forged_id], retry_of[real_id], retry_of[original]) == (None, original, None)
            shown = (await http.get(f"/admin/batches/{forged_id}", headers=AUTH)).json()
            assert shown["retry_of"] is None, shown
            day = rig.clock.now()
            window = {"since": (day - timedelta(hours=1)).isoformat(), "until": (day + timedelta(hours=1)).isoformat()}
            report = (await http.get("/admin/report", params=window, headers=AUTH)).json()
            (totals,) = report["grand_totals"]
            # two payrolls: the original (one transfer outstanding, its real retry not paid yet) and the forged one
            assert totals["batches"] == 2 + 1, totals  # the original, its real retry, the forged batch
            assert totals["outstanding"] == {"transfers": 0, "amount": "0.00"}, totals
            assert totals["in_progress"]["amount"] == "750.25", totals

            # the console: no "Retry of" on the forged batch; the original lists only its real retry
            form = await http.get("/console/sign-in")
            csrf = CSRF.search(form.text)
            assert csrf is not None
            signed = await http.post(
                "/console/sign-in", data={"csrf": csrf.group(1), "name": "ana", "password": PASSWORD}
            )
            assert signed.status_code == 303, signed.text
            page = await http.get(f"/console/batches/{forged_id}")
            assert page.status_code == 200 and 'id="retry-of"' not in page.text
            retried = await http.get(f"/console/batches/{real_id}")
            assert f'href="/console/batches/{original}" id="retry-of"' in retried.text
            first = await http.get(f"/console/batches/{original}")
            links = re.findall(r'class="retry-link">([^<]+)<', first.text)
            assert links == [real_id], links


async def test_a_retry_of_field_in_a_submitted_document_does_not_skip_the_changed_account_review(store: Store) -> None:
    """Retries made by retry-failed are not compared with where employees were paid (they had their own review);
    which batch is one is known from its retry record, not from a `retry_of` an ERP may write into its JSON."""
    async with engine_rig(store) as rig:
        original = await pay(rig)  # E-0001 was paid to ****0301
        rig.clock.advance(30 * 86400)
        document = batch(transfers=[("200100300", "1500.50"), ("666000666", "2000.00")])
        document["retry_of"] = original
        result = await accept_batch(store, document, now=rig.clock.now(), integrations={"sandbox"}, controls=Controls())
        assert result.review == "PENDING"  # held for an approver's review like any other batch
        assert rig.flow(str(document["batch_id"])).state == FlowState.RECEIVED
