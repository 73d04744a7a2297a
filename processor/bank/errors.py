"""Every way a bank call can fail, as one exception tree.

    BankError                          base; carries operation, interaction_id, retry_safe, ambiguous
    ├── TransportError                 no (complete) HTTP response
    │   ├── ConnectError               the connection was never made: the bank saw nothing
    │   ├── Timeout                    connect/pool timeout (bank saw nothing) or read/write timeout (ambiguous)
    │   └── ConnectionDropped          the connection broke mid-exchange (ambiguous)
    ├── ProtocolError                  a response we cannot understand (unparseable, missing fields)
    │   └── IssuerMismatch             discovery names another issuer: refuse to start
    └── BankHTTPError                  an error status; status, code, message, errors, retry_after
        ├── OAuthError                 {"error", "error_description"} (token, PAR, authorization URL)
        │   ├── InvalidClient          invalid_client
        │   ├── InvalidGrant           invalid_grant
        │   ├── InvalidRequest         invalid_request
        │   └── GeneralError           general_error
        ├── ResourceError              {"Code", "Message", "Errors": [...]} (resource server)
        │   ├── InvalidFormat          UK.OBIE.Resource.InvalidFormat
        │   ├── FieldInvalid           UK.OBIE.Field.Invalid
        │   ├── NotFound               UK.OBIE.Resource.NotFound (and a 404 on an unknown path)
        │   ├── HeaderMissing          UK.OBIE.Header.Missing
        │   ├── HeaderInvalid          UK.OBIE.Header.Invalid
        │   │   └── TokenExpired       ... with message token_expired (403)
        │   ├── FailsControlParameters UK.OBIE.Rules.FailsControlParameters (VRP limits)
        │   └── InvalidConsentStatus   UK.OBIE.Resource.InvalidConsentStatus
        ├── RateLimited                429, whatever the body; retry_after from Retry-After
        └── ServerError                5xx, whatever the body (ambiguous: "commit then fail" exists)

`retry_safe`: repeating the same request (for a creating call: with the same x-idempotency-key, which the client
always does) can neither create a second effect nor is it pointless by construction. True for transport errors,
429 and 5xx; False for semantic 4xx, protocol errors and the issuer mismatch.

`ambiguous`: the bank may have acted on the request although we got no success answer (read timeout, dropped
connection, 5xx). For a creating call the outcome must then be resolved (same key again, or read the resource),
never by a call with a new key.

`error_from_response` maps a raw HTTP response of either error shape onto this tree; it is pure.

`disposition(exc)` is what every flow of the engine does about a failed call, the one classifier:

    reauthenticate   the bank refused the access token (token_expired, or a 401 / an `Authorization` error):
                     refresh the token once and repeat the same request
    retry            nothing happened at the bank, or repeating is safe (connect errors, 429): try again later
    resolve          the bank may have acted (read timeout, dropped connection, 5xx, an answer we cannot read, a 409,
                     the idempotency key refused as used with another body): record the call AMBIGUOUS and
                     resolve it (the same bytes under the same key again, or a read) before anything new
    refuse           a refusal repeating cannot change (any other 4xx, a refused grant): nothing was created
"""

# The names follow the brief and httpx (Timeout, NotFound, ...), not the "Error" suffix rule.
# ruff: noqa: N818

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any

__all__ = [
    "BankError",
    "BankHTTPError",
    "ConnectError",
    "ConnectionDropped",
    "Disposition",
    "ErrorEntry",
    "FailsControlParameters",
    "FieldInvalid",
    "GeneralError",
    "HeaderInvalid",
    "HeaderMissing",
    "InvalidClient",
    "InvalidConsentStatus",
    "InvalidFormat",
    "InvalidGrant",
    "InvalidRequest",
    "IssuerMismatch",
    "NotFound",
    "OAuthError",
    "ProtocolError",
    "RateLimited",
    "ResourceError",
    "ServerError",
    "Timeout",
    "TokenExpired",
    "TransportError",
    "describe",
    "disposition",
    "error_from_response",
    "parse_retry_after",
]


@dataclass(frozen=True)
class ErrorEntry:
    """One entry of a resource error's `Errors` list; `path` names the offending header or field."""

    error_code: str
    message: str
    path: str | None = None


class BankError(Exception):
    """Base of every bank-call failure."""

    retry_safe: bool = False
    ambiguous: bool = False

    def __init__(
        self,
        message: str,
        *,
        operation: str = "",
        interaction_id: str | None = None,
        retry_safe: bool | None = None,
        ambiguous: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.operation = operation
        self.interaction_id = interaction_id
        if retry_safe is not None:
            self.retry_safe = retry_safe
        if ambiguous is not None:
            self.ambiguous = ambiguous
        # Set by the client on creating calls, so the caller can resolve an ambiguous outcome with it.
        self.idempotency_key: str | None = None
        # How many HTTP attempts were made before this error surfaced.
        self.attempts = 1

    def __str__(self) -> str:
        where = f"{self.operation}: " if self.operation else ""
        corr = f" [interaction {self.interaction_id}]" if self.interaction_id else ""
        return f"{where}{self.message}{corr}"


class TransportError(BankError):
    """No complete HTTP response arrived."""

    retry_safe = True


class ConnectError(TransportError):
    """The connection could not be made; the request never left."""

    ambiguous = False


class Timeout(TransportError):
    """A timeout; `ambiguous` is False for connect/pool timeouts (nothing sent), True after sending."""

    ambiguous = True


class ConnectionDropped(TransportError):
    """The connection closed or broke during the exchange: the bank may or may not have acted."""

    ambiguous = True


class ProtocolError(BankError):
    """The bank answered something we cannot read: not the documented shape, missing fields, bad JSON."""

    def __init__(self, message: str, *, status: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.status = status


class IssuerMismatch(ProtocolError):
    """The discovery document's `issuer` differs from the configured issuer: do not talk to this server."""


class BankHTTPError(BankError):
    """An HTTP error status with the bank's code and message."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str = "",
        errors: tuple[ErrorEntry, ...] = (),
        retry_after: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.status = status
        self.code = code
        self.errors = errors
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"{self.operation}: " if self.operation else ""
        code = f" {self.code}" if self.code else ""
        corr = f" [interaction {self.interaction_id}]" if self.interaction_id else ""
        return f"{where}HTTP {self.status}{code}: {self.message}{corr}"


class OAuthError(BankHTTPError):
    """The OAuth error shape: `code` is `error`, `message` is `error_description`."""


class InvalidClient(OAuthError):
    """invalid_client: bad Basic credential or client assertion."""


class InvalidGrant(OAuthError):
    """invalid_grant: code or refresh token unusable (used, expired, wrong verifier or redirect)."""


class InvalidRequest(OAuthError):
    """invalid_request: a parameter is missing or malformed."""


class GeneralError(OAuthError):
    """general_error (authorization URL without request_uri, and the like)."""


class ResourceError(BankHTTPError):
    """The resource-server error shape: `code` is `Code`, `message` is `Message`, `errors` the `Errors` list."""


class InvalidFormat(ResourceError):
    """UK.OBIE.Resource.InvalidFormat: the body does not match the schema or differs from the consent."""


class FieldInvalid(ResourceError):
    """UK.OBIE.Field.Invalid: the uploaded file's records are incorrect."""


class NotFound(ResourceError):
    """UK.OBIE.Resource.NotFound: unknown (or another client's) resource id."""


class HeaderMissing(ResourceError):
    """UK.OBIE.Header.Missing: a required header is absent (`errors[].path` names it)."""


class HeaderInvalid(ResourceError):
    """UK.OBIE.Header.Invalid: a header is invalid (an unknown or wrong token is 401 no_access_token)."""


class TokenExpired(HeaderInvalid):
    """403 UK.OBIE.Header.Invalid token_expired."""


class FailsControlParameters(ResourceError):
    """UK.OBIE.Rules.FailsControlParameters: a VRP breaches its consent's limits."""


class InvalidConsentStatus(ResourceError):
    """UK.OBIE.Resource.InvalidConsentStatus: the consent's state does not allow the operation."""


class RateLimited(BankHTTPError):
    """429 Too Many Requests."""

    retry_safe = True


class ServerError(BankHTTPError):
    """A 5xx answer; the request may have been committed before the failure."""

    retry_safe = True
    ambiguous = True


_OAUTH_CLASSES: dict[str, type[OAuthError]] = {
    "invalid_client": InvalidClient,
    "invalid_grant": InvalidGrant,
    "invalid_request": InvalidRequest,
    "general_error": GeneralError,
}
_RESOURCE_CLASSES: dict[str, type[ResourceError]] = {
    "UK.OBIE.Resource.InvalidFormat": InvalidFormat,
    "UK.OBIE.Field.Invalid": FieldInvalid,
    "UK.OBIE.Resource.NotFound": NotFound,
    "UK.OBIE.NotFound": NotFound,
    "UK.OBIE.Header.Missing": HeaderMissing,
    "UK.OBIE.Header.Invalid": HeaderInvalid,
    "UK.OBIE.Rules.FailsControlParameters": FailsControlParameters,
    "UK.OBIE.Resource.InvalidConsentStatus": InvalidConsentStatus,
}
_MAX_TEXT = 300


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "..."


def _resource_entries(raw: object) -> tuple[ErrorEntry, ...]:
    if not isinstance(raw, list):
        return ()
    out: list[ErrorEntry] = []
    for item in raw:
        if isinstance(item, dict):
            path = item.get("Path")
            out.append(
                ErrorEntry(
                    str(item.get("ErrorCode", "")),
                    str(item.get("Message", "")),
                    str(path) if path is not None else None,
                )
            )
    return tuple(out)


def error_from_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    operation: str = "",
    interaction_id: str | None = None,
    now: datetime | None = None,
) -> BankHTTPError:
    """The exception for an error response (status >= 400), reading either error shape from its body.

    Status decides first for 429 (RateLimited) and 5xx (ServerError); otherwise the body's shape and code
    choose the class. A body of neither shape becomes a plain BankHTTPError carrying its text.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    retry_after = parse_retry_after(lowered.get("retry-after"), now)
    parsed: Any = None
    try:
        parsed = json.loads(body) if body.strip() else None
    except (ValueError, UnicodeDecodeError):
        parsed = None
    code = ""
    message = ""
    entries: tuple[ErrorEntry, ...] = ()
    shape: str | None = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        shape = "oauth"
        code = parsed["error"]
        message = str(parsed.get("error_description") or "")
    elif isinstance(parsed, dict) and isinstance(parsed.get("Code"), str):
        shape = "resource"
        code = parsed["Code"]
        message = str(parsed.get("Message") or "")
        entries = _resource_entries(parsed.get("Errors"))
    else:
        message = _short(body.decode("utf-8", errors="replace"))
    if not message:
        message = code or f"HTTP {status}"
    common: dict[str, Any] = {
        "status": status,
        "code": code,
        "errors": entries,
        "retry_after": retry_after,
        "operation": operation,
        "interaction_id": interaction_id,
    }
    if status == 429:
        return RateLimited(message, **common)
    if status >= 500:
        return ServerError(message, **common)
    if shape == "oauth":
        return _OAUTH_CLASSES.get(code, OAuthError)(message, **common)
    if shape == "resource":
        cls = _RESOURCE_CLASSES.get(code, ResourceError)
        if cls is HeaderInvalid and message.startswith("token_expired"):
            cls = TokenExpired
        return cls(message, **common)
    if status == 404:
        return NotFound(message, **common)
    return BankHTTPError(message, **common)


class Disposition(StrEnum):
    """What a flow does about a failed bank call (see the module docstring)."""

    RETRY = "retry"
    RESOLVE = "resolve"
    REFUSE = "refuse"
    REAUTHENTICATE = "reauthenticate"


def _token_refused(exc: BankError) -> bool:
    if isinstance(exc, TokenExpired):
        return True
    return isinstance(exc, HeaderInvalid) and (
        exc.status == 401 or any(entry.path == "Authorization" for entry in exc.errors)
    )


def _may_follow_a_success(exc: BankError) -> bool:
    # A conflict, or the idempotency key refused (used with another body, still in use): an earlier attempt
    # under the key may have created the resource, so the refusal proves nothing.
    if not isinstance(exc, BankHTTPError):
        return False
    named = any((entry.path or "").lower() == "x-idempotency-key" for entry in exc.errors)
    return exc.status == 409 or named or "different body" in exc.message


def disposition(exc: BankError) -> Disposition:
    """The one classification of a failed bank call that every flow acts on."""
    if _token_refused(exc):
        return Disposition.REAUTHENTICATE
    if exc.ambiguous or isinstance(exc, ProtocolError) or _may_follow_a_success(exc):
        return Disposition.RESOLVE
    if exc.retry_safe:
        return Disposition.RETRY
    if isinstance(exc, BankHTTPError) and 400 <= exc.status < 500:
        return Disposition.REFUSE
    return Disposition.RESOLVE  # anything else: never taken as final without knowing


def describe(exc: BankError) -> str:
    """A short line for a failed call: `HTTP 403 UK.OBIE.Header.Invalid: token_expired`, or the error's type
    and message."""
    if isinstance(exc, BankHTTPError):
        code = f" {exc.code}" if exc.code else ""
        return f"HTTP {exc.status}{code}: {exc.message}"
    return f"{type(exc).__name__}: {exc.message}"
