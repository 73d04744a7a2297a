"""`x-idempotency-key` on resource-creating POSTs.

Same key and same body: the stored response again (the same resource). Same key, another body: 400 and
nothing changes. Keys are scoped per client and operation, and limited to 40 characters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from decimal import Decimal

import orjson
from starlette.responses import Response

from sandbox.errors import header_invalid, invalid_format
from sandbox.filecheck import es_number
from sandbox.state import Bank

KIND = "idempotency"
HEADER = "x-idempotency-key"
MAX_LENGTH = 40


def check_key(key: str | None) -> str | None:
    """Validate the header value (None when absent)."""
    if key is None:
        return None
    if not key.strip() or len(key) > MAX_LENGTH:
        raise header_invalid(HEADER, f"invalid_header: {HEADER} must be 1 to {MAX_LENGTH} characters")
    return key


async def idempotent(
    bank: Bank, key: str | None, client_id: str, operation: str, body: bytes, create: Callable[[], Awaitable[Response]]
) -> Response:
    """Run `create` once per (client, operation, key); replay its stored response afterwards."""
    key = check_key(key)
    if key is None:
        return await create()
    slot = f"{client_id}\n{operation}\n{key}"
    digest = hashlib.sha256(body).hexdigest()
    seen = bank.store.get(KIND, slot)
    if seen is not None:
        if seen["body_sha256"] != digest:
            raise header_invalid(HEADER, f"invalid_header: {HEADER} was already used with a different body")
        return Response(seen["response"].encode(), status_code=seen["status"], media_type="application/json")
    response = await create()
    if 200 <= response.status_code < 300:
        bank.store.put(
            KIND,
            slot,
            {"body_sha256": digest, "status": response.status_code, "response": bytes(response.body).decode()},
        )
    return response


def _number(value: object) -> object:
    # One spelling per value, RFC 8785's (ECMAScript's): 1500.50, 1500.5 and 1.5005E+3 are one number; 100.00
    # is 100. Its exponent form keeps `1E+999999999` a few bytes long (a plain-digits form would be 1 GB).
    if isinstance(value, (Decimal, int)) and not isinstance(value, bool):
        return orjson.Fragment(es_number(value).encode())
    raise TypeError(f"{type(value).__name__} is not JSON")


def _wide_ints(value: object) -> object:
    # orjson writes integers only within 64 bits; wider ones (rare, and refused later by validation) take
    # the same spelling as an equal Decimal.
    if isinstance(value, dict):
        return {key: _wide_ints(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_wide_ints(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return orjson.Fragment(es_number(value).encode())
    return value


def canonical_body(data: object) -> bytes:
    """A stable byte form of a parsed body (keys sorted, no whitespace, one spelling per number), so whitespace,
    key order and number spelling alone do not make a different body. A body that cannot be written back (a
    lone surrogate in a string) is refused as malformed."""
    try:
        try:
            return orjson.dumps(data, default=_number, option=orjson.OPT_SORT_KEYS)
        except TypeError as exc:
            if "64-bit" not in str(exc):
                raise
            return orjson.dumps(_wide_ints(data), default=_number, option=orjson.OPT_SORT_KEYS)
    except (TypeError, ValueError) as exc:
        raise invalid_format(f"body cannot be read: {exc}") from None
