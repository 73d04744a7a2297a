"""Structured logs for the long-running parts: JSON lines (production) or console (development), on stderr.

Two small processors guard what leaves the process, whatever a call site passed by mistake:

- `redact_secrets` replaces the value of any key that names a secret (tokens, authorization codes, PKCE
  verifiers, keys, passwords, the Basic credential, client assertions) with `[redacted]` (`state` and `code`
  are left alone: in our logs they are flow states and error codes);
- `mask_accounts` keeps only the last four characters of values under keys that name an account number.

The engine's workers bind `batch_id` / `mandate_id` / `payment_id` for the item a task runs, the callback API
binds the flow's id once the redirect or approval link names it (structlog's context variables), and the bank
client logs `correlation_id` (the `x-fapi-interaction-id`) on each call, so one batch's lines can be followed
across steps and instances. `timestamp` is UTC with milliseconds.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from processor.domain.masking import mask_account
from processor.domain.time import iso_ms

SECRET_KEYS: Final = frozenset(
    {
        "access_token",
        "refresh_token",
        "token",
        "auth_code",
        "authorization_code",
        "code_verifier",
        "client_assertion",
        "client_secret",
        "secret",
        "password",
        "authorization",
        "basic_credential",
        "signing_key_pem",
        "private_key",
        "oauth_state",
        "approval_token",
    }
)
ACCOUNT_KEYS: Final = frozenset({"account_number", "origin_account", "destination_account", "account"})
REDACTED: Final = "[redacted]"


def redact_secrets(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: secret-named keys lose their values."""
    for key in SECRET_KEYS.intersection(event):
        if event[key] is not None:
            event[key] = REDACTED
    return event


def mask_accounts(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: account numbers keep their last four characters only."""
    for key in ACCOUNT_KEYS.intersection(event):
        if isinstance(event[key], str | int):
            event[key] = mask_account(event[key])
    return event


def timestamp_ms(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: `timestamp`, UTC ISO 8601 with milliseconds (`2026-11-24T09:30:00.123Z`)."""
    event["timestamp"] = iso_ms(datetime.now(UTC))
    return event


def add_fields(**fields: str) -> structlog.types.Processor:
    """A processor adding constant fields (e.g. the instance name) to every line."""

    def add(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in fields.items():
            event.setdefault(key, value)
        return event

    return add


def configure_logging(fmt: str = "json", *, level: int = logging.INFO, **fields: str) -> None:
    """Configure structlog (and the stdlib loggers librdkafka writes to) for a long-running process."""
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            timestamp_ms,
            add_fields(**fields),
            redact_secrets,
            mask_accounts,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
