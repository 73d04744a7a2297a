"""The ASGI app: every route of the sandbox, wrapped with fault injection and the spec's error shapes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from sandbox.errors import OAuthError, PlainTextError, ResourceError, SandboxError
from sandbox.routes import admin, auth, consent_page, files, openapi, vrp
from sandbox.routes.http import INTERACTION
from sandbox.state import Bank

log = logging.getLogger("sandbox")
Endpoint = Callable[[Request], Awaitable[Response]]


def _echo(request: Request, response: Response) -> Response:
    value = request.headers.get(INTERACTION)
    if value is not None and INTERACTION not in response.headers:
        response.headers[INTERACTION] = value
    return response


def render_error(request: Request, exc: SandboxError) -> Response:
    """Turn a sandbox error into its spec shape."""
    response: Response
    if isinstance(exc, OAuthError | ResourceError):
        response = JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)
    elif isinstance(exc, PlainTextError):
        response = PlainTextResponse(exc.text, status_code=exc.status)
    else:  # pragma: no cover - every subclass is listed above
        response = JSONResponse({"Code": "UK.OBIE.UnexpectedError", "Message": str(exc), "Errors": []}, 400)
    return _echo(request, response)


def _wrap(bank: Bank, name: str, endpoint: Endpoint) -> Endpoint:
    async def run(request: Request) -> Response:
        async def handler(req: Request) -> Response:
            try:
                return _echo(req, await endpoint(req))
            except SandboxError as exc:
                return render_error(req, exc)

        return await bank.faults.run(name, request, handler)

    return run


def _wrapped_routes(bank: Bank, routes: list[BaseRoute]) -> list[BaseRoute]:
    out: list[BaseRoute] = []
    for route in routes:
        if isinstance(route, Route) and route.name:
            out.append(
                Route(
                    route.path,
                    _wrap(bank, route.name, route.endpoint),
                    methods=sorted(route.methods or []),
                    name=route.name,
                )
            )
        else:
            out.append(route)
    return out


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = "UK.OBIE.NotFound" if exc.status_code == 404 else "UK.OBIE.Resource.InvalidFormat"
    message = "resource_not_found: no such path" if exc.status_code == 404 else f"invalid_request: {exc.detail}"
    return _echo(
        request,
        JSONResponse(
            {"Code": code, "Message": message, "Errors": [{"ErrorCode": code, "Message": message}]},
            status_code=exc.status_code,
            headers=dict(exc.headers or {}),
        ),
    )


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    message = "unexpected_error: the sandbox failed; this is a sandbox bug"
    body = {
        "Code": "UK.OBIE.UnexpectedError",
        "Message": message,
        "Errors": [{"ErrorCode": "UK.OBIE.UnexpectedError", "Message": message}],
    }
    return _echo(request, JSONResponse(body, 500))


def create_app(bank: Bank) -> Starlette:
    """Build the sandbox ASGI app for one bank."""
    routes: list[BaseRoute] = [
        *auth.routes(bank),
        *consent_page.routes(bank),
        *files.routes(bank),
        *vrp.routes(bank),
        *openapi.routes(bank),
    ]
    if bank.config.admin:
        routes += admin.routes(bank)
    app = Starlette(
        routes=_wrapped_routes(bank, routes),
        exception_handlers={HTTPException: _http_exception, Exception: _unexpected},
    )
    app.state.bank = bank
    return app
