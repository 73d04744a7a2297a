"""The bank client's HTTP transport: httpx's interface over aiohttp's connection pool and HTTP/1.1 parser.

httpx's own transport (httpcore's pool on anyio) cost 1.07-1.68 ms of client CPU per bank call, aiohttp's 0.45
(docs/benchmarks.md), so `AiohttpTransport` is an `httpx.AsyncBaseTransport`: the rest of the processor keeps
httpx (requests, responses, headers, the OpenTelemetry instrumentation that wraps `handle_async_request`).

What it keeps of httpx's transport:
- the request exactly as httpx built it: request line, headers in httpx's order and spelling (aiohttp adds none:
  no Accept, User-Agent or Content-Type of its own), the body's bytes as they are (no copy), a streamed body
  streamed;
- the response's raw headers and body (aiohttp decompresses nothing; httpx decodes as before), streamed to httpx;
- TLS: httpx's default context (`httpx.create_ssl_context()`: SSL_CERT_FILE / SSL_CERT_DIR, else certifi),
  ALPN `http/1.1`; no cookies kept, no redirects followed, no proxy (`bank_transport` falls back to httpx's own
  transport when the environment names proxies);
- the pool: `max_connections`, `keepalive_expiry`; a connection the server closed, or whose response was not read
  to its end, is not reused; aiohttp's silent resend of an idempotent request on a reused connection that broke is
  switched off, so one request is one send and the bank client's retry policy alone decides about another;
- timeouts per request from httpx's `timeout` extension: connect (TCP and TLS), read (each read, from the end of
  the body on), write (the whole body, bytes or streamed, as httpcore writes a bytes body in one operation) and
  pool. aiohttp bounds the wait for a free connection and the connect together: that deadline is pool + connect.

Errors are httpx's, chosen by whether the request may have reached the bank (processor.bank.client reads them;
docs/bank-client.md "Transport errors"). Not sent: `ConnectTimeout` (aiohttp's `ConnectionTimeoutError`: the wait
for a connection or the connect), `ConnectError` (`ClientConnectorError`: DNS, refused, TLS handshake, certificate;
raised only by the connector, before a byte of the request is written). Anything later may have been acted on:
`ReadTimeout` (`ServerTimeoutError`, the read timeout), `WriteTimeout` (the body's write deadline),
`RemoteProtocolError` (`ServerDisconnectedError`, `ClientPayloadError`, an unparsable response) and `ReadError`
for every other aiohttp error, whatever the phase (`ClientOSError` such as a reset, a connection closed while
writing) — where aiohttp cannot tell, the answer is "may have been sent".
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import urllib.request
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import aiohttp
import httpx
from aiohttp import payload
from aiohttp.abc import AbstractStreamWriter
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.connector import Connection
from aiohttp.http_writer import StreamWriter
from aiohttp.tracing import Trace
from multidict import CIMultiDict
from yarl import URL

# aiohttp adds these unless told not to; httpx has already put in the request what it sends.
_NOT_ADDED = frozenset({"Accept", "Accept-Encoding", "User-Agent", "Content-Type"})
_COALESCE_BELOW = 65_536  # a body up to this size leaves in one write with the headers
# A larger body is written a slice at a time, each after the socket took the one before: written whole, what the
# socket does not take at once is copied into the event loop transport's buffer (35 MiB of a 40 MB file, measured
# with memray in benchmarks/big_batch.py); a slice at a time, that buffer holds at most one slice.
_WRITE_SLICE = 1 << 20
_MAX_HEAD_LINE = 16_384  # h11's limit for a whole response head is 16 KiB; aiohttp's default per line is 8 KiB


def mapped_error(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    """The httpx error for an aiohttp one: `ConnectError`/`ConnectTimeout` only when nothing was sent."""
    message = f"{type(exc).__name__}: {exc}"
    kind: type[httpx.TransportError]
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        kind = httpx.ConnectTimeout
    elif isinstance(exc, aiohttp.ClientConnectorError):
        kind = httpx.ConnectError
    elif isinstance(exc, aiohttp.ServerTimeoutError):
        kind = httpx.ReadTimeout
    elif isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        kind = httpx.RemoteProtocolError
    elif isinstance(exc, aiohttp.InvalidURL):
        kind = httpx.UnsupportedProtocol  # refused before connecting, as httpx refuses a URL it cannot send to
    else:
        kind = httpx.ReadError
    return kind(message, request=request)


class _RequestBody(payload.Payload):
    """The request's body as aiohttp writes it: bytes not copied (aiohttp's `BytesPayload` slices them to the
    Content-Length, and joins headers and body into one buffer before Python 3.12.9), a stream's chunks as they
    come; large ones a slice at a time (`_WRITE_SLICE`). Written within the write timeout: the deadline `scope` is
    armed for the write and lifted after it (None once the request has its answer)."""

    _autoclose = True  # nothing to close

    def __init__(
        self, value: bytes | AsyncIterable[bytes], scope: asyncio.Timeout | None, seconds: float | None
    ) -> None:
        super().__init__(value, content_type=None)  # its Content-Type is not sent (`_NOT_ADDED`)
        # A stream's size is its Content-Length header when httpx was given one, else it is sent chunked.
        self._size = len(value) if isinstance(value, bytes) else None
        self.scope = scope
        self._seconds = seconds

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The body as text (aiohttp's interface; a stream cannot be read twice)."""
        if not isinstance(self._value, bytes):
            raise TypeError("a streamed request body cannot be decoded")
        return self._value.decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        """Write the whole body."""
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        """Write the body (at most `content_length` bytes) before the deadline."""
        if self.scope is not None and self._seconds is not None:
            self.scope.reschedule(asyncio.get_running_loop().time() + self._seconds)
        left = content_length
        async for chunk in self._chunks():
            view = memoryview(chunk) if left is None else memoryview(chunk)[:left]
            if len(view) > _COALESCE_BELOW and isinstance(writer, StreamWriter):
                writer.send_headers()  # a big body is not joined to the headers (a copy of it)
            for start in range(0, len(view), _WRITE_SLICE):
                await writer.write(view[start : start + _WRITE_SLICE])  # waits for the socket past 64 KiB written
            if left is not None:
                left -= len(view)
                if not left:
                    break
        if self.scope is not None:
            self.scope.reschedule(None)

    async def _chunks(self) -> AsyncIterator[bytes]:
        if isinstance(self._value, bytes):
            yield self._value
        else:
            async for chunk in self._value:
                yield chunk


def socket_readable(sock: socket.socket | None) -> bool:
    """Whether a read would not block: data, or the end of the stream. A missing or closed socket counts as
    readable, so the pool drops the connection."""
    fileno = -1 if sock is None else sock.fileno()
    if fileno < 0:
        return True
    poller = select.poll()
    poller.register(fileno, select.POLLIN)
    return bool(poller.poll(0))


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, which reuses an idle connection unless the event loop has already seen it closed; this
    one also polls the socket of the connection it hands out (one `poll()`), so a connection whose end (or stray
    bytes) has arrived since the loop last looked is closed, not reused for a request it would lose."""

    async def _get(self, key: ConnectionKey, traces: list[Trace]) -> Connection | None:
        while True:
            connection = await super()._get(key, traces)
            transport = None if connection is None else connection.transport
            if connection is None or not socket_readable(
                None if transport is None else transport.get_extra_info("socket")
            ):
                return connection
            connection.close()


class _ResponseBody(httpx.AsyncByteStream):
    """aiohttp's response body as httpx reads it: chunks as they arrive; closing gives the connection back (or
    closes it when the body was not read to its end)."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except aiohttp.ClientError as exc:
            raise mapped_error(exc, self._request) from exc

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx's transport interface over one aiohttp `ClientSession` (made on the first request, in its loop)."""

    def __init__(self, *, max_connections: int, keepalive_expiry: float | None) -> None:
        self._max_connections = max_connections
        self._keepalive_expiry = keepalive_expiry
        self._ssl = httpx.create_ssl_context()
        self._ssl.set_alpn_protocols(["http/1.1"])  # as httpcore offers it for HTTP/1.1
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[float | None, ...], aiohttp.ClientTimeout] = {}

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context every connection uses."""
        return self._ssl

    def _open(self) -> aiohttp.ClientSession:
        connector = _Connector(
            limit=self._max_connections,
            limit_per_host=0,
            keepalive_timeout=self._keepalive_expiry,
            ssl=self._ssl,
            use_dns_cache=False,  # resolve per new connection, as httpx does
        )
        session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=_NOT_ADDED,
            auto_decompress=False,
            trust_env=False,
            max_line_size=_MAX_HEAD_LINE,
            max_field_size=_MAX_HEAD_LINE,
        )
        # aiohttp resends a GET/PUT/DELETE once when a reused connection breaks; a resend is the bank client's call
        # (and a failure of the second try would hide that the first one was sent).
        session._retry_connection = False
        return session

    def _timeout(self, timeouts: dict[str, float | None]) -> aiohttp.ClientTimeout:
        connect, read, pool = timeouts.get("connect"), timeouts.get("read"), timeouts.get("pool")
        key = (connect, read, pool)
        timeout = self._timeouts.get(key)
        if timeout is None:
            wait = None if connect is None or pool is None else connect + pool
            timeout = aiohttp.ClientTimeout(total=None, connect=wait, sock_connect=connect, sock_read=read)
            self._timeouts[key] = timeout
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request`; the response's body is read by httpx from the stream."""
        session = self._session or self._open()
        self._session = session
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        headers = CIMultiDict((name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers.raw)
        value: bytes | AsyncIterable[bytes] | None
        try:
            value = request.content or None
        except httpx.RequestNotRead:  # a streamed body: sent chunked unless httpx was given its Content-Length
            assert isinstance(request.stream, AsyncIterable)  # an async client's request
            value = request.stream
            headers.popall("Transfer-Encoding", None)  # aiohttp writes it chunked and says so itself
        write = timeouts.get("write")
        try:
            async with asyncio.timeout(None) as scope:
                body = None if value is None else _RequestBody(value, scope, write)
                try:
                    response = await session.request(
                        request.method,
                        URL(str(request.url), encoded=True),
                        headers=headers,
                        data=body,
                        allow_redirects=False,
                        timeout=self._timeout(timeouts),
                    )
                finally:
                    if body is not None:
                        body.scope = None
        except aiohttp.ClientError as exc:
            raise mapped_error(exc, request) from exc
        except TimeoutError as exc:  # the body's write deadline (aiohttp's own timeouts are ClientErrors)
            raise httpx.WriteTimeout(f"the request body was not written within {write} s", request=request) from exc
        version = response.version or aiohttp.HttpVersion11
        return httpx.Response(
            response.status,
            headers=response.raw_headers,
            stream=_ResponseBody(response, request),
            extensions={
                "http_version": f"HTTP/{version.major}.{version.minor}".encode(),
                "reason_phrase": (response.reason or "").encode("latin-1"),
            },
        )

    async def aclose(self) -> None:
        """Close the pool's connections; a later request opens a new pool (as httpx's own transport does)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def bank_transport(limits: httpx.Limits) -> httpx.AsyncBaseTransport | None:
    """The bank client's transport for `limits` (max_connections, keepalive_expiry; every connection may stay
    idle in the pool, as the bank client sets max_keepalive_connections to max_connections); None (use httpx's
    own transport, which honours them) when the environment names proxies."""
    if urllib.request.getproxies():
        return None
    return AiohttpTransport(max_connections=limits.max_connections or 0, keepalive_expiry=limits.keepalive_expiry)


class _NoCookies(httpx.Cookies):
    """A jar that stays empty: what an answer sets is not read, and nothing can be put in it."""

    def extract_cookies(self, response: httpx.Response) -> None:
        """Keep nothing of the answer's `Set-Cookie`."""

    def set(self, name: str, value: str, domain: str = "", path: str = "/") -> None:
        """Refused: the bank client sends no cookies."""
        raise TypeError("the bank client keeps no cookies")

    def __setitem__(self, name: str, value: str) -> None:
        self.set(name, value)

    def update(self, cookies: object = None) -> None:  # type: ignore[override]
        """Refused, unless there is nothing to add."""
        if cookies:
            raise TypeError("the bank client keeps no cookies")


class CookielessClient(httpx.AsyncClient):
    """httpx's client without a cookie jar, for the bank's API.

    The bank authorises each call by its token, and one client serves every consent of an integration: a cookie
    one answer set (a load balancer's, say) would otherwise go with every later call, whoever's consent it is for.
    Reading each answer's `Set-Cookie`, httpx also builds urllib stand-ins of the request and the answer: 1.5 % of
    the processor's CPU at month end (py-spy; `benchmarks/bank_pool.py` prints the cost per call)."""

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.get("cookies"):
            raise TypeError("the bank client keeps no cookies")
        super().__init__(**kwargs)
        self._jarless = _NoCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        """Always empty."""
        return self._jarless

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        raise TypeError("the bank client keeps no cookies")
