"""`dispersion sandbox --db FILE`: a real process restarted on the same SQLite file keeps its state.

Without `--db` the state lives in memory and a restart forgets it (the default).
"""

from __future__ import annotations

import socket
from decimal import Decimal
from pathlib import Path

import httpx
from plain_client import ASSERTION_TYPE, RS, PlainClient, file_hash, file_payload, to_json, with_references
from sandbox_process import SandboxProcess, running_sandbox


def plain_client(sandbox: SandboxProcess, http: httpx.Client) -> PlainClient:
    c = sandbox.client
    return PlainClient(
        http,
        sandbox.base_url,
        c["client_id"],
        c["client_secret"],
        c["kid"],
        sandbox.signing_key_pem,
        c["redirect_uris"][0],
    )


def test_state_survives_a_restart_with_db(tmp_path: Path, held_socket: socket.socket) -> None:
    db = tmp_path / "bank.sqlite"
    payload = file_payload("1234567890", [("5551110001", "10.00"), ("5551110002", "20.50")])
    initiation = {
        "SupplementaryData": payload,
        "FileType": "UK.OBIE.PaymentInitiation.4.0",
        "FileHash": file_hash(payload),
        "FileReference": "RESTART-1",
        "NumberOfTransactions": "2",
        "ControlSum": Decimal("30.50"),
    }
    options = ("--db", str(db), "--file-payment-delay", "0")
    with running_sandbox(tmp_path, *options, sock=held_socket) as sandbox, httpx.Client(timeout=10) as http:
        bank = plain_client(sandbox, http)
        disc = bank.discovery()
        cc = bank.client_credentials(disc["token_endpoint"], basic=True)
        r = http.post(
            f"{bank.base}{RS}/file-payment-consents",
            content=to_json({"Data": {"Initiation": initiation}}),
            headers={**bank.headers(cc), "x-idempotency-key": "restart-1"},
        )
        assert r.status_code == 201, r.text
        consent_id = r.json()["Data"]["ConsentId"]
        r = http.post(
            f"{bank.base}{RS}/file-payment-consents/{consent_id}/file",
            content=to_json(with_references(payload, consent_id)),
            headers=bank.headers(cc),
        )
        assert r.status_code == 201, r.text
        redirect = bank.authorize(disc, consent_id, basic=False)
        tokens = bank.exchange(disc["token_endpoint"], redirect["code"], redirect["_verifier"], basic=False)
    assert db.exists()

    with running_sandbox(tmp_path, *options, sock=held_socket) as sandbox, httpx.Client(timeout=10) as http:
        bank = plain_client(sandbox, http)
        # Tokens issued by the first process still work; the consent is where the first process left it.
        r = http.get(f"{bank.base}{RS}/file-payment-consents/{consent_id}", headers=bank.headers(cc, fapi=True))
        assert r.status_code == 200, r.text
        assert r.json()["Data"]["Status"] == "Authorised"
        # The idempotency key still names the same consent.
        r = http.post(
            f"{bank.base}{RS}/file-payment-consents",
            content=to_json({"Data": {"Initiation": initiation}}),
            headers={**bank.headers(cc), "x-idempotency-key": "restart-1"},
        )
        assert r.status_code == 201 and r.json()["Data"]["ConsentId"] == consent_id
        # The authorization-code token of the first process pays.
        r = http.post(
            f"{bank.base}{RS}/file-payments",
            content=to_json({"Data": {"ConsentId": consent_id, "Initiation": initiation}}),
            headers=bank.headers(tokens["access_token"], fapi=True),
        )
        assert r.status_code == 201, r.text
        payment_id = r.json()["Data"]["FilePaymentId"]

    with running_sandbox(tmp_path, *options, sock=held_socket) as sandbox, httpx.Client(timeout=10) as http:
        bank = plain_client(sandbox, http)
        r = http.get(f"{bank.base}{RS}/file-payments/{payment_id}", headers=bank.headers(cc))
        assert r.status_code == 200 and r.json()["Data"]["Status"] == "InitiationCompleted", r.text
        r = http.get(f"{bank.base}{RS}/file-payment-consents/{consent_id}", headers=bank.headers(cc, fapi=True))
        assert r.json()["Data"]["Status"] == "Consumed"

    # The default (memory): the same sandbox restarted without --db has forgotten the token and the consent.
    with running_sandbox(tmp_path, sock=held_socket) as sandbox, httpx.Client(timeout=10) as http:
        bank = plain_client(sandbox, http)
        r = http.get(f"{bank.base}{RS}/file-payments/{payment_id}", headers=bank.headers(cc))
        assert r.status_code == 401 and r.json()["Code"] == "UK.OBIE.Header.Invalid"
        fresh = bank.client_credentials(bank.discovery()["token_endpoint"], basic=True)
        r = http.get(f"{bank.base}{RS}/file-payments/{payment_id}", headers=bank.headers(fresh))
        assert r.status_code == 400 and r.json()["Code"] == "UK.OBIE.Resource.NotFound"


def test_a_used_assertion_stays_used_across_a_restart_with_db(tmp_path: Path, held_socket: socket.socket) -> None:
    options = ("--db", str(tmp_path / "bank.sqlite"))
    form = {"grand_type": "client_credentials", "scope": "payments openid", "client_assertion_type": ASSERTION_TYPE}
    with running_sandbox(tmp_path, *options, sock=held_socket) as sandbox, httpx.Client(timeout=10) as http:
        bank = plain_client(sandbox, http)
        token_endpoint = bank.discovery()["token_endpoint"]
        assertion = bank.assertion()
        first = http.post(token_endpoint, data={**form, "client_assertion": assertion})
        assert first.status_code == 200, first.text

    with running_sandbox(tmp_path, *options, sock=held_socket) as sandbox, httpx.Client(timeout=10) as http:
        # The same assertion (same jti, still within its exp) is refused by the restarted bank.
        replay = http.post(token_endpoint, data={**form, "client_assertion": assertion})
        assert replay.status_code == 400
        used = {"error": "invalid_client", "error_description": "client_assertion jti was already used"}
        assert replay.json() == used
        # A fresh assertion of the same client is fine.
        fresh = http.post(token_endpoint, data={**form, "client_assertion": plain_client(sandbox, http).assertion()})
        assert fresh.status_code == 200, fresh.text
