"""The log processors that keep secrets and account numbers out of the processor's logs (pure callables, checked
with structlog's own capture and with the JSON renderer the service uses)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import structlog
from structlog.testing import capture_logs

from processor.cli.logs import REDACTED, add_fields, mask_accounts, redact_secrets, timestamp_ms
from processor.domain.masking import mask_account


def test_secret_named_fields_are_redacted_and_the_rest_kept() -> None:
    event: dict[str, Any] = {
        "event": "token exchanged",
        "access_token": "at-123",
        "refresh_token": "rt-456",
        "code_verifier": "v" * 43,
        "client_assertion": "eyJhbGciOiJQUzI1NiJ9.x.y",
        "client_secret": "shh",
        "approval_token": "tok",
        "state": "AUTHORIZED",  # a flow state, not the OAuth state: kept
        "code": "UK.OBIE.Field.Invalid",  # an error code: kept
        "batch_id": "B-1",
    }
    out = redact_secrets(None, "info", dict(event))
    for key in (
        "access_token",
        "refresh_token",
        "code_verifier",
        "client_assertion",
        "client_secret",
        "approval_token",
    ):
        assert out[key] == REDACTED, key
    assert out["state"] == "AUTHORIZED" and out["code"] == "UK.OBIE.Field.Invalid" and out["batch_id"] == "B-1"


def test_a_missing_secret_stays_none() -> None:
    assert redact_secrets(None, "info", {"event": "x", "refresh_token": None})["refresh_token"] is None


def test_account_numbers_keep_their_last_four_characters() -> None:
    assert mask_account("200100300") == "****0300"
    assert mask_account("123") == "****123"
    assert mask_account(None) == mask_account("") == "?"
    out = mask_accounts(None, "info", {"event": "x", "account_number": "3001234567", "amount": "10.00"})
    assert out == {"event": "x", "account_number": "****4567", "amount": "10.00"}


def test_a_configured_logger_writes_no_secret() -> None:
    lines: list[str] = []
    structlog.configure(
        processors=[add_fields(instance="p-1"), redact_secrets, mask_accounts, structlog.processors.JSONRenderer()],
        logger_factory=structlog.ReturnLoggerFactory(),
    )
    try:
        logger = structlog.get_logger("t")
        lines.append(logger.info("exchange", access_token="at-secret-value", account_number="200100399"))
    finally:
        structlog.reset_defaults()
    record = json.loads(lines[0])
    assert record == {"event": "exchange", "access_token": REDACTED, "account_number": "****0399", "instance": "p-1"}
    assert "at-secret-value" not in lines[0]


def test_capture_logs_sees_the_fields_call_sites_bind() -> None:
    with capture_logs(processors=[redact_secrets]) as logs:
        structlog.get_logger("t").warning("refresh failed", mandate_id="M-1", refresh_token="rt")
    assert logs == [{"event": "refresh failed", "mandate_id": "M-1", "refresh_token": REDACTED, "log_level": "warning"}]


def test_timestamps_are_utc_with_milliseconds() -> None:
    event = timestamp_ms(None, "info", {"event": "x"})
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", event["timestamp"]), event
    written = datetime.strptime(event["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - written).total_seconds()) < 60


def test_nested_secrets_and_secrets_in_text_are_redacted() -> None:
    from processor.cli.logs import scrub, scrub_text

    event: dict[str, Any] = {
        "event": "exchange failed for http://h/callback?code=abc123&state=s-xyz&iss=http%3A%2F%2Fbank",
        "request": {"headers": {"authorization": "Basic Zm9vOmJhcg=="}, "form": {"code_verifier": "v" * 43}},
        "attempts": [{"access_token": "at-1"}, "Bearer eyJ.a.b"],
        "batch_id": "B-1",
    }
    out = scrub_text(None, "error", redact_secrets(None, "error", event))
    text = json.dumps(out)
    for secret in ("abc123", "s-xyz", "Zm9vOmJhcg", "v" * 43, "at-1", "eyJ.a.b"):
        assert secret not in text, secret
    assert out["batch_id"] == "B-1" and "iss=http%3A%2F%2Fbank" in out["event"]  # the rest is kept
    assert (
        scrub('{"access_token": "at-9", "token_type": "Bearer"}')
        == '{"access_token": "[redacted]", "token_type": "Bearer"}'
    )
