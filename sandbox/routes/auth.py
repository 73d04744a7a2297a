"""The authorization server's routes: discovery (E1), message-signature (E2), token (E3, E6, refresh), PAR (E4)
and the authorization URL (E5). The protocol logic is in sandbox.oauth; these only read the request."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from sandbox.errors import OAuthError, PlainTextError, ResourceError
from sandbox.jsonutil import dumps
from sandbox.oauth.answer import JSON, OAuthAnswer
from sandbox.oauth.discovery import discovery
from sandbox.oauth.grants import token_endpoint
from sandbox.oauth.par import authorization_url, push_authorization_request
from sandbox.oauth.signature import message_signature
from sandbox.routes.http import read_body, read_form
from sandbox.state import Bank

AUTHORIZATION = "authorization"


def to_response(answer: OAuthAnswer) -> Response:
    """The HTTP response of an endpoint's answer."""
    if answer.media_type == JSON:
        content: bytes | str = dumps(answer.body)
    else:
        content = str(answer.body)
    return Response(content, status_code=answer.status, headers=answer.headers, media_type=answer.media_type)


async def read_oauth_form(bank: Bank, request: Request) -> dict[str, str]:
    """The urlencoded form, with every problem reported in the OAuth error shape."""
    try:
        return await read_form(bank, request)
    except ResourceError as exc:  # the body-size limit speaks the resource shape; this endpoint speaks OAuth
        raise OAuthError("invalid_request", exc.message) from None


def routes(bank: Bank) -> list[BaseRoute]:
    """The authorization server's routes."""

    async def discovery_route(request: Request) -> Response:
        return to_response(discovery(bank, request.headers.get(AUTHORIZATION)))

    async def message_signature_route(request: Request) -> Response:
        try:
            raw = await read_body(bank, request)
        except ResourceError as exc:
            raise PlainTextError(exc.message) from None
        return to_response(message_signature(raw))

    async def token(request: Request) -> Response:
        form = await read_oauth_form(bank, request)
        return to_response(token_endpoint(bank, form, request.headers.get(AUTHORIZATION)))

    async def par(request: Request) -> Response:
        form = await read_oauth_form(bank, request)
        return to_response(push_authorization_request(bank, form, request.headers.get(AUTHORIZATION)))

    async def url_route(request: Request) -> Response:
        consent_id = request.path_params["consent_id"]
        answer = authorization_url(bank, request.headers.get(AUTHORIZATION), consent_id, request.query_params)
        return to_response(answer)

    return [
        Route("/.well-known/openid-configuration", discovery_route, methods=["GET"], name="discovery"),
        Route("/o3/v1.0/message-signature", message_signature_route, methods=["GET"], name="message-signature"),
        Route("/token", token, methods=["POST"], name="token"),
        Route("/par", par, methods=["POST"], name="par"),
        Route(
            "/o3/v1.0/par-auth-code-url/{consent_id}",
            url_route,
            methods=["GET"],
            name="authorization-url",
        ),
    ]
