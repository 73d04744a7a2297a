"""The sandbox's OpenAPI 3.1 document, kept as data in sandbox/openapi.json and served at `GET /openapi.json`.

It describes every operation of the spec (E1-E6, A1-A5, B1-B3) plus the sandbox's additions (refresh
grant, consent page, report file, domestic VRP read): paths, methods, parameters, required headers,
request bodies (the spec's resource tables as JSON Schema; form bodies for the token and PAR endpoints)
and responses with both error shapes. Request schemas describe what the sandbox accepts, so a client
can validate its own requests against them; response schemas describe what it answers. Every operation
may also answer 429 and 5xx when a fault plan is active (docs/sandbox-faults.md); those are documented too.

Why 3.1: E2 (message-signature) is a GET with a JSON body in the spec. OpenAPI 3.1 permits a request
body on GET (without defined semantics), 3.0 does not.

The one dynamic part, `servers[0].url`, is the issuer, filled in when the document is loaded. Amounts in the
examples are exact (parsed as `Decimal`), as the bank reads every body.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from sandbox.jsonutil import loads

DOCUMENT_FILE = "openapi.json"


@functools.cache
def _document_text() -> bytes:
    return resources.files("sandbox").joinpath(DOCUMENT_FILE).read_bytes()


def build_document(base_url: str) -> dict[str, Any]:
    """The OpenAPI document of a sandbox served at `base_url` (a fresh copy each call)."""
    document: dict[str, Any] = loads(_document_text())
    document["servers"] = [{"url": base_url.rstrip("/")}]
    return document
