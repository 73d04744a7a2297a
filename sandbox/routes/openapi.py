"""`GET /openapi.json`: the document of sandbox.openapi, for this bank's issuer."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from sandbox.openapi import build_document
from sandbox.routes.http import json_response
from sandbox.state import Bank


def routes(bank: Bank) -> list[BaseRoute]:
    """`GET /openapi.json`."""
    document = build_document(bank.config.issuer)

    async def serve(request: Request) -> Response:
        return json_response(document, 200, request)

    return [Route("/openapi.json", serve, methods=["GET"], name="openapi")]
