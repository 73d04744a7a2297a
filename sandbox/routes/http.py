"""Request checks and responses shared by every route: bodies, headers, the interaction id."""

from __future__ import annotations

import ipaddress
import uuid
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response

from sandbox.errors import OAuthError, header_invalid, header_missing, invalid_format
from sandbox.jsonutil import dumps, loads
from sandbox.state import Bank

INTERACTION = "x-fapi-interaction-id"


async def read_body(bank: Bank, request: Request) -> bytes:
    """The raw body, refused past the configured size with the spec's format error."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > bank.config.max_body_bytes:
        raise invalid_format(f"body larger than {bank.config.max_body_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > bank.config.max_body_bytes:
            raise invalid_format(f"body larger than {bank.config.max_body_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """Parse a JSON object body (fractions as `Decimal`); anything else is 400 InvalidFormat."""
    if not raw.strip():
        raise invalid_format("empty body")
    try:
        data = loads(raw)
    except (ValueError, RecursionError) as exc:
        raise invalid_format(f"body is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise invalid_format("body must be a JSON object")
    return data


def require_json_content_type(request: Request) -> None:
    """Resource POSTs must say `Content-Type: application/json`."""
    ctype = request.headers.get("content-type", "")
    if ctype.split(";")[0].strip().lower() != "application/json":
        raise header_invalid("Content-Type", "invalid_message_format: Content-Type must be application/json")


def interaction_id(request: Request) -> str:
    """The required `x-fapi-interaction-id`, which must be a UUID."""
    value = request.headers.get(INTERACTION)
    if value is None:
        raise header_missing(INTERACTION, f"missing_header: {INTERACTION} is required")
    try:
        uuid.UUID(value)
    except ValueError:
        raise header_invalid(INTERACTION, f"invalid_header: {INTERACTION} must be a UUID") from None
    return value


def require_fapi_headers(bank: Bank, request: Request) -> None:
    """`x-fapi-financial-id` (the bank's participant id) and `x-fapi-customer-ip-address` (an IP)."""
    fid = request.headers.get("x-fapi-financial-id")
    if fid is None:
        raise header_missing("x-fapi-financial-id", "missing_header: x-fapi-financial-id is required")
    if fid != bank.config.financial_id:
        raise header_invalid("x-fapi-financial-id", "invalid_header: x-fapi-financial-id is not this bank's")
    ip = request.headers.get("x-fapi-customer-ip-address")
    if ip is None:
        raise header_missing("x-fapi-customer-ip-address", "missing_header: x-fapi-customer-ip-address is required")
    try:
        ipaddress.ip_address(ip.strip())
    except ValueError:
        raise header_invalid(
            "x-fapi-customer-ip-address", "invalid_header: x-fapi-customer-ip-address must be an IP address"
        ) from None


def json_response(body: object, status: int = 200, request: Request | None = None) -> Response:
    """A JSON response, echoing the request's interaction id when it has one."""
    headers: dict[str, str] = {}
    if request is not None and request.headers.get(INTERACTION):
        headers[INTERACTION] = request.headers[INTERACTION]
    return Response(dumps(body), status_code=status, headers=headers, media_type="application/json")


async def read_form(bank: Bank, request: Request) -> dict[str, str]:
    """Parse a urlencoded form strictly: right content type, no repeated parameters."""
    ctype = request.headers.get("content-type", "")
    if ctype.split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
        raise OAuthError("invalid_request", "Content-Type must be application/x-www-form-urlencoded")
    raw = await read_body(bank, request)
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise OAuthError("invalid_request", "form body is not UTF-8") from None
    form: dict[str, str] = {}
    for key, value in pairs:
        if key in form:
            raise OAuthError("invalid_request", f"parameter {key} repeated")
        form[key] = value
    return form
