"""sandbox.oauth without HTTP: each endpoint is a function of plain values returning status, body and headers."""

# Fixtures are imported from sandbox_auth_fixtures by name; pytest injects them as parameters of the same name.
# ruff: noqa: F811

from __future__ import annotations

from manual_clock import ManualClock
from sandbox_auth_fixtures import (  # noqa: F401 (fixtures)
    REDIRECT_URI,
    Tpp,
    bank,
    clock,
    file_consent,
    other_tpp,
    par_form,
    pkce,
    query_of,
    tpp,
)

from sandbox.oauth.answer import NO_STORE, TEXT
from sandbox.oauth.discovery import discovery
from sandbox.oauth.grants import token_endpoint
from sandbox.oauth.par import authorization_url, decide, pending_authorization, push_authorization_request
from sandbox.oauth.signature import message_signature
from sandbox.oauth.tokens import TOKEN_KIND
from sandbox.state import Bank


def basic(tpp: Tpp) -> str:
    return tpp.basic()["Authorization"]


def test_client_credentials_answer(bank: Bank, tpp: Tpp) -> None:
    answer = token_endpoint(bank, {"grand_type": "client_credentials", "scope": "payments openid"}, basic(tpp))
    assert answer.status == 200
    assert answer.headers == NO_STORE
    assert isinstance(answer.body, dict) and answer.body["scope"] == "payments"
    assert bank.store.get(TOKEN_KIND, answer.body["access_token"]) is not None


def test_an_error_is_an_answer_in_the_oauth_shape(bank: Bank, tpp: Tpp) -> None:
    answer = token_endpoint(bank, {"grand_type": "client_credentials", "scope": "accounts"}, basic(tpp))
    assert (answer.status, answer.headers) == (400, {})
    assert answer.body == {"error": "invalid_scope", "error_description": "scope must be 'payments openid'"}
    assert token_endpoint(bank, {"grand_type": "client_credentials"}, None).body == {
        "error": "invalid_client",
        "error_description": "client authentication is required: Authorization: Basic <token> (client_secret_basic) "
        "or client_assertion_type + client_assertion (private_key_jwt)",
    }


def test_the_whole_code_flow_without_http(bank: Bank, tpp: Tpp, clock: ManualClock) -> None:
    consent_id = file_consent(bank, tpp)
    verifier, challenge = pkce()
    pushed = push_authorization_request(bank, par_form(tpp, consent_id, clock.now().timestamp(), challenge), None)
    assert pushed.status == 200 and pushed.headers == {"Cache-Control": "no-store"}
    assert isinstance(pushed.body, dict)
    request_uri = pushed.body["request_uri"]
    query = {"request_uri": request_uri, "response_type": "code", "scope": "payments"}
    url = authorization_url(bank, basic(tpp), consent_id, query)
    assert url.media_type == TEXT and str(url.body).startswith("http://sandbox.test/auth?")
    location = decide(bank, pending_authorization(bank, request_uri), approve=True)
    code = query_of(location)["code"]
    form = {
        "grand_type": "authorization_code",
        "scope": "payments",
        "code": code,
        "redirect_uri": REDIRECT_URI,
        "code_verifier": verifier,
    }
    tokens = token_endpoint(bank, form, basic(tpp))
    assert tokens.status == 200, tokens.body
    assert isinstance(tokens.body, dict) and tokens.body["scope"] == f"payments:{consent_id} openid"


def test_discovery_and_message_signature_answers(bank: Bank, tpp: Tpp) -> None:
    assert discovery(bank, basic(tpp)).status == 200
    assert discovery(bank, None).body["error"] == "invalid_client"  # type: ignore[index]
    empty = message_signature(b"  ")
    assert (empty.status, empty.body, empty.media_type) == (400, "The payload is empty", TEXT)
