"""The approver's HTML handling (processor/devtools/approver.py): finding the decision forms on the sandbox bank's
real consent page template and on variations of it, and the browser-like sequence of requests (over
httpx.MockTransport, no network)."""

from __future__ import annotations

from urllib.parse import parse_qs

import httpx
import pytest

from processor.devtools.approver import ApprovalError, approve, decision_form, page_text, parse_forms
from sandbox.pages import template

REQUEST_URI = "urn:ietf:params:oauth:request_uri:abc&123"


def consent_page(action: str = "/auth/decision") -> str:
    """The sandbox's own consent page template, filled as the bank fills it (values HTML-escaped)."""
    return template("consent.html").substitute(
        title="Authorise a funds dispersion",
        client_name="Dispersion",
        consent_id="pay-fi-1",
        details="<table><tr><td>5 transfers</td></tr></table>",
        action=action,
        request_uri=REQUEST_URI.replace("&", "&amp;"),
        expires_at="2030-01-01T00:00:00Z",
    )


def test_the_real_consent_page_has_an_approve_and_a_reject_form() -> None:
    forms = parse_forms(consent_page())
    assert len(forms) == 2
    assert all(f.action == "/auth/decision" and f.method == "post" for f in forms)
    assert all(f.fields == {"request_uri": REQUEST_URI} for f in forms)  # entity-decoded like a browser does
    assert [(b.name, b.value, b.label, b.element_id) for f in forms for b in f.buttons] == [
        ("decision", "approve", "Approve", "approve"),
        ("decision", "reject", "Reject", "reject"),
    ]


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_decision_form_gives_the_fields_a_browser_posts(decision: str) -> None:
    form, data = decision_form(consent_page(), decision)
    assert form.action == "/auth/decision"
    assert data == {"request_uri": REQUEST_URI, "decision": decision}


def test_buttons_are_found_by_label_and_input_submit_too() -> None:
    html = """<form method=POST action="/d"><input type=hidden name=x value=1>
      <input type="submit" name="go" value="Approve"></form>
      <form method="post" action="/d"><input type=hidden name=x value=1><button>  Reject  </button></form>"""
    _, approve_data = decision_form(html, "approve")
    _, reject_data = decision_form(html, "reject")
    assert approve_data == {"x": "1", "go": "Approve"}
    assert reject_data == {"x": "1"}  # a button without a name adds nothing


def test_inputs_outside_forms_and_other_input_types_are_ignored() -> None:
    html = """<input type=hidden name=outside value=1>
      <form method=post action=/d><input type=checkbox name=c value=on><input name=t value=text>
      <button value=approve name=decision>OK</button></form>"""
    (form,) = parse_forms(html)
    assert form.fields == {"t": "text"}


def test_a_page_without_the_decision_says_what_it_offers() -> None:
    with pytest.raises(ApprovalError, match=r"no 'approve' button.*offers: reject"):
        decision_form('<form method=post action=/d><button value="reject">Reject</button></form>', "approve")
    with pytest.raises(ApprovalError, match="not a consent page"):
        decision_form("<html><body><h1>Authorization request expired</h1></body></html>", "approve")


def test_a_form_that_does_not_post_is_refused() -> None:
    with pytest.raises(ApprovalError, match="method GET"):
        decision_form('<form action=/d><button name=decision value="approve">A</button></form>', "approve")


def test_page_text_leaves_out_head_and_styles() -> None:
    html = "<html><head><title>T</title><style>b{}</style></head><body><h1>Authorization  received</h1>\n<p>ok</p>"
    assert page_text(html) == "Authorization received ok"


def test_approve_walks_link_consent_page_decision_and_callback() -> None:
    seen: list[str] = []
    code = "secret-one-time-code"

    def bank_and_api(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.host}:{request.url.port}{request.url.path}")
        if request.url.path.startswith("/approve/"):
            return httpx.Response(302, headers={"location": "http://bank:8700/auth?request_uri=urn:x"})
        if request.url.path == "/auth":
            return httpx.Response(200, text=consent_page(), headers={"content-type": "text/html"})
        if request.url.path == "/auth/decision":
            posted = parse_qs(request.content.decode())
            assert posted == {"request_uri": [REQUEST_URI], "decision": ["approve"]}
            location = f"http://api:8600/callback?code={code}&state=s1&iss=http%3A%2F%2Fbank%3A8700"
            return httpx.Response(303, headers={"location": location})
        if request.url.path == "/callback":
            return httpx.Response(200, text="<html><body><h1>Authorization received</h1></body></html>")
        return httpx.Response(404)

    with httpx.Client(transport=httpx.MockTransport(bank_and_api)) as client:
        result = approve("http://api:8600/approve/file/B1?t=tok", client=client)
    assert seen == [
        "GET api:8600/approve/file/B1",
        "GET bank:8700/auth",
        "POST bank:8700/auth/decision",
        "GET api:8600/callback",
    ]
    assert result.ok
    assert result.callback_status == 200
    assert result.callback_text == "Authorization received"
    assert result.consent_page == "http://bank:8700/auth"
    assert result.callback_url == "http://api:8600/callback"
    assert result.outcome["state"] == "s1"
    assert result.error is None
    assert code not in repr(result)  # the authorization code stays out of logs


def test_approve_names_the_failing_step_without_the_query() -> None:
    def gone(request: httpx.Request) -> httpx.Response:
        return httpx.Response(410, text="<h1>The approval deadline passed</h1>")

    with (
        httpx.Client(transport=httpx.MockTransport(gone)) as client,
        pytest.raises(ApprovalError, match="opening the approval link: HTTP 410") as caught,
    ):
        approve("http://api:8600/approve/file/B1?t=secret-token", client=client)
    assert "secret-token" not in str(caught.value)


def test_approve_refuses_an_unknown_decision() -> None:
    with pytest.raises(ValueError, match="decision"):
        approve("http://api/approve", decision="maybe")
