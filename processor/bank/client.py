"""The async bank client: one method per operation of the spec, for one configured integration.

    async with await BankClient.start(integration) as bank:      # E1 discovery; refuses a foreign issuer
        consent = await bank.create_file_consent(initiation, idempotency_key=key)   # A1, cc token cached

Every call gets a new `x-fapi-interaction-id` (returned on the result as `interaction_id`, logged as the
correlation id) and the headers the spec lists for its operation. Creating calls (A1, A2, A3, B1, B2) require
an `idempotency_key` the caller persisted beforehand; retries send the same key and the same body bytes.
Token and PAR requests build a fresh client assertion per attempt (the bank refuses a reused `jti`).

Failures raise the tree in processor.bank.errors; transient ones are retried per processor.bank.retry first.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import httpx
import orjson
import structlog

from processor.bank import errors
from processor.bank.auth import (
    ASSERTION_TYPE,
    ClientAssertions,
    LocalSigner,
    Pkce,
    Signer,
)
from processor.bank.integration import Integration
from processor.bank.metrics import BANK_CALL_ERRORS, BANK_CALL_SECONDS, status_class
from processor.bank.models import (
    Discovery,
    DomesticVrp,
    FileConsent,
    FilePayment,
    FilePaymentReport,
    FileUpload,
    ModelError,
    ParResponse,
    TokenResponse,
    VrpConsent,
    dumps,
    loads,
    loads_echo,
)
from processor.bank.retry import RESEND_MIN_DELAY, RetryDecision, RetryPolicy, run_with_retries
from processor.bank.transport import bank_transport
from processor.domain.time import Clock, SystemClock

T = TypeVar("T")
INTERACTION = "x-fapi-interaction-id"
IDEMPOTENCY = "x-idempotency-key"
IDEMPOTENCY_MAX = 40
FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
PISP = "/open-banking/v3.1/pisp"
CLIENT_CREDENTIALS_SCOPE = "payments openid"
SCA = "UK.OBIE.SCA"
SWEEPING = "UK.OBIE.VRPType.Sweeping"

log = structlog.get_logger("processor.bank")


OPERATION_EXTENSION = "dispersion.operation"
"""The httpx request extension naming the spec operation of a call ("A1 create file-payment-consent"), for
whoever watches the client's requests (the tracing names each bank call's span by it)."""


def new_idempotency_key() -> str:
    """A fresh key for a creating call (a UUID, 36 characters). Persist it before the call that uses it."""
    return str(uuid.uuid4())


def check_idempotency_key(key: str) -> str:
    """A usable key: 1 to 40 printable ASCII characters (the bank's limit)."""
    if not isinstance(key, str) or not key.strip():
        raise ValueError("an idempotency key is required for a resource-creating call")
    if len(key) > IDEMPOTENCY_MAX or not key.isascii() or not key.isprintable():
        raise ValueError(f"an idempotency key must be 1-{IDEMPOTENCY_MAX} printable ASCII characters")
    return key


@dataclass(frozen=True)
class Reply:
    """A successful HTTP exchange: status, headers, body and the interaction id we sent."""

    status: int
    headers: httpx.Headers
    body: bytes
    interaction_id: str
    sent_at: datetime

    def json(self, operation: str, loader: Callable[[bytes], Any] = loads) -> Any:
        """The body as JSON (Decimal fractions); ProtocolError when it is not JSON."""
        try:
            return loader(self.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise errors.ProtocolError(
                "response body is not valid JSON",
                status=self.status,
                operation=operation,
                interaction_id=self.interaction_id,
            ) from None

    def json_object(self, operation: str, loader: Callable[[bytes], Any] = loads) -> dict[str, Any]:
        """The body as a JSON object."""
        value = self.json(operation, loader)
        if not isinstance(value, dict):
            raise errors.ProtocolError(
                "response body is not a JSON object",
                status=self.status,
                operation=operation,
                interaction_id=self.interaction_id,
            )
        return value


Body = bytes | Callable[[], Awaitable[bytes]] | None


@dataclass
class _CachedToken:
    token: TokenResponse
    renew_at: datetime


class BankClient:
    """The bank's API for one integration. Use `await BankClient.start(...)`, or call `discover()` yourself."""

    def __init__(
        self,
        integration: Integration,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        retry_policy: RetryPolicy | None = None,
        instrument: Callable[[httpx.AsyncClient], None] | None = None,
    ) -> None:
        self.integration = integration
        self.clock: Clock = clock or SystemClock()
        t = integration.timeouts
        # httpcore looks at every pooled connection on each request, so a pool much larger than the calls really
        # in flight costs CPU on every call (see docs/benchmarks.md); more calls wait for a free one.
        limits = httpx.Limits(
            max_connections=integration.max_connections, max_keepalive_connections=integration.max_connections
        )
        self._http = httpx.AsyncClient(
            transport=transport or bank_transport(limits),
            timeout=httpx.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool),
            limits=limits,
            follow_redirects=False,
            headers={"User-Agent": "dispersion-processor"},
        )
        if instrument is not None:  # e.g. the tracing of the composition layer (processor/cli/telemetry.py)
            instrument(self._http)
        r = integration.retry
        self.retry_policy = retry_policy or RetryPolicy(
            max_attempts=r.max_attempts,
            base_delay=r.base_delay,
            max_delay=r.max_delay,
            max_elapsed=r.max_elapsed,
            max_retry_after=r.max_retry_after,
        )
        self._sleep = sleep
        self._monotonic = monotonic
        self._rand = rand
        self._discovery: Discovery | None = None
        self._discovery_lock = asyncio.Lock()
        self._cc: _CachedToken | None = None
        self._cc_lock = asyncio.Lock()
        self.token_fetches = 0  # client-credentials tokens fetched so far (for metrics and tests)
        signer: Signer
        if integration.assertion_signing == "remote":
            signer = self._remote_sign
        else:
            signer = LocalSigner(integration.signing_key_pem.reveal())
        self.assertions = ClientAssertions(
            integration.client_id,
            integration.kid,
            integration.issuer,
            signer,
            lifetime=integration.assertion_lifetime,
            clock=self.clock,
        )
        self._log = log.bind(integration=integration.name)

    def __repr__(self) -> str:
        return f"BankClient(integration={self.integration.name!r}, issuer={self.integration.issuer!r})"

    @classmethod
    async def start(cls, integration: Integration, **kwargs: Any) -> BankClient:
        """A client whose discovery succeeded (issuer checked); IssuerMismatch means: do not start."""
        client = cls(integration, **kwargs)
        try:
            await client.discover()
        except BaseException:
            await client.aclose()
            raise
        return client

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> BankClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- transport -----------------------------------------------------------------------------------------

    async def request(
        self,
        operation: str,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: Body = None,
        idempotency_key: str | None = None,
    ) -> Reply:
        """One logical call, retried per the policy; a 2xx Reply or a BankError.

        `body` is fixed bytes (sent identically on every attempt) or an async builder called per attempt.
        """
        path = urlsplit(url).path

        async def attempt(number: int) -> Reply:
            interaction_id = str(uuid.uuid4())
            sent = {**headers, INTERACTION: interaction_id}
            if idempotency_key is not None:
                sent[IDEMPOTENCY] = idempotency_key
            try:
                content = await body() if callable(body) else body
            except errors.BankError as exc:
                # Building the body failed (remote signing, already retried on its own): no outer retries.
                raise _BodyBuildError(exc) from exc
            sent_at = self.clock.now()
            started = self._monotonic()
            try:
                response = await self._http.request(
                    method, url, headers=sent, content=content, extensions={OPERATION_EXTENSION: operation}
                )
            except httpx.RequestError as exc:
                error = _transport_error(exc, operation, interaction_id)
                BANK_CALL_SECONDS.labels(operation, "transport").observe(self._monotonic() - started)
                BANK_CALL_ERRORS.labels(operation, type(error).__name__).inc()
                self._log.warning(
                    "bank call failed",
                    operation=operation,
                    method=method,
                    path=path,
                    correlation_id=interaction_id,
                    attempt=number,
                    error=type(error).__name__,
                    detail=type(exc).__name__,
                    idempotency_key=idempotency_key,
                )
                raise error from exc
            elapsed = self._monotonic() - started
            elapsed_ms = round(elapsed * 1000, 1)
            BANK_CALL_SECONDS.labels(operation, status_class(response.status_code)).observe(elapsed)
            self._log.info(
                "bank call",
                operation=operation,
                method=method,
                path=path,
                status=response.status_code,
                correlation_id=interaction_id,
                attempt=number,
                elapsed_ms=elapsed_ms,
                idempotency_key=idempotency_key,
            )
            if 200 <= response.status_code < 300:
                return Reply(response.status_code, response.headers, response.content, interaction_id, sent_at)
            if response.status_code < 400:
                raise errors.ProtocolError(
                    f"unexpected HTTP {response.status_code}",
                    status=response.status_code,
                    operation=operation,
                    interaction_id=interaction_id,
                )
            failure = errors.error_from_response(
                response.status_code,
                response.headers,
                response.content,
                operation=operation,
                interaction_id=interaction_id,
                now=self.clock.now(),
            )
            BANK_CALL_ERRORS.labels(operation, type(failure).__name__).inc()
            raise failure

        def on_retry(error: errors.BankError, number: int, decision: RetryDecision) -> None:
            self._log.warning(
                "bank call will be retried",
                operation=operation,
                correlation_id=error.interaction_id,
                attempt=number,
                error=type(error).__name__,
                status=getattr(error, "status", None),
                reason=decision.reason,
                idempotency_key=idempotency_key,
            )

        try:
            return await run_with_retries(
                attempt,
                self.retry_policy,
                sleep=self._sleep,
                monotonic=self._monotonic,
                rand=self._rand,
                on_retry=on_retry,
                min_delay=RESEND_MIN_DELAY if idempotency_key is not None else 0.0,
            )
        except _BodyBuildError as failed:
            raise failed.error from None
        except errors.BankError as error:
            error.idempotency_key = idempotency_key
            raise

    def _parse(
        self,
        operation: str,
        reply: Reply,
        reader: Callable[[dict[str, Any]], T],
        loader: Callable[[bytes], Any] = loads,
    ) -> T:
        body = reply.json_object(operation, loader)
        try:
            return reader(body)
        except ModelError as exc:
            raise errors.ProtocolError(
                f"unexpected response: {exc}",
                status=reply.status,
                operation=operation,
                interaction_id=reply.interaction_id,
            ) from None

    # -- E1 discovery --------------------------------------------------------------------------------------

    async def discover(self) -> Discovery:
        """E1: read the discovery document; its `issuer` must equal the configured one (IssuerMismatch)."""
        op = "E1 discovery"
        url = self.integration.issuer.rstrip("/") + "/.well-known/openid-configuration"
        headers = {"Content-Type": FORM, "Authorization": self._basic()}
        reply = await self.request(op, "GET", url, headers=headers)
        discovery = self._parse(op, reply, Discovery.parse)
        if discovery.issuer != self.integration.issuer:
            raise errors.IssuerMismatch(
                f"discovery names issuer {discovery.issuer!r} but integration {self.integration.name!r} "
                f"is configured for {self.integration.issuer!r}; refusing to use this server",
                status=reply.status,
                operation=op,
                interaction_id=reply.interaction_id,
            )
        self._discovery = discovery
        return discovery

    async def discovery(self) -> Discovery:
        """The discovery document, read once."""
        if self._discovery is None:
            async with self._discovery_lock:
                if self._discovery is None:
                    await self.discover()
        assert self._discovery is not None
        return self._discovery

    # -- E2 message signature ------------------------------------------------------------------------------

    async def message_signature(self, header: Mapping[str, Any], claims: Mapping[str, Any]) -> str:
        """E2: have the bank sign `claims` with our key (the key travels in the request body)."""
        op = "E2 message-signature"
        payload = dumps(
            {
                "header": dict(header),
                "body": dict(claims),
                "signingKeyPEM": self.integration.signing_key_pem.reveal(),
            }
        )
        reply = await self.request(
            op, "GET", self._rs("/o3/v1.0/message-signature"), headers={"Content-Type": JSON}, body=payload
        )
        token = _bare_text(reply.body)
        if token.count(".") != 2 or any(not part for part in token.split(".")[:2]):
            raise errors.ProtocolError(
                "message-signature did not return a compact JWT",
                status=reply.status,
                operation=op,
                interaction_id=reply.interaction_id,
            )
        return token

    async def _remote_sign(self, header: dict[str, Any], claims: dict[str, Any]) -> str:
        return await self.message_signature(header, claims)

    # -- E3, E6, refresh: tokens ---------------------------------------------------------------------------

    async def client_credentials_token(self) -> TokenResponse:
        """A client-credentials token from the cache, fetched once (under a lock) when missing or due."""
        cached = self._cc
        if cached is not None and self.clock.now() < cached.renew_at:
            return cached.token
        async with self._cc_lock:
            cached = self._cc
            if cached is not None and self.clock.now() < cached.renew_at:
                return cached.token
            token = await self.request_client_credentials_token()
            margin = min(self.integration.token_refresh_margin, token.expires_in // 2)
            self._cc = _CachedToken(token, token.expires_at - timedelta(seconds=margin))
            return token

    def forget_client_credentials_token(self, token: TokenResponse | None = None) -> None:
        """Drop the cached token (only if it is still `token`, when given), so the next call fetches anew."""
        if self._cc is not None and (token is None or self._cc.token is token):
            self._cc = None

    async def request_client_credentials_token(self) -> TokenResponse:
        """E3: a new client-credentials token (scope `payments openid`), bypassing the cache."""
        op = "E3 token client_credentials"
        endpoint = (await self.discovery()).token_endpoint
        form = {self.integration.grant_parameter: "client_credentials", "scope": CLIENT_CREDENTIALS_SCOPE}
        reply = await self._token_request(op, endpoint, form)
        self.token_fetches += 1
        return self._parse(op, reply, lambda b: TokenResponse.parse(b, reply.sent_at, reply.interaction_id))

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

    async def _token_request(self, op: str, endpoint: str, form: Mapping[str, str]) -> Reply:
        """POST a token form with this integration's client authentication (fresh assertion per attempt)."""
        headers = {"Content-Type": FORM}
        basic = self.integration.token_auth_method == "client_secret_basic"
        if basic:
            headers["Authorization"] = self._basic()

        async def build() -> bytes:
            fields = dict(form)
            if not basic:
                fields["client_assertion_type"] = ASSERTION_TYPE
                fields["client_assertion"] = await self.assertions.new()
            return urlencode(fields).encode("ascii")

        return await self.request(op, "POST", endpoint, headers=headers, body=build)

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
        url = self._rs(f"/o3/v1.0/par-auth-code-url/{_seg(consent_id)}") + "?" + query
        reply = await self.request(op, "GET", url, headers={"Authorization": self._basic()})
        found = _bare_text(reply.body)
        parts = urlsplit(found)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise errors.ProtocolError(
                "authorization URL response is not an absolute http(s) URL",
                status=reply.status,
                operation=op,
                interaction_id=reply.interaction_id,
            )
        return found

    # -- flow A --------------------------------------------------------------------------------------------

    async def create_file_consent(
        self, initiation: Mapping[str, Any] | bytes, *, idempotency_key: str, echo_file: bool = True
    ) -> FileConsent:
        """A1: create a file payment consent (`Data.Initiation` as data with Decimal amounts, or as its JSON
        bytes, e.g. `FilePayload.initiation_json()`, which spares re-serialising a large file).

        `echo_file=False`: the answer's `Initiation.SupplementaryData` (the bank's echo of the whole file) is
        read without keeping its transfers (each becomes None; see `models.loads_echo`), which spares about
        135 MiB for 100,000 transfers. The same option exists on A3, A4 and A5."""
        op = "A1 create file-payment-consent"
        body = orjson.dumps({"Data": {"Initiation": _json_part(initiation)}})
        reply = await self._resource(
            op, "POST", f"{PISP}/file-payment-consents", fapi=False, body=body, idempotency_key=idempotency_key
        )
        return self._parse(op, reply, lambda b: FileConsent.parse(b, reply.interaction_id), _loader(echo_file))

    async def upload_file(
        self, consent_id: str, payload: Mapping[str, Any] | bytes, *, idempotency_key: str
    ) -> FileUpload:
        """A2: upload the file (`payload` as JSON-ready data, or its exact bytes) to the consent."""
        op = "A2 upload file"
        body = payload if isinstance(payload, bytes) else dumps(payload)
        reply = await self._resource(
            op,
            "POST",
            f"{PISP}/file-payment-consents/{_seg(consent_id)}/file",
            fapi=False,
            body=body,
            idempotency_key=idempotency_key,
        )
        return self._parse(op, reply, lambda b: FileUpload.parse(b, reply.interaction_id))

    async def create_file_payment(
        self,
        consent_id: str,
        initiation: Mapping[str, Any] | bytes,
        *,
        access_token: str,
        idempotency_key: str,
        customer_ip: str | None = None,
        echo_file: bool = True,
    ) -> FilePayment:
        """A3: create the file payment with the consent's auth-code token; Initiation (data or JSON bytes, as
        for A1) must equal the consent's."""
        op = "A3 create file-payment"
        body = orjson.dumps({"Data": {"ConsentId": consent_id, "Initiation": _json_part(initiation)}})
        reply = await self._resource(
            op,
            "POST",
            f"{PISP}/file-payments",
            fapi=True,
            body=body,
            idempotency_key=idempotency_key,
            token=access_token,
            customer_ip=customer_ip,
        )
        return self._parse(op, reply, lambda b: FilePayment.parse(b, reply.interaction_id), _loader(echo_file))

    async def get_file_payment(self, file_payment_id: str, *, echo_file: bool = True) -> FilePayment:
        """A4: read a file payment (status InitiationPending / InitiationCompleted / InitiationFailed)."""
        op = "A4 get file-payment"
        reply = await self._resource(op, "GET", f"{PISP}/file-payments/{_seg(file_payment_id)}", fapi=False)
        return self._parse(op, reply, lambda b: FilePayment.parse(b, reply.interaction_id), _loader(echo_file))

    async def get_file_consent(
        self, consent_id: str, *, customer_ip: str | None = None, echo_file: bool = True
    ) -> FileConsent:
        """A5: read a file payment consent."""
        op = "A5 get file-payment-consent"
        reply = await self._resource(
            op, "GET", f"{PISP}/file-payment-consents/{_seg(consent_id)}", fapi=True, customer_ip=customer_ip
        )
        return self._parse(op, reply, lambda b: FileConsent.parse(b, reply.interaction_id), _loader(echo_file))

    async def get_file_payment_report(self, file_payment_id: str) -> FilePaymentReport:
        """GET file-payments/{id}/report-file: the per-transaction report (parsed when JSON)."""
        op = "get file-payment report-file"
        reply = await self._resource(op, "GET", f"{PISP}/file-payments/{_seg(file_payment_id)}/report-file", fapi=False)
        content_type = reply.headers.get("content-type", "")
        try:
            return FilePaymentReport.parse(file_payment_id, content_type, reply.body, reply.interaction_id)
        except ModelError as exc:
            raise errors.ProtocolError(
                f"unexpected report: {exc}", status=reply.status, operation=op, interaction_id=reply.interaction_id
            ) from None

    # -- flow B --------------------------------------------------------------------------------------------

    async def create_vrp_consent(
        self, body: bytes, *, idempotency_key: str, customer_ip: str | None = None
    ) -> VrpConsent:
        """B1: create a domestic VRP consent (sweeping mandate) from its exact request bytes (`vrp_consent_body`;
        a resumed call sends the bytes its first attempt sent)."""
        op = "B1 create domestic-vrp-consent"
        reply = await self._resource(
            op,
            "POST",
            f"{PISP}/domestic-vrp-consents",
            fapi=True,
            body=body,
            idempotency_key=idempotency_key,
            customer_ip=customer_ip,
        )
        return self._parse(op, reply, lambda b: VrpConsent.parse(b, reply.interaction_id))

    async def create_domestic_vrp(
        self, body: bytes, *, access_token: str, idempotency_key: str, customer_ip: str | None = None
    ) -> DomesticVrp:
        """B2: create a domestic VRP under an authorised consent, with that consent's auth-code token, from its exact
        request bytes (`domestic_vrp_body`; a resumed call sends the bytes its first attempt sent)."""
        op = "B2 create domestic-vrp"
        reply = await self._resource(
            op,
            "POST",
            f"{PISP}/domestic-vrps",
            fapi=True,
            body=body,
            idempotency_key=idempotency_key,
            token=access_token,
            customer_ip=customer_ip,
        )
        return self._parse(op, reply, lambda b: DomesticVrp.parse(b, reply.interaction_id))

    async def get_vrp_consent(self, consent_id: str, *, customer_ip: str | None = None) -> VrpConsent:
        """B3: read a domestic VRP consent."""
        op = "B3 get domestic-vrp-consent"
        reply = await self._resource(
            op, "GET", f"{PISP}/domestic-vrp-consents/{_seg(consent_id)}", fapi=True, customer_ip=customer_ip
        )
        return self._parse(op, reply, lambda b: VrpConsent.parse(b, reply.interaction_id))

    async def get_domestic_vrp(self, domestic_vrp_id: str, *, customer_ip: str | None = None) -> DomesticVrp:
        """GET domestic-vrps/{id}: read a domestic VRP."""
        op = "get domestic-vrp"
        reply = await self._resource(
            op, "GET", f"{PISP}/domestic-vrps/{_seg(domestic_vrp_id)}", fapi=True, customer_ip=customer_ip
        )
        return self._parse(op, reply, lambda b: DomesticVrp.parse(b, reply.interaction_id))

    # -- resolving an ambiguous outcome by reading ---------------------------------------------------------

    async def upload_landed(self, consent_id: str) -> bool:
        """After an ambiguous A2: whether the bank accepted the file (the consent left AwaitingUpload)."""
        consent = await self.get_file_consent(consent_id, echo_file=False)
        return consent.status != "AwaitingUpload"

    async def find_file_payment(
        self,
        consent_id: str,
        initiation: Mapping[str, Any] | bytes,
        *,
        access_token: str,
        idempotency_key: str,
        echo_file: bool = True,
    ) -> FilePayment | None:
        """After an ambiguous A3: the payment if the consent shows one was created, else None.

        A consent is `Consumed` once its payment exists; the payment's id is then recovered by repeating A3
        with the same key and body, which the bank answers with the payment it already created. None means
        no payment exists yet, so A3 may be sent (with that same key).
        """
        consent = await self.get_file_consent(consent_id, echo_file=False)  # only its status is read
        if consent.status != "Consumed":
            return None
        return await self.create_file_payment(
            consent_id, initiation, access_token=access_token, idempotency_key=idempotency_key, echo_file=echo_file
        )

    # -- helpers -------------------------------------------------------------------------------------------

    async def _resource(
        self,
        op: str,
        method: str,
        path: str,
        *,
        fapi: bool,
        body: bytes | None = None,
        idempotency_key: str | None = None,
        token: str | None = None,
        customer_ip: str | None = None,
    ) -> Reply:
        """A resource-server call with a Bearer token: the given one, or the cached client-credentials token.

        A cached token the bank calls expired or unknown (its clock may run ahead) is dropped and the call made
        once more with a new one; an explicit auth-code token is the caller's to refresh.
        """
        if method == "POST":
            if idempotency_key is None:
                raise ValueError(f"{op} creates a resource and needs an idempotency_key")
            check_idempotency_key(idempotency_key)
        url = self._rs(path)
        for renewal in (False, True):
            cached = await self.client_credentials_token() if token is None else None
            bearer = token if cached is None else cached.access_token
            headers = {"Content-Type": JSON, "Accept": JSON, "Authorization": f"Bearer {bearer}"}
            if fapi:
                headers["x-fapi-financial-id"] = self.integration.financial_id
                headers["x-fapi-customer-ip-address"] = customer_ip or self.integration.customer_ip
            try:
                return await self.request(op, method, url, headers=headers, body=body, idempotency_key=idempotency_key)
            except errors.HeaderInvalid as exc:
                rejected_token = exc.status in (401, 403) and any(e.path == "Authorization" for e in exc.errors)
                if cached is None or renewal or not (isinstance(exc, errors.TokenExpired) or rejected_token):
                    raise
                self._log.info("client-credentials token refused; fetching a new one", operation=op)
                self.forget_client_credentials_token(cached)
        raise AssertionError("unreachable")  # pragma: no cover

    def _rs(self, path: str) -> str:
        return self.integration.resource_server.rstrip("/") + path

    def _basic(self) -> str:
        return f"Basic {self.integration.basic_credential().reveal()}"


class _BodyBuildError(Exception):
    """Carries a BankError raised while building a request body past the retry loop."""

    def __init__(self, error: errors.BankError) -> None:
        super().__init__(str(error))
        self.error = error


def _loader(echo_file: bool) -> Callable[[bytes], Any]:
    """How to parse a file consent or payment answer: whole, or without the echoed file's transfers."""
    return loads if echo_file else loads_echo


def _json_part(value: Mapping[str, Any] | bytes) -> orjson.Fragment:
    """A body part given as data (checked and serialised by `dumps`) or as JSON bytes (checked to be one JSON
    object, then embedded as they are)."""
    if isinstance(value, bytes):
        if not value.lstrip().startswith(b"{"):
            raise TypeError("a JSON body part given as bytes must be a JSON object")
        return orjson.Fragment(value)
    return orjson.Fragment(dumps(value))


def _seg(value: str) -> str:
    """A path segment, escaped."""
    return quote(value, safe="")


def _bare_text(body: bytes) -> str:
    """A text answer that some servers wrap as a JSON string: unwrapped and stripped."""
    text = body.decode("utf-8", errors="replace").strip()
    if text.startswith('"'):
        try:
            value = loads(text)
        except ValueError:
            return text.strip('"')
        if isinstance(value, str):
            return value.strip()
    return text


def _transport_error(exc: httpx.RequestError, operation: str, interaction_id: str) -> errors.BankError:
    """Our exception for an httpx failure that produced no response."""
    kind = type(exc).__name__
    common: dict[str, Any] = {"operation": operation, "interaction_id": interaction_id}
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return errors.Timeout(f"timed out before sending ({kind})", ambiguous=False, **common)
    if isinstance(exc, httpx.TimeoutException):
        return errors.Timeout(f"timed out waiting for the bank ({kind})", **common)
    if isinstance(exc, httpx.ConnectError):
        return errors.ConnectError(f"could not connect ({kind}: {exc})", **common)
    if isinstance(exc, httpx.RemoteProtocolError | httpx.NetworkError):
        return errors.ConnectionDropped(f"connection broken during the exchange ({kind})", **common)
    if isinstance(exc, httpx.DecodingError):
        return errors.ProtocolError(f"response could not be decoded ({kind})", **common)
    return errors.TransportError(f"request failed ({kind}: {exc})", retry_safe=False, **common)


def vrp_consent_body(
    control_parameters: Mapping[str, Any],
    initiation: Mapping[str, Any],
    remittance_information: Mapping[str, Any],
    risk: Mapping[str, Any] | None = None,
) -> bytes:
    """The JSON bytes of a B1 request."""
    data = {
        "ControlParameters": control_parameters,
        "Initiation": initiation,
        "RemittanceInformation": remittance_information,
    }
    return dumps({"Data": data, "Risk": dict(risk or {})})


def domestic_vrp_body(
    consent_id: str,
    initiation: Mapping[str, Any],
    instruction: Mapping[str, Any],
    psu_authentication_method: str = SCA,
    vrp_type: str = SWEEPING,
    risk: Mapping[str, Any] | None = None,
) -> bytes:
    """The JSON bytes of a B2 request."""
    data = {
        "ConsentId": consent_id,
        "Initiation": initiation,
        "PSUAuthenticationMethod": psu_authentication_method,
        "VRPType": vrp_type,
        "Instruction": instruction,
    }
    return dumps({"Data": data, "Risk": dict(risk or {})})
