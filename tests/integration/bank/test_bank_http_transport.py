"""The bank client's HTTP transport (`processor.bank.transport`, httpx over aiohttp) against real servers on
loopback: the bytes it sends are httpx's own transport's, its pool reuses connections and never one the server
closed, and every failure says whether the request may have reached the bank (`ambiguous`), as the bank client
reads it (`processor.bank.client._transport_error`)."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import struct
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from bank_support import Sleeps, make_integration
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from processor.bank.client import BankClient, _transport_error
from processor.bank.transport import AiohttpTransport, bank_transport

LIMITS = httpx.Limits(max_connections=4, max_keepalive_connections=4)
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


@dataclass
class Server:
    """A raw HTTP/1.1 server on loopback: `handler` serves each connection; it records each request's head and
    body (`heads`, `bodies`) and counts connections."""

    handler: Handler
    heads: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    connections: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    ssl_context: ssl.SSLContext | None = None
    port: int = 0
    _server: asyncio.Server | None = None

    async def read_request(self, reader: asyncio.StreamReader, *, body: bool = True) -> bool:
        """Read one request (its body by Content-Length when `body`); False at the end of the connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        self.heads.append(head)
        self.arrived.set()
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
            0,
        )
        if body:
            self.bodies.append(await reader.readexactly(length))
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        host = "localhost" if self.ssl_context else "127.0.0.1"
        return f"{scheme}://{host}:{self.port}/"


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    while await server.read_request(reader):
        writer.write(OK)
        await writer.drain()


async def close_after_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """Answers without `Connection: close`, then closes (a server's keep-alive limit)."""
    if await server.read_request(reader):
        writer.write(OK)
        await writer.drain()


async def drop_after_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """Reads the whole request, then closes without an answer."""
    await server.read_request(reader)


async def reset_after_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """Reads the whole request, then resets the connection (RST)."""
    await server.read_request(reader)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def half_a_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """Answers 201 with half its announced body, then closes."""
    await server.read_request(reader)
    writer.write(b"HTTP/1.1 201 Created\r\ncontent-length: 100\r\n\r\n" + b"x" * 50)
    await writer.drain()


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """Reads the request, never answers."""
    await server.read_request(reader)
    await asyncio.sleep(30)


async def reads_only_the_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """Reads the request's head, never its body."""
    await server.read_request(reader, body=False)
    await asyncio.sleep(30)


async def answer_then_drop_the_second(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server
) -> None:
    """Answers the first request of the connection; reads the second and closes without an answer."""
    await server.read_request(reader)
    writer.write(OK)
    await writer.drain()
    await server.read_request(reader)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = bank_transport(LIMITS)
    assert isinstance(transport, AiohttpTransport)
    async with httpx.AsyncClient(transport=transport, limits=LIMITS, timeout=5) as http:
        yield http


def ambiguous(exc: httpx.RequestError) -> bool:
    """Whether the bank client takes this failure as "the bank may have acted"."""
    return _transport_error(exc, "A1 create file-payment-consent", "interaction").ambiguous


async def test_requests_are_byte_for_byte_those_of_httpx_own_transport() -> None:
    async with Server(keep_alive) as server:
        for transport in (httpx.AsyncHTTPTransport(limits=LIMITS), bank_transport(LIMITS)):
            assert transport is not None
            async with httpx.AsyncClient(transport=transport, headers={"User-Agent": "dispersion-processor"}) as http:
                headers = {"x-fapi-financial-id": "0015800001041RHAAY", "Content-Type": "application/json"}
                url = f"{server.url}open-banking/v3.1/pisp/file%20payments?a=1&b=%2F"
                assert (await http.post(url, headers=headers, content=b'{"Data": {}}')).text == "ok"
                assert (await http.get(f"{server.url}discovery", headers={"traceparent": "00-ab-cd-01"})).text == "ok"
                assert (await http.post(f"{server.url}empty")).text == "ok"
                assert (await http.put(f"{server.url}big", content=b"x" * 300_000)).text == "ok"
    half = len(server.heads) // 2
    assert half == 4
    assert server.heads[:half] == server.heads[half:]
    assert server.bodies[:half] == server.bodies[half:]
    assert server.heads[0].startswith(b"POST /open-banking/v3.1/pisp/file%20payments?a=1&b=%2F HTTP/1.1\r\n")


async def test_a_streamed_request_body_is_sent_chunked(client: httpx.AsyncClient) -> None:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"abc", b"defg"):
            yield part

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader, body=False)
        server.bodies.append(await reader.readuntil(b"0\r\n\r\n"))
        writer.write(OK)

    async with Server(chunked) as server:
        assert (await client.post(server.url, content=parts())).text == "ok"
    assert b"\r\nTransfer-Encoding: chunked\r\n" in server.heads[0]
    assert server.bodies == [b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"]


async def test_a_big_request_body_is_not_copied_into_the_event_loops_buffer(client: httpx.AsyncClient) -> None:
    """Written whole, the part of a large body the socket does not take at once is copied into the transport's
    buffer (most of a 40 MB file); written a slice at a time after the socket took the one before, at most a slice."""
    body = b"x" * 24_000_000

    async def slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader, body=False)
        left = len(body)
        while left:
            left -= len(await reader.read(65_536))
            await asyncio.sleep(0)
        writer.write(OK)

    async with Server(slow_reader) as server:
        tracemalloc.start()
        try:
            assert (await client.post(server.url, content=body)).text == "ok"
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 6_000_000, peak


async def test_a_body_in_parts_is_sent_as_they_are_with_its_length(client: httpx.AsyncClient) -> None:
    """The bank client sends A1/A3 in parts with their total as Content-Length: not chunked, the parts' bytes one
    after the other, and never joined (the file part alone is 24 MB here)."""
    file = b"x" * 24_000_000
    parts = (b'{"Data": {"Initiation": ', file, b"}}")

    async def each() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    async def slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader, body=False)
        head, tail, left = b"", b"", sum(map(len, parts))
        while left:
            chunk = await reader.read(min(left, 65_536))
            head, tail, left = (head + chunk)[:30], (tail + chunk)[-3:], left - len(chunk)
            await asyncio.sleep(0)
        server.bodies.append(head + tail)
        writer.write(OK)

    length = str(sum(map(len, parts)))
    async with Server(slow_reader) as server:
        tracemalloc.start()
        try:
            response = await client.post(server.url, content=each(), headers={"Content-Length": length})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert response.text == "ok"
    assert b"\r\nContent-Length: 24000026\r\n" in server.heads[0] and b"chunked" not in server.heads[0]
    assert server.bodies == [b'{"Data": {"Initiation": xxxxxx' + b"x}}"]
    assert peak < 6_000_000, peak  # neither joined nor copied into the event loop's buffer


async def test_the_bank_client_reads_a_big_answer_into_one_buffer() -> None:
    """httpx's `aread` keeps each chunk of an answer and then joins them: twice its size at once. The bank client
    reads a 24 MB answer (the bank's echo of a 100,000-transfer file is 39 MB) into one growing buffer."""
    body = b"y" * 24_000_000

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
            for start in range(0, len(body), 1 << 20):
                writer.write(body[start : start + (1 << 20)])
                await writer.drain()

    async with Server(echo) as server:
        bank = BankClient(make_integration(server.url.rstrip("/")))
        try:
            tracemalloc.start()
            try:
                reply = await bank.request("A4 get file-payment", "GET", server.url, headers={})
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        finally:
            await bank.aclose()
    assert reply.status == 200 and reply.body == body
    assert peak < len(body) * 1.4, peak  # aread: over twice the body


async def test_the_bank_client_sends_a_body_in_parts_with_its_length_and_the_same_bytes_on_a_retry() -> None:
    """A1/A3 give their body in parts (`calls.Parts`): sent with their total as Content-Length, not chunked, and
    the same bytes again when a 503 makes the client send it once more."""
    parts = (b'{"Data": {"Initiation": ', b'{"SupplementaryData": {"x": 1}}', b"}}")
    answers = [b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n", OK]

    async def flaky(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while answers and await server.read_request(reader):
            writer.write(answers.pop(0))
            await writer.drain()

    async def build() -> tuple[bytes, ...]:
        return parts

    async with Server(flaky) as server:
        bank = BankClient(make_integration(server.url.rstrip("/")), sleep=Sleeps())
        try:
            reply = await bank.request(
                "A1 create file-payment-consent", "POST", server.url, headers={}, body=build, idempotency_key="k-1"
            )
        finally:
            await bank.aclose()
    assert reply.status == 200 and len(server.heads) == 2
    for head in server.heads:
        assert b"\r\nContent-Length: %d\r\n" % sum(map(len, parts)) in head and b"chunked" not in head.lower()
    assert server.bodies == [b"".join(parts)] * 2


async def test_a_big_response_body_arrives_whole_and_streams(client: httpx.AsyncClient) -> None:
    body = bytes(range(256)) * 40_000  # 10 MB, a large report file

    async def report(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()

    async with Server(report) as server:
        assert (await client.get(server.url)).content == body
        async with client.stream("GET", server.url) as response:
            chunks = [chunk async for chunk in response.aiter_raw()]
        assert b"".join(chunks) == body and len(chunks) > 1
        assert server.connections == 1  # both read to the end: the connection was reused
        async with client.stream("GET", server.url) as response:
            async for _ in response.aiter_raw():
                break  # the rest of this body is still on the way: the connection cannot serve another request
        assert (await client.get(server.url)).content == body
        assert server.connections == 2


async def test_requests_beyond_the_pool_wait_and_reuse_its_connections(client: httpx.AsyncClient) -> None:
    async with Server(keep_alive) as server:

        async def task() -> None:
            for _ in range(5):
                assert (await client.get(server.url)).text == "ok"

        await asyncio.gather(*(task() for _ in range(12)))
        assert len(server.heads) == 60
        assert server.connections <= 4


async def test_a_connection_the_server_closed_is_never_reused(client: httpx.AsyncClient) -> None:
    async with Server(close_after_answer) as server:
        for _ in range(5):  # at once: the loop may not have seen the end of the previous connection yet
            assert (await client.post(server.url, content=b"{}")).text == "ok"
        assert server.connections == 5


async def test_a_refused_connection_is_not_sent(client: httpx.AsyncClient) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(httpx.ConnectError) as caught:
            await client.post(f"http://127.0.0.1:{port}/", content=b"{}")
    assert not ambiguous(caught.value)


async def test_a_connect_that_times_out_is_not_sent() -> None:
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        fillers = []
        for _ in range(4):  # fill the accept queue; later SYNs are dropped, so the connect hangs
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        await asyncio.sleep(0.1)
        transport = bank_transport(LIMITS)
        timeout = httpx.Timeout(5, connect=0.3, pool=0.3)
        try:
            async with httpx.AsyncClient(transport=transport, timeout=timeout) as http:
                with pytest.raises(httpx.ConnectTimeout) as caught:
                    await http.post(f"http://127.0.0.1:{port}/", content=b"{}")
        finally:
            for filler in fillers:
                filler.close()
    assert not ambiguous(caught.value)


async def test_waiting_too_long_for_a_free_connection_is_not_sent() -> None:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with (
        Server(silent) as server,
        httpx.AsyncClient(transport=bank_transport(limits), timeout=httpx.Timeout(5, connect=0.2, pool=0.2)) as http,
    ):
        holder = asyncio.create_task(http.get(server.url))  # takes the only connection, gets no answer
        await asyncio.wait_for(server.arrived.wait(), 5)
        with pytest.raises(httpx.ConnectTimeout) as caught:
            await http.post(server.url, content=b"{}")
        holder.cancel()
    assert not ambiguous(caught.value)
    assert len(server.heads) == 1


@pytest.mark.parametrize(
    ("handler", "error"),
    [
        (drop_after_request, httpx.RemoteProtocolError),
        (reset_after_request, httpx.ReadError),
        (half_a_body, httpx.RemoteProtocolError),
    ],
    ids=["dropped after the request", "reset after the request", "half a body"],
)
async def test_a_connection_lost_after_the_request_is_ambiguous(
    client: httpx.AsyncClient, handler: Handler, error: type[httpx.RequestError]
) -> None:
    async with Server(handler) as server:
        with pytest.raises(error) as caught:
            await client.post(server.url, content=b'{"Data": {}}')
    assert ambiguous(caught.value)
    assert server.bodies == [b'{"Data": {}}']  # the bank had all of it


async def test_a_reused_connection_dropped_after_a_get_is_ambiguous_and_not_resent(
    client: httpx.AsyncClient,
) -> None:
    async with Server(answer_then_drop_the_second) as server:
        assert (await client.get(server.url)).text == "ok"
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await client.get(server.url)  # aiohttp by itself would send it again on a new connection
    assert ambiguous(caught.value)
    assert len(server.heads) == 2 and server.connections == 1


async def test_no_answer_within_the_read_timeout_is_ambiguous() -> None:
    async with (
        Server(silent) as server,
        httpx.AsyncClient(transport=bank_transport(LIMITS), timeout=httpx.Timeout(5, read=0.3)) as http,
    ):
        with pytest.raises(httpx.ReadTimeout) as caught:
            await http.post(server.url, content=b"{}")
    assert ambiguous(caught.value)


async def test_a_body_the_server_does_not_read_times_out_ambiguously() -> None:
    async with (
        Server(reads_only_the_head) as server,
        httpx.AsyncClient(transport=bank_transport(LIMITS), timeout=httpx.Timeout(5, write=0.3)) as http,
    ):
        with pytest.raises(httpx.WriteTimeout) as caught:
            await http.post(server.url, content=b"x" * 64_000_000)  # more than the socket buffers hold
    assert ambiguous(caught.value)


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


async def test_tls_trusts_what_httpx_trusts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert_path, key_path = _certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    async with Server(keep_alive, ssl_context=context) as server:
        async with httpx.AsyncClient(transport=bank_transport(LIMITS)) as http:
            with pytest.raises(httpx.ConnectError) as caught:  # an unknown issuer: refused in the handshake
                await http.post(server.url, content=b"{}")
            assert not ambiguous(caught.value)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_path))  # httpx's way to name the trusted certificates
        async with httpx.AsyncClient(transport=bank_transport(LIMITS)) as http:
            assert (await http.post(server.url, content=b"{}")).text == "ok"
    assert server.bodies == [b"{}"]


async def test_a_closed_transport_opens_a_new_pool_on_its_next_request() -> None:
    transport = bank_transport(LIMITS)
    assert transport is not None
    async with Server(keep_alive) as server:
        for _ in range(2):  # an engine restarted on the same transport (closing the client closes the transport)
            async with httpx.AsyncClient(transport=transport) as http:
                assert (await http.get(server.url)).text == "ok"
    assert server.connections == 2


async def test_the_bank_client_sends_no_cookie_an_answer_set() -> None:
    """One client serves every consent of an integration: a cookie set by one answer is not sent with later calls
    (httpx's own client keeps it and sends it)."""

    async def sets_a_cookie(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader):
            writer.write(b"HTTP/1.1 200 OK\r\nset-cookie: affinity=node-7; Path=/\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    async with Server(sets_a_cookie) as server:
        async with httpx.AsyncClient(transport=bank_transport(LIMITS), limits=LIMITS) as plain:
            for _ in range(2):
                (await plain.get(server.url)).raise_for_status()
        bank = BankClient(make_integration(server.url.rstrip("/")))
        try:
            for _ in range(2):
                reply = await bank.request("A4 get file-payment", "GET", server.url, headers={})
                assert reply.status == 200
        finally:
            await bank.aclose()
    assert b"affinity=node-7" in server.heads[1].lower()  # httpx's client: the cookie goes back
    assert all(b"cookie" not in head.lower() for head in server.heads[2:]), server.heads[2:]
    assert len(server.heads) == 4
