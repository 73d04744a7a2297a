"""camt.054 with creditor accounts in clear needs the operator role or higher (issue 19 leftover): a viewer gets 403
with a clear message (through the admin API and `dispersion camt054 --accounts clear`), masked accounts stay open to
viewers, and every clear export is in the audit trail. Real HTTP on loopback, the sandbox bank and engine behind
it, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path

import httpx
from engine_support import bound_socket, engine_rig, pay, serve
from starlette.applications import Starlette
from starlette.routing import Mount

from processor.api.admin import admin_app
from processor.api.admin_input import token_digest
from processor.domain.roles import AdminToken, Role
from processor.store import Store

ANA, VERA = "ana-operator-token-0123456789", "vera-viewer-token-0123456789"
TOKENS = {
    "ana": AdminToken("ana", token_digest(ANA), Role.OPERATOR),
    "vera": AdminToken("vera", token_digest(VERA), Role.VIEWER),
}
PAID_ACCOUNT = "200100300"  # the first transfer of engine_support's batch, paid by the sandbox


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def camt054_command(url: str, token: str, window: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    """`dispersion camt054 --accounts clear` as a user runs it (no configuration: `--url` and the token)."""
    env = {k: v for k, v in os.environ.items() if k != "DISPERSION_CONFIG"}
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "processor.cli", "camt054", "--url", url, "--accounts", "clear"),
        *("--since", window["since"], "--until", window["until"]),
        env={**env, "DISPERSION_ADMIN_TOKEN": token},
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_clear_accounts_need_the_operator_role_and_are_audited(store: Store, tmp_path: Path) -> None:
    async with engine_rig(store) as rig:
        sock, port = bound_socket()
        app = Starlette(routes=[Mount("/admin", app=admin_app(store, tokens=TOKENS, clock=rig.clock))])
        url = f"http://127.0.0.1:{port}"
        async with serve(app, sock), httpx.AsyncClient(base_url=f"{url}/admin", timeout=30) as http:
            await pay(rig)
            now = rig.clock.now()
            window = {"since": (now - timedelta(hours=1)).isoformat(), "until": (now + timedelta(hours=1)).isoformat()}

            refused = await http.get("/camt054", params={**window, "accounts": "clear"}, headers=bearer(VERA))
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"] == (
                "vera has the viewer role: creditor accounts in clear need the operator, approver or admin role; "
                "accounts=masked is open to every role"
            )
            masked = await http.get("/camt054", params={**window, "accounts": "masked"}, headers=bearer(VERA))
            assert masked.status_code == 200 and "****0300" in masked.text and PAID_ACCOUNT not in masked.text
            code, out, err = await camt054_command(url, VERA, window, tmp_path)
            assert (code, out) == (1, ""), err
            assert "dispersion camt054: vera has the viewer role: creditor accounts in clear need" in err

            clear = await http.get("/camt054", params={**window, "accounts": "clear"}, headers=bearer(ANA))
            assert clear.status_code == 200 and f"<Id>{PAID_ACCOUNT}</Id>" in clear.text, clear.text
            code, out, err = await camt054_command(url, ANA, window, tmp_path)
            assert code == 0 and f"<Id>{PAID_ACCOUNT}</Id>" in out, err

            trail = await http.get("/audit", params={"since": window["since"]}, headers=bearer(VERA))
            exports = [e for e in trail.json()["entries"] if e["action"] == "camt054_clear_accounts"]
            assert [(e["actor"], e["role"]) for e in exports] == [("ana", "operator"), ("ana", "operator")]
            assert exports[0]["detail"]["via"] == "admin-api" and exports[0]["detail"]["version"] == "08"
            assert exports[0]["address"] == "127.0.0.1"
            assert all(e["action"] != "camt054_clear_accounts" or e["actor"] != "vera" for e in trail.json()["entries"])
