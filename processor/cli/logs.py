"""Structured logs for the long-running parts: JSON lines (production) or console (development), on stderr.

Small processors guard what leaves the process, whatever a call site passed by mistake:

- `redact_secrets` replaces the value of any key that names a secret (tokens, authorization codes, PKCE
  verifiers, keys, passwords, the Basic credential, client assertions) with `[redacted]`, at any depth of nested
  mappings and lists (`state` and `code` are left alone as keys: in our logs they are flow states and error codes);
- `scrub_text` removes secrets from free text: the message, a formatted traceback (which may quote a redirect URL
  or a request body) and every string value. It knows the query and form parameters and headers that carry
  secrets (`code=`, `state=`, `code_verifier=`, `client_assertion=`, `Bearer …`, `Basic …`, …);
- `mask_accounts` keeps only the last four characters of values under keys that name an account number.

Tracebacks are rendered plain, without local variables, in both formats (a pretty traceback's locals printed an
authorization code once). The standard library's loggers (librdkafka through confluent-kafka, uvicorn, httpx) go
through the same processors (structlog's `ProcessorFormatter`), so JSON mode is JSON on every line.

The engine's workers bind `batch_id` / `mandate_id` / `payment_id` for the item a task runs, the callback API
binds the flow's id once the redirect or approval link names it (structlog's context variables), and the bank
client logs `correlation_id` (the `x-fapi-interaction-id`) on each call, so one batch's lines can be followed
across steps and instances. `timestamp` is UTC with milliseconds.
"""

from __future__ import annotations

import logging
import re
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


# Secrets in free text: query / form parameters, headers, JSON members. The value ends at a separator.
_SECRET_PARAMS = (
    "code|state|code_verifier|client_assertion|client_secret|access_token|refresh_token|id_token|t|request_uri|"
    "assertion|password|token"
)
_TEXT_SECRETS = (
    re.compile(rf"(?i)(?<![\w-])((?:{_SECRET_PARAMS})=)[^&\s'\"<>;,)]+"),
    re.compile(r"(?i)\b((?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(rf"(?i)(['\"](?:{_SECRET_PARAMS})['\"]\s*:\s*['\"])[^'\"]*"),
)


def scrub(text: str) -> str:
    """`text` with every secret-looking parameter, header or JSON member value replaced by `[redacted]`."""
    for pattern in _TEXT_SECRETS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, MutableMapping):
        return {k: REDACTED if k in SECRET_KEYS and v is not None else _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item) for item in value]
    return value


def redact_secrets(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: secret-named keys lose their values at any depth; strings are scrubbed."""
    for key, value in list(event.items()):
        if key in SECRET_KEYS and value is not None:
            event[key] = REDACTED
        elif isinstance(value, str | MutableMapping | list | tuple):
            event[key] = _redacted(value)
    return event


def scrub_text(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: the message and a formatted traceback lose secrets quoted in them."""
    for key in ("event", "exception"):
        if isinstance(event.get(key), str):
            event[key] = scrub(event[key])
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


def _pre_chain(fields: dict[str, str]) -> list[structlog.types.Processor]:
    """Processors every line passes, ours and the standard library's alike, before it is rendered."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        timestamp_ms,
        add_fields(**fields),
        structlog.processors.format_exc_info,  # plain text, no local variables
        redact_secrets,
        scrub_text,
        mask_accounts,
    ]


def renderer(fmt: str) -> structlog.types.Processor:
    """JSON lines, or the console form (tracebacks already formatted plain by `format_exc_info`)."""
    if fmt == "json":
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)


def configure_logging(fmt: str = "json", *, level: int = logging.INFO, **fields: str) -> None:
    """Configure structlog and the standard library's loggers (librdkafka, uvicorn, httpx) for a long-running
    process: one format and the same redaction on every line, on stderr."""
    chain = _pre_chain(fields)
    structlog.configure(
        processors=[*chain, renderer(fmt)],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *chain],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer(fmt)],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "httpcore"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
