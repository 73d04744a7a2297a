"""Both error shapes of the spec, from raw responses, onto the exception tree."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from processor.bank import errors
from processor.bank.errors import error_from_response, parse_retry_after


def resource(code: str, message: str, path: str | None = None) -> bytes:
    entry = {"ErrorCode": code, "Message": message}
    if path:
        entry["Path"] = path
    return json.dumps({"Code": code, "Message": message, "Errors": [entry]}).encode()


def oauth(error: str, description: str) -> bytes:
    return json.dumps({"error": error, "error_description": description}).encode()


# Every error row of the spec's Errors section, plus the codes DESIGN.md and the sandbox add.
SPEC_ROWS = [
    (400, oauth("invalid_client", "Authorization header must have the form Basic <token>"), errors.InvalidClient),
    (400, oauth("general_error", "request_uri_not_specified"), errors.GeneralError),
    (400, oauth("invalid_grant", "invalid_auth_code_request_uri"), errors.InvalidGrant),
    (400, oauth("invalid_request", "missing required parameter: scope"), errors.InvalidRequest),
    (400, oauth("invalid_scope", "scope must be 'payments openid'"), errors.OAuthError),
    (400, resource("UK.OBIE.Resource.InvalidFormat", "invalid_message_format: x"), errors.InvalidFormat),
    (400, resource("UK.OBIE.Field.Invalid", "incorrect_records: hash differs"), errors.FieldInvalid),
    (401, resource("UK.OBIE.Header.Invalid", "no_access_token", "Authorization"), errors.HeaderInvalid),
    (401, resource("UK.OBIE.Header.Missing", "missing_authorization_header", "Authorization"), errors.HeaderMissing),
    (403, resource("UK.OBIE.Header.Invalid", "token_expired", "Authorization"), errors.TokenExpired),
    (400, resource("UK.OBIE.Resource.NotFound", "resource_not_found: x"), errors.NotFound),
    (
        400,
        resource("UK.OBIE.Rules.FailsControlParameters", "over limit", "MaximumIndividualAmount"),
        errors.FailsControlParameters,
    ),
    (400, resource("UK.OBIE.Resource.InvalidConsentStatus", "invalid_consent_status"), errors.InvalidConsentStatus),
    (400, resource("UK.OBIE.Something.New", "new"), errors.ResourceError),
]


@pytest.mark.parametrize(
    ("status", "body", "cls"), SPEC_ROWS, ids=[r[2].__name__ + str(i) for i, r in enumerate(SPEC_ROWS)]
)
def test_each_shape_maps_to_its_class_and_is_not_retry_safe(status: int, body: bytes, cls: type) -> None:
    error = error_from_response(status, {}, body, operation="op", interaction_id="iid-1")
    assert type(error) is cls
    assert error.status == status
    assert error.interaction_id == "iid-1"
    assert error.operation == "op"
    assert not error.retry_safe
    assert not error.ambiguous
    parsed = json.loads(body)
    assert error.code == parsed.get("error", parsed.get("Code"))
    assert error.message == parsed.get("error_description", parsed.get("Message"))


def test_resource_error_entries_and_path() -> None:
    error = error_from_response(
        401, {}, resource("UK.OBIE.Header.Missing", "missing_authorization_header", "Authorization")
    )
    assert isinstance(error, errors.ResourceError)
    assert error.errors == (
        errors.ErrorEntry("UK.OBIE.Header.Missing", "missing_authorization_header", "Authorization"),
    )
    assert "HTTP 401 UK.OBIE.Header.Missing: missing_authorization_header" in str(error)


def test_oauth_and_resource_share_the_base_and_hierarchy() -> None:
    expired = error_from_response(403, {}, resource("UK.OBIE.Header.Invalid", "token_expired"))
    assert isinstance(expired, errors.HeaderInvalid)
    assert isinstance(expired, errors.ResourceError)
    assert isinstance(expired, errors.BankHTTPError)
    assert isinstance(expired, errors.BankError)
    assert issubclass(errors.InvalidClient, errors.OAuthError)
    assert issubclass(errors.Timeout, errors.TransportError)
    assert issubclass(errors.IssuerMismatch, errors.ProtocolError)


@pytest.mark.parametrize(
    "body",
    [
        oauth("temporarily_unavailable", "slow down"),
        resource("UK.OBIE.UnexpectedError", "too_many_requests: slow down"),
        b"",
    ],
)
def test_429_is_rate_limited_whatever_the_shape(body: bytes) -> None:
    error = error_from_response(429, {"Retry-After": "3"}, body)
    assert type(error) is errors.RateLimited
    assert error.retry_safe
    assert not error.ambiguous
    assert error.retry_after == 3.0


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_is_server_error_retry_safe_and_ambiguous(status: int) -> None:
    error = error_from_response(status, {"retry-after": "1"}, resource("UK.OBIE.UnexpectedError", "server_error: x"))
    assert type(error) is errors.ServerError
    assert error.retry_safe and error.ambiguous
    assert error.code == "UK.OBIE.UnexpectedError"
    assert error.retry_after == 1.0


def test_plain_text_and_html_bodies_keep_their_text() -> None:
    error = error_from_response(400, {}, b"The payload is empty")
    assert type(error) is errors.BankHTTPError
    assert error.message == "The payload is empty"
    assert error.code == ""
    error = error_from_response(404, {}, b"<html>nope</html>")
    assert isinstance(error, errors.NotFound)
    long = error_from_response(400, {}, b"x" * 5000)
    assert len(long.message) < 400


def test_retry_after_forms() -> None:
    now = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after("Mon, 02 Nov 2026 09:00:30 GMT", now) == 30.0
    assert parse_retry_after("Mon, 02 Nov 2026 08:00:00 GMT", now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("-5") is None
    assert parse_retry_after(None) is None


def test_transport_errors_flags() -> None:
    assert errors.ConnectError("x").retry_safe and not errors.ConnectError("x").ambiguous
    assert errors.Timeout("x").ambiguous
    assert not errors.Timeout("x", ambiguous=False).ambiguous
    assert errors.ConnectionDropped("x").ambiguous and errors.ConnectionDropped("x").retry_safe
    assert not errors.ProtocolError("x").retry_safe
    assert "[interaction abc]" in str(errors.Timeout("t", operation="A1", interaction_id="abc"))


DISPOSITIONS = [
    (errors.ConnectError("refused"), errors.Disposition.RETRY),
    (errors.Timeout("connect", ambiguous=False), errors.Disposition.RETRY),
    (error_from_response(429, {}, b""), errors.Disposition.RETRY),
    (errors.Timeout("read"), errors.Disposition.RESOLVE),
    (errors.ConnectionDropped("reset"), errors.Disposition.RESOLVE),
    (error_from_response(503, {}, b""), errors.Disposition.RESOLVE),
    (errors.ProtocolError("unreadable 201"), errors.Disposition.RESOLVE),
    (error_from_response(403, {}, resource("UK.OBIE.Header.Invalid", "token_expired", "Authorization")), "reauth"),
    (error_from_response(401, {}, resource("UK.OBIE.Header.Invalid", "no_access_token", "Authorization")), "reauth"),
    (error_from_response(401, {}, resource("UK.OBIE.Header.Invalid", "bad token")), "reauth"),
    (error_from_response(400, {}, resource("UK.OBIE.Header.Invalid", "x-fapi-interaction-id", "x-fapi")), "refuse"),
    (error_from_response(400, {}, oauth("invalid_grant", "refresh token revoked")), errors.Disposition.REFUSE),
    (error_from_response(400, {}, resource("UK.OBIE.Rules.FailsControlParameters", "over")), "refuse"),
    (error_from_response(404, {}, b"no such path"), errors.Disposition.REFUSE),
    # A refusal that may follow a lost success proves nothing: resolved by the same bytes again, or a read.
    (error_from_response(409, {}, b"conflict"), errors.Disposition.RESOLVE),
    (
        error_from_response(
            400,
            {},
            resource(
                "UK.OBIE.Header.Invalid",
                "invalid_header: x-idempotency-key was already used with a different body",
                "x-idempotency-key",
            ),
        ),
        errors.Disposition.RESOLVE,
    ),
]


@pytest.mark.parametrize(("error", "expected"), DISPOSITIONS, ids=[type(e).__name__ for e, _ in DISPOSITIONS])
def test_one_disposition_for_every_flow(error: errors.BankError, expected: str) -> None:
    wanted = {"reauth": errors.Disposition.REAUTHENTICATE, "refuse": errors.Disposition.REFUSE}.get(expected, expected)
    assert errors.disposition(error) is wanted


def test_describe_names_status_and_code() -> None:
    refused = error_from_response(400, {}, resource("UK.OBIE.Rules.FailsControlParameters", "over the limit"))
    assert errors.describe(refused) == "HTTP 400 UK.OBIE.Rules.FailsControlParameters: over the limit"
    assert errors.describe(errors.Timeout("read timed out")) == "Timeout: read timed out"
