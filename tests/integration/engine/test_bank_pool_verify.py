"""`BankPool.verify`, the issuer check at start, over real loopback TCP: every bank is checked at the same time."""

from __future__ import annotations

import asyncio
import json

import pytest
from bank_support import make_integration

from processor.bank import IssuerMismatch
from processor.engine.banks import BankPool


class GateBank:
    """A bank whose discovery answers only once `needed` requests are waiting at the same time (then all of
    them, naming another issuer); a request alone waits until its client gives up."""

    def __init__(self, needed: int) -> None:
        self.needed = needed
        self.waiting = 0
        self.open = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.waiting += 1
            if self.waiting >= self.needed:
                self.open.set()
            gone = asyncio.ensure_future(reader.read(1))  # EOF: the client gave up waiting
            opened = asyncio.ensure_future(self.open.wait())
            await asyncio.wait({gone, opened}, return_when=asyncio.FIRST_COMPLETED)
            if not opened.done():
                opened.cancel()
                self.waiting -= 1
                return
            gone.cancel()
            base = "http://elsewhere.example"
            body = json.dumps(
                {
                    "issuer": base,
                    "token_endpoint": base + "/token",
                    "authorization_endpoint": base + "/auth",
                    "pushed_authorization_request_endpoint": base + "/par",
                }
            ).encode()
            head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_banks_are_checked_at_the_same_time_so_one_that_hangs_holds_up_no_other() -> None:
    # Checked one after another, the first request would wait alone until `wait` ran out, and so would the
    # second: both would be reported unreachable and the foreign issuer never seen.
    gate = GateBank(needed=2)
    server = await asyncio.start_server(gate.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    base = make_integration(f"http://127.0.0.1:{port}")
    pool = BankPool({name: base.model_copy(update={"name": name}) for name in ("first", "second")})
    try:
        with pytest.raises(IssuerMismatch):
            await pool.verify(wait=5)
        assert gate.waiting == 2
    finally:
        await pool.aclose()
        server.close()
        await server.wait_closed()


async def test_a_bank_that_does_not_answer_is_reported_not_raised() -> None:
    gate = GateBank(needed=2)  # one integration only: its discovery never gets an answer
    server = await asyncio.start_server(gate.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = BankPool({"sandbox": make_integration(f"http://127.0.0.1:{port}")})
    try:
        unreachable = await pool.verify(wait=0.5)
        assert list(unreachable) == ["sandbox"] and "no discovery answer within 0.5 s" in unreachable["sandbox"]
    finally:
        gate.open.set()
        await pool.aclose()
        server.close()
        await server.wait_closed()
