"""The consent page driven once in a real headless Chromium: the approver sees the file and approves."""

from __future__ import annotations

import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from plain_client import RS, PlainClient, file_hash, file_payload, to_json, with_references
from playwright.sync_api import sync_playwright
from sandbox_process import running_sandbox

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class _Redirects(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.path)
        body = b"<html><body><p id='done'>redirect received</p></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_approver_approves_in_a_real_browser(tmp_path: Path, chromium_path: str) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Redirects)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    redirect_uri = f"http://127.0.0.1:{port}/callback"
    try:
        with (
            running_sandbox(tmp_path, init_args=("--redirect-uri", redirect_uri)) as sandbox,
            httpx.Client(timeout=10) as http,
        ):
            c = sandbox.client
            bank = PlainClient(
                http,
                sandbox.base_url,
                c["client_id"],
                c["client_secret"],
                c["kid"],
                sandbox.signing_key_pem,
                redirect_uri,
            )
            disc = bank.discovery()
            token = bank.client_credentials(disc["token_endpoint"], basic=False)
            payload = file_payload("1234567890", [("5551110001", "1250.00"), ("5551110002", "749.99")])
            initiation = {
                "SupplementaryData": payload,
                "FileType": "UK.OBIE.PaymentInitiation.4.0",
                "FileHash": file_hash(payload),
                "FileReference": "BROWSER-RUN-7",
                "NumberOfTransactions": "2",
                "ControlSum": Decimal("1999.99"),
            }
            r = http.post(
                f"{bank.base}{RS}/file-payment-consents",
                content=to_json({"Data": {"Initiation": initiation}}),
                headers=bank.headers(token),
            )
            assert r.status_code == 201, r.text
            consent_id = r.json()["Data"]["ConsentId"]
            r = http.post(
                f"{bank.base}{RS}/file-payment-consents/{consent_id}/file",
                content=to_json(with_references(payload, consent_id)),
                headers=bank.headers(token),
            )
            assert r.status_code == 201, r.text
            auth_url, verifier, state = bank.start_authorization(disc, consent_id, basic=False)

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_FLAGS)
                page = browser.new_page()
                page.goto(auth_url)
                text = page.inner_text("body")
                assert "BROWSER-RUN-7" in text
                assert "1999.99" in text or "1,999.99" in text
                assert "GTQ" in text
                page.screenshot(path=str(tmp_path / "consent-page.png"), full_page=True)
                page.click("#approve")
                page.wait_for_selector("#done")
                landed = page.url
                browser.close()

            assert landed.startswith(redirect_uri)
            query = parse_qs(urlsplit(landed).query)
            assert query["state"] == [state]
            # Chromium also asks for /favicon.ico; the redirect itself must have arrived.
            assert any(p.startswith("/callback?") for p in _Redirects.seen)
            tokens = bank.exchange(disc["token_endpoint"], query["code"][0], verifier, basic=False)
            assert tokens["scope"] == f"payments:{consent_id} openid"
    finally:
        server.shutdown()
