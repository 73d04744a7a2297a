"""`dispersion sandbox` options reach the bank, and `--db FILE` keeps every kind of state across a restart.

The restart is simulated in-process: the SQLite file is closed and a new bank (new store, new app) is built on
it, as a new process would; tests/e2e/test_sandbox_restart.py does the same with real processes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from manual_clock import ManualClock
from sandbox_auth_fixtures import ISSUER, REDIRECT_URI, Harness, Tpp, make_tpp, query_of
from sandbox_files_support import CONSENTS, PAYMENTS, initiation, with_references

from sandbox.app import create_app
from sandbox.cli import build_parser, config_from_args
from sandbox.clients import ClientRegistry
from sandbox.config import SandboxConfig
from sandbox.consents import FILE_KIND
from sandbox.jsonutil import dumps
from sandbox.oauth.tokens import TOKEN_KIND
from sandbox.state import Bank
from sandbox.store import Store

FINANCIAL_ID = "0015800001041RHAAY"


# --- options ---------------------------------------------------------------------------------------------


def test_defaults_are_the_spec_limits_and_memory() -> None:
    config = config_from_args(build_parser().parse_args(["--clients", "clients.json"]))
    assert config.base_url == "http://127.0.0.1:8700"
    # The spec's Limits table.
    assert config.client_credentials_ttl == 600
    assert config.auth_code_token_ttl == 432000
    assert config.par_ttl == 300
    # Not in the spec; documented in docs/sandbox.md.
    assert config.code_ttl == 60
    assert config.refresh_token_ttl == 30 * 24 * 3600
    assert config.file_payment_delay == 2.0
    assert config.vrp_delay == 1.0
    assert config.max_body_bytes == 64 * 2**20  # a 100,000-transaction file (about 41 MB) fits
    assert config.db_path is None  # memory by default
    assert config.admin is False


def test_every_option_reaches_the_configuration(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "--host", "0.0.0.0", "--port", "9900", "--clients", "c.json",
            "--base-url", "https://bank.example", "--financial-id", "PARTICIPANT-1",
            "--db", str(tmp_path / "bank.sqlite"),
            "--client-credentials-ttl", "11", "--auth-code-token-ttl", "12", "--refresh-token-ttl", "13",
            "--par-ttl", "14", "--code-ttl", "15",
            "--file-payment-delay", "0.25", "--vrp-delay", "0.5", "--max-body-mb", "3", "--admin",
        ]
    )  # fmt: skip
    config = config_from_args(args)
    assert config == SandboxConfig(
        base_url="https://bank.example",
        financial_id="PARTICIPANT-1",
        client_credentials_ttl=11,
        auth_code_token_ttl=12,
        refresh_token_ttl=13,
        par_ttl=14,
        code_ttl=15,
        file_payment_delay=0.25,
        vrp_delay=0.5,
        max_body_bytes=3 * 2**20,
        admin=True,
        db_path=str(tmp_path / "bank.sqlite"),
    )
    for bad in ("0", "-1", "1.5", "lots"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--clients", "c.json", "--max-body-mb", bad])
    # Without --base-url the base address is built from host and port.
    plain = config_from_args(build_parser().parse_args(["--clients", "c.json", "--port", "9901"]))
    assert plain.issuer == "http://127.0.0.1:9901"


def test_clients_option_is_required() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([])


# --- a bank on a SQLite file -----------------------------------------------------------------------------


@asynccontextmanager
async def running(tpp: Tpp, clock: ManualClock, db: str | None, **config: Any) -> AsyncIterator[Harness]:
    """One 'process' of the sandbox: a store on `db` (memory when None), a bank and its app."""
    store = Store(db)
    bank = Bank(
        config=SandboxConfig(base_url=ISSUER, db_path=db, **config),
        clients=ClientRegistry({tpp.client_id: tpp.client}),
        store=store,
        clock=clock,
    )
    transport = httpx.ASGITransport(app=create_app(bank))
    try:
        async with httpx.AsyncClient(transport=transport, base_url=ISSUER) as http:
            yield Harness(bank, http, clock)
    finally:
        store.close()


def resource_headers(token: str, **extra: str) -> dict[str, str]:
    import uuid

    return {
        "Authorization": f"Bearer {token}",
        "x-fapi-interaction-id": str(uuid.uuid4()),
        "x-fapi-financial-id": FINANCIAL_ID,
        "x-fapi-customer-ip-address": "203.0.113.7",
        "Content-Type": "application/json",
        **extra,
    }


async def uploaded_consent(h: Harness, cc: str, init: dict[str, Any], **extra: str) -> str:
    """A1 then A2: a file consent in AwaitingAuthorisation."""
    r = await h.http.post(
        CONSENTS, content=dumps({"Data": {"Initiation": init}}), headers=resource_headers(cc, **extra)
    )
    assert r.status_code == 201, r.text
    consent_id = str(r.json()["Data"]["ConsentId"])
    upload = dumps(with_references(init["SupplementaryData"], consent_id))
    r = await h.http.post(f"{CONSENTS}/{consent_id}/file", content=upload, headers=resource_headers(cc))
    assert r.status_code == 201, r.text
    return consent_id


async def cc_token(h: Harness, tpp: Tpp) -> str:
    r = await h.http.post(
        "/token", data={"grand_type": "client_credentials", "scope": "payments openid"}, headers=tpp.basic()
    )
    assert r.status_code == 200, r.text
    return str(r.json()["access_token"])


async def assertion_token(h: Harness, assertion: str) -> httpx.Response:
    """A client-credentials token request authenticated by a client assertion (private_key_jwt)."""
    return await h.http.post(
        "/token",
        data={"grand_type": "client_credentials", "scope": "payments openid",
              "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
              "client_assertion": assertion},
    )  # fmt: skip


async def test_sqlite_state_survives_a_restart(tmp_path: Path) -> None:
    tpp = make_tpp("tpp-restart", 0)
    clock = ManualClock()
    db = str(tmp_path / "bank.sqlite")
    init = initiation()
    body = dumps({"Data": {"Initiation": init}})

    async with running(tpp, clock, db, file_payment_delay=5) as h:
        cc = await cc_token(h, tpp)
        consent_id = await uploaded_consent(h, cc, init, **{"x-idempotency-key": "b-1"})
        # Another consent with a PAR request_uri pushed but not yet used, for after the restart.
        waiting_id = await uploaded_consent(h, cc, initiation(FileReference="WAITING"))
        pushed, _, _ = await h.push(tpp, waiting_id)
        assert pushed.status_code == 200, pushed.text
        pending_request_uri = pushed.json()["request_uri"]
        auth = await h.authorise(tpp, consent_id)
        r = await h.exchange(tpp, auth.code, auth.verifier)
        assert r.status_code == 200, r.text
        tokens = r.json()
        used_assertion = tpp.assertion(h.now())
        r = await assertion_token(h, used_assertion)
        assert r.status_code == 200, r.text
        counts_before = {kind: h.bank.store.count(kind) for kind in (FILE_KIND, TOKEN_KIND)}

    clock.advance(1)
    async with running(tpp, clock, db, file_payment_delay=5) as h:
        assert {kind: h.bank.store.count(kind) for kind in (FILE_KIND, TOKEN_KIND)} == counts_before
        # The client-credentials token issued before the restart still reads the consent.
        r = await h.http.get(f"{CONSENTS}/{consent_id}", headers=resource_headers(cc))
        assert r.status_code == 200, r.text
        assert r.json()["Data"]["Status"] == "Authorised"
        # The idempotency key still replays the same consent, creating nothing.
        r = await h.http.post(CONSENTS, content=body, headers=resource_headers(cc, **{"x-idempotency-key": "b-1"}))
        assert r.status_code == 201 and r.json()["Data"]["ConsentId"] == consent_id
        assert h.bank.store.count(FILE_KIND) == 2
        # Single-use things stay used: the assertion's jti (and the code, below).
        r = await assertion_token(h, used_assertion)
        assert r.status_code == 400 and r.json()["error"] == "invalid_client", r.text
        # The pending request_uri still opens the consent page.
        page = await h.http.get(
            "/auth",
            params={"client_id": tpp.client_id, "response_type": "code", "scope": "payments",
                    "request_uri": pending_request_uri},
        )  # fmt: skip
        assert page.status_code == 200 and waiting_id in page.text and "WAITING" in page.text
        # The refresh token and the authorization-code token still work: the payment is made.
        r = await h.http.post(
            "/token",
            data={"grand_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
            headers=tpp.basic(),
        )
        assert r.status_code == 200, r.text
        payment = {"Data": {"ConsentId": consent_id, "Initiation": init}}
        r = await h.http.post(PAYMENTS, content=dumps(payment), headers=resource_headers(tokens["access_token"]))
        assert r.status_code == 201, r.text
        payment_id = r.json()["Data"]["FilePaymentId"]

    clock.advance(5)
    async with running(tpp, clock, db, file_payment_delay=5) as h:
        r = await h.http.get(f"{PAYMENTS}/{payment_id}", headers=resource_headers(cc))
        assert r.status_code == 200, r.text
        assert r.json()["Data"]["Status"] == "InitiationCompleted"
        r = await h.http.get(f"{CONSENTS}/{consent_id}", headers=resource_headers(cc))
        assert r.json()["Data"]["Status"] == "Consumed"
        # One payment per consent holds across restarts too.
        r = await h.http.post(PAYMENTS, content=dumps(payment), headers=resource_headers(tokens["access_token"]))
        assert r.status_code == 400 and r.json()["Code"] == "UK.OBIE.Resource.InvalidConsentStatus", r.text
        assert h.bank.store.count("file_payment") == 1
        # The code was used before the first restart (a replay also revokes what it issued, so it comes last).
        r = await h.exchange(tpp, auth.code, auth.verifier)
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"


async def test_without_db_a_restart_forgets_everything() -> None:
    tpp = make_tpp("tpp-memory", 0)
    clock = ManualClock()
    async with running(tpp, clock, None) as h:
        cc = await cc_token(h, tpp)
        r = await h.http.post(
            CONSENTS, content=dumps({"Data": {"Initiation": initiation()}}), headers=resource_headers(cc)
        )
        assert r.status_code == 201, r.text
        consent_id = r.json()["Data"]["ConsentId"]
    async with running(tpp, clock, None) as h:
        r = await h.http.get(f"{CONSENTS}/{consent_id}", headers=resource_headers(cc))
        assert r.status_code == 401 and r.json()["Code"] == "UK.OBIE.Header.Invalid"
        r = await h.http.get(f"{CONSENTS}/{consent_id}", headers=resource_headers(await cc_token(h, tpp)))
        assert r.status_code == 400 and r.json()["Code"] == "UK.OBIE.Resource.NotFound"


async def test_configured_lifetimes_are_the_ones_served() -> None:
    """Lifetimes given as options (not the spec defaults) are what the endpoints answer and enforce."""
    tpp = make_tpp("tpp-ttl", 0)
    clock = ManualClock()
    args = build_parser().parse_args(
        ["--clients", "c.json", "--client-credentials-ttl", "30", "--par-ttl", "20", "--code-ttl", "10",
         "--auth-code-token-ttl", "40"]
    )  # fmt: skip
    cli = config_from_args(args)
    async with running(
        tpp,
        clock,
        None,
        client_credentials_ttl=cli.client_credentials_ttl,
        par_ttl=cli.par_ttl,
        code_ttl=cli.code_ttl,
        auth_code_token_ttl=cli.auth_code_token_ttl,
    ) as h:
        r = await h.http.post(
            "/token", data={"grand_type": "client_credentials", "scope": "payments openid"}, headers=tpp.basic()
        )
        assert r.json()["expires_in"] == 30
        cc = r.json()["access_token"]
        consent_id = await uploaded_consent(h, cc, initiation())
        second_id = await uploaded_consent(h, cc, initiation(FileReference="SECOND"))
        pushed, _, _ = await h.push(tpp, consent_id)
        assert pushed.json()["expires_in"] == 20
        clock.advance(20)
        d = await h.decide(pushed.json()["request_uri"], "approve")
        assert d.status_code == 400  # the request_uri lived 20 s
        auth = await h.authorise(tpp, consent_id)
        clock.advance(10)
        r = await h.exchange(tpp, auth.code, auth.verifier)
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"  # the code lived 10 s
        auth = await h.authorise(tpp, second_id)
        r = await h.exchange(tpp, auth.code, auth.verifier)
        assert r.status_code == 200 and r.json()["expires_in"] == 40
        assert query_of(auth.location)["state"] == auth.state and auth.location.startswith(REDIRECT_URI)
        # The client-credentials token was issued 30 s ago: expired.
        r = await h.http.get(f"{CONSENTS}/{consent_id}", headers=resource_headers(cc))
        assert r.status_code == 403 and r.json()["Message"].startswith("token_expired")
