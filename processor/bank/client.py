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
import functools
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import httpx
import structlog

from processor.bank import errors
from processor.bank.auth import ASSERTION_TYPE, ClientAssertions, LocalSigner, Signer
from processor.bank.authorization import Authorization
from processor.bank.calls import FORM, JSON, Body, Parts, Reply, bare_text
from processor.bank.file_payments import FilePayments
from processor.bank.integration import Integration
from processor.bank.metrics import BANK_CALL_ERRORS, BANK_CALL_SECONDS, status_class
from processor.bank.models import Discovery, ModelError, TokenResponse, dumps, loads
from processor.bank.retry import RESEND_MIN_DELAY, RetryDecision, RetryPolicy, run_with_retries
from processor.bank.transport import CookielessClient, bank_transport
from processor.bank.vrp_payments import VrpPayments
from processor.domain.time import Clock, SystemClock

T = TypeVar("T")
INTERACTION = "x-fapi-interaction-id"
IDEMPOTENCY = "x-idempotency-key"
IDEMPOTENCY_MAX = 40
CLIENT_CREDENTIALS_SCOPE = "payments openid"

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
class _Call:
    """One logical bank call, as `BankClient.request` was given it (`path` for the logs)."""

    operation: str
    method: str
    url: str
    path: str
    headers: Mapping[str, str]
    body: Body
    idempotency_key: str | None


@dataclass
class _CachedToken:
    token: TokenResponse
    renew_at: datetime


class BankClient(FilePayments, VrpPayments, Authorization):
    """The bank's API for one integration. Use `await BankClient.start(...)`, or call `discover()` yourself.

    This class holds the transport, the retries, discovery and the client's own tokens; the operations of
    flow A, flow B and the approver's authorization come from the groups it inherits."""

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
        # At most max_connections calls in flight to the bank; more wait for a free connection (the pool timeout).
        limits = httpx.Limits(
            max_connections=integration.max_connections, max_keepalive_connections=integration.max_connections
        )
        self._http = CookielessClient(
            transport=transport or bank_transport(limits),
            timeout=httpx.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool),
            limits=limits,
            follow_redirects=False,
            headers={"User-Agent": "dispersion-processor"},
        )
        if instrument is not None:  # e.g. the tracing of the composition layer (processor/cli/telemetry.py)
            instrument(self._http)
        self.retry_policy = retry_policy or RetryPolicy(**integration.retry.model_dump())
        self._sleep = sleep
        self._monotonic = monotonic
        self._rand = rand
        self._discovery: Discovery | None = None
        self._discovery_lock = asyncio.Lock()
        self._cc: _CachedToken | None = None
        self._cc_lock = asyncio.Lock()
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

        `body` is fixed bytes (sent identically on every attempt) or an async builder called per attempt, which
        may give the body in parts (`Parts`: sent one after the other, never joined).
        """
        call = _Call(operation, method, url, urlsplit(url).path, headers, body, idempotency_key)

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
                functools.partial(self._attempt, call),
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

    async def _attempt(self, call: _Call, number: int) -> Reply:
        """One HTTP exchange of `call` (attempt `number`), logged and counted; a 2xx Reply or a BankError."""
        operation, idempotency_key = call.operation, call.idempotency_key
        interaction_id = str(uuid.uuid4())
        sent = {**call.headers, INTERACTION: interaction_id}
        if idempotency_key is not None:
            sent[IDEMPOTENCY] = idempotency_key
        try:
            content = await call.body() if callable(call.body) else call.body
        except errors.BankError as exc:
            # Building the body failed (remote signing, already retried on its own): no outer retries.
            raise _BodyBuildError(exc) from exc
        sent_at = self.clock.now()
        started = self._monotonic()
        try:
            response, answer = await self._exchange(call, sent, content)
        except httpx.RequestError as exc:
            error = _transport_error(exc, operation, interaction_id)
            BANK_CALL_SECONDS.labels(operation, "transport").observe(self._monotonic() - started)
            BANK_CALL_ERRORS.labels(operation, type(error).__name__).inc()
            self._log.warning(
                "bank call failed",
                operation=operation,
                method=call.method,
                path=call.path,
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
            method=call.method,
            path=call.path,
            status=response.status_code,
            correlation_id=interaction_id,
            attempt=number,
            elapsed_ms=elapsed_ms,
            idempotency_key=idempotency_key,
        )
        return self._reply(operation, response, answer, interaction_id, sent_at)

    async def _exchange(
        self, call: _Call, sent: dict[str, str], content: bytes | Parts | None
    ) -> tuple[httpx.Response, bytes | bytearray]:
        """Send one attempt of `call` and read its answer's body (decoded as httpx decodes it).

        The body is gathered in one buffer that grows as it arrives: httpx's `aread` keeps every chunk and then
        joins them, so a 39 MB answer (the bank's echo of a 100,000-transfer file) took 78 MiB at once. A growing
        bytearray costs no second copy (a large one is extended in place by the allocator) and is kept as it is
        when large; a small answer is made bytes."""
        streamed: AsyncIterator[bytes] | None = None
        if isinstance(content, tuple):  # sent as they are: joined, a 40 MB file's body was one more copy of it
            sent["Content-Length"] = str(sum(len(part) for part in content))
            streamed = _each(content)
        request = self._http.build_request(
            call.method,
            call.url,
            headers=sent,
            content=content if streamed is None else streamed,
            extensions={OPERATION_EXTENSION: call.operation},
        )
        response = await self._http.send(request, stream=True)
        try:
            answer = bytearray()
            async for chunk in response.aiter_bytes():
                answer += chunk
        finally:
            await response.aclose()
            # httpx binds the response to its stream and the stream back to the response: a cycle that only the
            # cyclic garbage collector frees, with the request's body in it (a 40 MB file, kept for seconds after
            # the call). Unbinding the stream lets it go as soon as the call returns (measured: docs/benchmarks.md,
            # "the big batch's memory").
            response.stream = _READ
        return response, answer if len(answer) >= _KEEP_AS_READ else bytes(answer)

    def _reply(
        self, operation: str, response: httpx.Response, body: bytes | bytearray, interaction_id: str, sent_at: datetime
    ) -> Reply:
        """The Reply of a 2xx answer; any other status raises (ProtocolError for 1xx/3xx, the bank's error)."""
        if 200 <= response.status_code < 300:
            return Reply(response.status_code, response.headers, body, interaction_id, sent_at)
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
            bytes(body),
            operation=operation,
            interaction_id=interaction_id,
            now=self.clock.now(),
        )
        BANK_CALL_ERRORS.labels(operation, type(failure).__name__).inc()
        raise failure

    def _parse(
        self,
        operation: str,
        reply: Reply,
        reader: Callable[[dict[str, Any]], T],
        loader: Callable[[bytes | bytearray], Any] = loads,
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
        token = bare_text(reply.body)
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

    # -- E3: the client's own tokens -----------------------------------------------------------------------

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

    # -- helpers -------------------------------------------------------------------------------------------

    async def _resource(
        self,
        op: str,
        method: str,
        path: str,
        *,
        fapi: bool,
        body: Body = None,
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


async def _each(parts: Parts) -> AsyncIterator[bytes]:
    """A body's parts as an httpx request stream."""
    for part in parts:
        yield part


_KEEP_AS_READ = 1 << 20
"""An answer at least this large is kept in the buffer it was read into (see `BankClient._exchange`)."""

_READ = httpx.ByteStream(b"")
"""The stream of a response whose body was read (see `BankClient._exchange`)."""


class _BodyBuildError(Exception):
    """Carries a BankError raised while building a request body past the retry loop."""

    def __init__(self, error: errors.BankError) -> None:
        super().__init__(str(error))
        self.error = error


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
