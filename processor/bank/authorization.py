"""The bank client's operations that get an approver's authorization: the pushed authorization request and
the URL to send the approver to (E4, E5), the code exchange (E6) and the refresh-token grant."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from processor.bank import errors
from processor.bank.auth import ASSERTION_TYPE, Pkce
from processor.bank.calls import FORM, BankCalls, bare_text, path_segment
from processor.bank.models import ParResponse, TokenResponse


class Authorization(BankCalls):
    """E4, E5, E6 and refresh, over the client's transport and token requests."""

    # -- E4, E5: authorization -----------------------------------------------------------------------------

    async def push_authorization_request(self, consent_id: str, pkce: Pkce, state: str) -> ParResponse:
        """E4: push the authorization request for `consent_id`; the answer's request_uri lives 300 s."""
        op = "E4 PAR"
        endpoint = (await self.discovery()).pushed_authorization_request_endpoint
        headers = {"Content-Type": FORM}
        if self.integration.token_auth_method == "client_secret_basic":
            headers["Authorization"] = self._basic()
        form = {
            "client_id": self.integration.client_id,
            "redirect_uri": self.integration.redirect_uri,
            "scope": f"payments:{consent_id} openid",
            "response_type": "code",
            "state": state,
            "code_challenge": pkce.challenge,
            "code_challenge_method": pkce.method,
            "client_assertion_type": ASSERTION_TYPE,
        }

        async def build() -> bytes:
            return urlencode({**form, "client_assertion": await self.assertions.new()}).encode("ascii")

        reply = await self.request(op, "POST", endpoint, headers=headers, body=build)
        return self._parse(op, reply, lambda b: ParResponse.parse(b, reply.sent_at, reply.interaction_id))

    async def authorization_url(self, consent_id: str, request_uri: str) -> str:
        """E5: the URL to send the approver to."""
        op = "E5 authorization URL"
        query = urlencode({"request_uri": request_uri, "response_type": "code", "scope": "payments"})
        url = self._rs(f"/o3/v1.0/par-auth-code-url/{path_segment(consent_id)}") + "?" + query
        reply = await self.request(op, "GET", url, headers={"Authorization": self._basic()})
        found = bare_text(reply.body)
        parts = urlsplit(found)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise errors.ProtocolError(
                "authorization URL response is not an absolute http(s) URL",
                status=reply.status,
                operation=op,
                interaction_id=reply.interaction_id,
            )
        return found

    # -- E6, refresh: auth-code tokens ---------------------------------------------------------------------

    async def exchange_code(
        self, code: str, code_verifier: str, *, expected_consent_id: str | None = None
    ) -> TokenResponse:
        """E6: exchange an authorization code (with its PKCE verifier) for an auth-code token.

        With `expected_consent_id`, a token whose scope names another consent is refused (ProtocolError).
        """
        op = "E6 token authorization_code"
        endpoint = (await self.discovery()).token_endpoint
        form = {
            self.integration.grant_parameter: "authorization_code",
            "scope": "payments",
            "code": code,
            "redirect_uri": self.integration.redirect_uri,
            "code_verifier": code_verifier,
        }
        reply = await self._token_request(op, endpoint, form)
        token = self._parse(op, reply, lambda b: TokenResponse.parse(b, reply.sent_at, reply.interaction_id))
        if expected_consent_id is not None and token.consent_id != expected_consent_id:
            raise errors.ProtocolError(
                f"token scope names consent {token.consent_id!r}, expected {expected_consent_id!r}",
                status=reply.status,
                operation=op,
                interaction_id=reply.interaction_id,
            )
        return token

    async def refresh(self, refresh_token: str) -> TokenResponse:
        """The refresh-token grant: a new auth-code access token (and possibly a new refresh token)."""
        op = "token refresh_token"
        endpoint = (await self.discovery()).token_endpoint
        form = {self.integration.grant_parameter: "refresh_token", "refresh_token": refresh_token}
        reply = await self._token_request(op, endpoint, form)
        return self._parse(op, reply, lambda b: TokenResponse.parse(b, reply.sent_at, reply.interaction_id))
