"""The floor under issue 22's CPU targets: what the work one batch's lifecycle cannot skip costs in the libraries
alone, with none of the processor's engine, store layer, validation, logging, metrics or traces around it.

Measured in one run against the real parts (PostgreSQL, a Kafka broker, HTTP over loopback), for a batch of
`--transfers` transfers, each piece done the cheapest way the project has measured. Per batch:

- 9 bank calls (A1, A2, E4, E5, E6, A3, A4 twice, the report): httpx's client (the issue keeps its interface)
  over the bank client's aiohttp transport on uvloop, a 1 KB JSON body out, the answer read by msgspec; 32 calls
  in flight on 16 connections to `bank_pool.py`'s server, in its own process, answering after 20 ms; aiohttp's
  own client doing the same is printed below it, for reference (not counted). Every call sends 1 KB (A2 sends
  the file) and gets a short answer (the bank's are longer);
- 1 request served, the approver's redirect's stand-in: that server's own CPU per request (uvicorn, a bare ASGI
  app, asyncio's loop), read from /proc;
- 2 client assertions signed (E4, E6): PyJWT, PS256, a 2048-bit RSA key;
- `--transactions` write transactions: psycopg, BEGIN, a flow row updated, a status event inserted, COMMIT;
- the transfers' outbox rows inserted: one statement, the columns as binary arrays, as the store writes them
  (the cheapest way measured, `store_lists.py`); it runs inside the completion's transaction, counted above;
- the relay's read and mark: those rows read back and marked published, in two transactions;
- 104 events encoded and produced: the transfer events and the four status events as Avro records
  (`schemas.Codec`, the fastest writer measured: `avro_encode.py`), produced by confluent-kafka (idempotent,
  acks=all, linger 5 ms), delivery reports served. The records are built before the clock starts: in a design
  without waste they are made as records, not parsed back from the outbox's JSON (the relay does that today);
  the three status events before COMPLETED carry their required fields only;
- the batch taken in: its Avro message consumed (the clock starts at the first message, the group joined) and
  decoded (`schemas.Codec`), its offset committed;
- the file and its hash, the report read: msgspec JSON of the transfers, SHA-256; msgspec reading a report of as
  many lines.

The default of 10 write transactions is, by our reading, the fewest the guarantees allow (docs/benchmarks.md,
"Eleventh pass"): the intake, A1's side-effect record begun (the flow's claim riding in it), A1 completed with A2's
begun, A2 completed with the move to AUTHORIZATION_REQUIRED, the approval link opened (its state and PKCE verifier
kept), the redirect's code recorded, the tokens stored with A3's record begun, A3 completed with the move to
INITIATED, a status poll that finds the payment pending, the completion with its events. The engine ran 19 write
transactions per batch at the end of the tenth pass (16 without the relay's), and 5.7 reads.

Printed: the CPU per unit and per batch of each piece (this process's CPU, librdkafka's threads included; the
server's for the request served), the floor per batch, and the floor in the month-end benchmark's unit,
CPU-seconds per 1000 batches per second of speed reference, beside the target of 40. Nothing is asserted.

    python benchmarks/floor.py [--pg-url URL] [--bootstrap HOST:PORT] [--batches 300] [--transfers 100]
        [--transactions 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import msgspec
import psycopg
import uvloop
from bank_pool import LIMITS, TASKS, loopback_server  # the 20 ms server, and the bank client's pool
from confluent_kafka import KafkaError, Message
from cryptography.hazmat.primitives.asymmetric import rsa
from month_end import (
    DEFAULT_PG_URL,
    batch_record,
    broker,
    delete_topics,
    fresh_kafka,
    fresh_store,
    load_averages,
    process_cpu_seconds,
    say,
    speed_reference_seconds,
)
from month_end import (
    produce as submit,
)
from relay_encode import NOW, OCCURRED, batch_events  # a completed batch's outbox events, as the relay's benchmark

from processor.bank.transport import CookielessClient, bank_transport
from processor.kafka.clients import consumer_config, new_consumer, new_producer, producer_config
from processor.kafka.settings import KafkaSettings
from processor.store.values import dump_json
from producers.relay import outbox_record
from schemas import Codec
from schemas.topics import BATCHES_TOPIC, STATUS_TOPIC, TRANSFERS_TOPIC

TARGET = 40.0  # issue 22: CPU-seconds per 1000 batches per second of speed reference
URL_PATH = "/open-banking/v3.1/pisp/file-payment-consents"

BANK = "bank calls (httpx over aiohttp)"
AIOHTTP = "  aiohttp alone, for reference"
SERVED = "a request served (uvicorn)"
SIGNED = "client assertions signed"
WRITES = "write transactions"
INSERTED = "the transfers' outbox rows inserted"
RELAYED = "the relay's read and mark (2 transactions)"
PRODUCED = "events encoded and produced"
TAKEN = "the batch consumed and decoded"
FILE = "the file and its hash, the report read"


def request_body(transfers: int) -> dict[str, Any]:
    """About 1 KB of JSON: a consent request's shape (the file travels only in A2)."""
    return {
        "Data": {
            "Initiation": {
                "FileType": "UK.OBIE.PaymentInitiation.3.1",
                "FileHash": "m5ah/h1UjLvJYMxqAoZmj9dKdjZnsGNm+yMkJp/KuqQ=",
                "NumberOfTransactions": str(transfers),
                "ControlSum": "123456.78",
                "DebtorAccount": {"SchemeName": "UK.OBIE.SortCodeAccountNumber", "Identification": "0100123456"},
                "RemittanceInformation": {"Reference": "PAYROLL-2026-11", "Unstructured": "November payroll" * 8},
            }
        },
        "Risk": {"PaymentContextCode": "PartyToParty", "MerchantCategoryCode": "6012" * 40},
    }


# -- bank calls ------------------------------------------------------------------------------------------------

Post = Callable[[str, bytes, dict[str, str]], Awaitable[bytes]]  # url, body, headers -> the answer's body


@asynccontextmanager
async def aiohttp_post() -> AsyncIterator[Post]:
    """POSTs by aiohttp's own client, no cookie jar."""
    connector = aiohttp.TCPConnector(limit=LIMITS.max_connections or 0)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:

        async def post(url: str, data: bytes, headers: dict[str, str]) -> bytes:
            async with session.post(url, data=data, headers=headers) as answer:
                return await answer.read()

        yield post


@asynccontextmanager
async def httpx_post() -> AsyncIterator[Post]:
    """POSTs by httpx's client over the bank client's transport, as the bank client makes them."""
    async with CookielessClient(transport=bank_transport(LIMITS), limits=LIMITS) as client:

        async def post(url: str, data: bytes, headers: dict[str, str]) -> bytes:
            return (await client.post(url, content=data, headers=headers)).content

        yield post


def server_cpu(pid: int) -> float:
    """The loopback server's CPU seconds so far (RuntimeError once it is gone: its figure would be wrong)."""
    seconds = process_cpu_seconds(pid)
    if seconds is None:
        raise RuntimeError(f"the loopback server (pid {pid}) is gone")
    return seconds


async def _calls(
    client: Callable[[], AbstractAsyncContextManager[Post]], url: str, server: int, calls: int, transfers: int
) -> tuple[float, float]:
    """(client CPU per call, server CPU per request) of `calls` calls by `TASKS` workers, after two calls each
    (the connections opened, the code warmed)."""
    body = request_body(transfers)
    async with client() as post:

        async def worker(count: int) -> None:
            for _ in range(count):
                headers = {"Content-Type": "application/json", "x-idempotency-key": str(uuid.uuid4())}
                msgspec.json.decode(await post(url, msgspec.json.encode(body), headers))

        await asyncio.gather(*(worker(2) for _ in range(TASKS)))
        mine, served = time.process_time(), server_cpu(server)
        await asyncio.gather(*(worker(calls // TASKS) for _ in range(TASKS)))
        done = calls // TASKS * TASKS
        return (time.process_time() - mine) / done, (server_cpu(server) - served) / done


def bank_calls(
    client: Callable[[], AbstractAsyncContextManager[Post]], base: str, server: int, calls: int, transfers: int
) -> tuple[float, float]:
    """(client CPU per call, server CPU per request) over `calls` calls made by `client`, on uvloop."""
    return uvloop.run(_calls(client, f"{base}{URL_PATH}", server, calls, transfers))


def signatures(count: int) -> float:
    """CPU per PS256 client assertion."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    started = time.process_time()
    for _ in range(count):
        claims = {"iss": "client", "sub": "client", "aud": "https://bank/token", "jti": str(uuid.uuid4()), "exp": 1}
        jwt.encode(claims, key, algorithm="PS256", headers={"kid": "key-1"})
    return (time.process_time() - started) / count


# -- the store -------------------------------------------------------------------------------------------------

SCHEMA = (
    "CREATE TABLE flows (id bigint PRIMARY KEY, state text, updated_at timestamptz)",
    "CREATE TABLE events (id bigserial PRIMARY KEY, event_key text, seq bigint, payload text,"
    " created_at timestamptz, published_at timestamptz)",
    "CREATE INDEX events_unpublished ON events (event_key, seq) WHERE published_at IS NULL",
)


def transactions(conn: psycopg.Connection[Any], count: int) -> float:
    """CPU per write transaction: a state change and its status event."""
    conn.execute(
        "INSERT INTO flows SELECT g, 'NEW', now() FROM generate_series(0, %s) g ON CONFLICT DO NOTHING", (count,)
    )
    payload = dump_json({"batch_id": "B-000001", "status": "INITIATED", "occurred_at": OCCURRED})
    started = time.process_time()
    for index in range(count):
        with conn.transaction():
            conn.execute("UPDATE flows SET state = %s, updated_at = %s WHERE id = %s", ("INITIATED", NOW, index))
            conn.execute(
                "INSERT INTO events (event_key, seq, payload, created_at) VALUES (%s, %s, %s, %s)",
                (f"B-{index}", 1, payload, NOW),
            )
    return (time.process_time() - started) / count


def outbox_rows(conn: psycopg.Connection[Any], batches: int, payloads: list[str]) -> dict[str, float]:
    """CPU per batch of its transfers' rows inserted, and of the relay reading them back and marking them
    published (two transactions), timed apart."""
    count = len(payloads)
    inserted = relayed = 0.0
    for _ in range(batches):
        key = f"R-{uuid.uuid4().hex}"
        started = time.process_time()
        conn.execute(
            "INSERT INTO events (event_key, seq, payload, created_at)"
            " SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::timestamptz[])",
            ([key] * count, list(range(count)), payloads, [NOW] * count),
        )
        between = time.process_time()
        with conn.transaction():
            rows = conn.execute(
                "SELECT id, seq, payload, created_at FROM events WHERE event_key = %s AND published_at IS NULL"
                " ORDER BY seq",
                (key,),
            ).fetchall()
        with conn.transaction():
            conn.execute("UPDATE events SET published_at = %s WHERE id = ANY(%s)", (NOW, [row[0] for row in rows]))
        inserted, relayed = inserted + between - started, relayed + time.process_time() - between
    return {INSERTED: inserted / batches, RELAYED: relayed / batches}


# -- Kafka -----------------------------------------------------------------------------------------------------


def produced(config: dict[str, Any], topics: dict[str, str], batches: int, records: list[tuple[str, Any]]) -> float:
    """CPU per batch of its events encoded and produced, delivery reports served (flushed at the end)."""
    codecs = {topic: Codec(topic) for topic in topics}
    producer = new_producer({**config, "linger.ms": 5})
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(error)

    started = time.process_time()
    for batch in range(batches):
        key = f"B-{batch:06d}".encode()
        for topic, record in records:
            value = codecs[topic].encode(record)
            while True:
                try:
                    producer.produce(
                        topics[topic], value=value, key=key, headers=[("seq", b"1")], on_delivery=delivered
                    )
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
    left = producer.flush(60)
    spent = time.process_time() - started
    if left or failures:
        raise RuntimeError(f"Kafka did not take every event: {left} left, {failures[:3]}")
    return spent / batches


def taken_in(kafka: KafkaSettings, batches: int, transfers: int) -> float:
    """CPU per batch message consumed, decoded and committed (the messages are produced first, untimed, as the
    month-end benchmark submits them; the clock starts at the first message, once the consumer has joined its
    group)."""
    codec, topic = Codec(BATCHES_TOPIC), kafka.topic(BATCHES_TOPIC)
    submit(
        kafka, [(str(batch), codec.encode(batch_record(f"F-{batch}", transfers, batch))) for batch in range(batches)]
    )
    reader = new_consumer({**consumer_config(kafka, "floor"), "group.id": f"floor-{uuid.uuid4().hex[:8]}"})
    reader.subscribe([topic])
    seen, started, deadline = 0, 0.0, time.monotonic() + 60
    try:
        while seen < batches and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is None or message.error() is not None:
                continue
            started = started or time.process_time()
            value = message.value()
            assert value is not None
            codec.decode(value)
            reader.commit(message=message, asynchronous=False)
            seen += 1
        spent = time.process_time() - started
    finally:
        reader.close()
    if seen < batches:
        raise RuntimeError(f"only {seen} of {batches} batches came back from Kafka")
    return spent / batches


def file_and_report(batches: int, transfers: int) -> float:
    """CPU per batch: the payment file written as JSON and hashed, a report of as many lines read."""
    lines = [
        {
            "EndToEndIdentification": f"E-{i:06d}",
            "InstructedAmount": {"Amount": f"{1000 + i}.25", "Currency": "GTQ"},
            "CreditorAccount": {"SchemeName": "IBAN", "Identification": f"GT{3_000_000_000 + i:022d}"},
            "RemittanceInformation": {"Reference": f"Salary #{i}"},
        }
        for i in range(transfers)
    ]
    report = msgspec.json.encode(
        {"Data": {"Transactions": [{**line, "Status": "AcceptedSettlementCompleted"} for line in lines]}}
    )
    started = time.process_time()
    for batch in range(batches):
        data = msgspec.json.encode({"Data": {"FileReference": f"PAYROLL-{batch}", "Initiation": lines}})
        hashlib.sha256(data).digest()
        msgspec.json.decode(report)
    return (time.process_time() - started) / batches


# -- the run ---------------------------------------------------------------------------------------------------

Run = Callable[[], dict[str, float]]  # one piece measured once: CPU seconds per unit, by line


def pieces(
    args: argparse.Namespace, server: tuple[str, int], conn: psycopg.Connection[Any], kafka: KafkaSettings
) -> tuple[dict[str, float], list[Run]]:
    """The count per batch of every line, and the runs that measure them (see the module docstring)."""
    completed = batch_events(0, args.transfers)
    short = dump_json({"batch_id": completed[-1].key, "occurred_at": OCCURRED})
    events = [  # the status events before COMPLETED, then the transfers and COMPLETED
        dataclasses.replace(completed[-1], status=status, payload_text=short)
        for status in ("AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED")
    ] + completed
    records = [(event.topic, outbox_record(event)) for event in events]
    payloads = [event.payload_text for event in events if event.topic == TRANSFERS_TOPIC]
    topics = {topic: kafka.topic(topic) for topic in (TRANSFERS_TOPIC, STATUS_TOPIC)}
    config = producer_config(kafka, "floor")
    calls = args.batches * 4
    counts = {BANK: 9.0, AIOHTTP: 0.0, SERVED: 1.0, SIGNED: 2.0, WRITES: float(args.transactions)}
    counts |= {INSERTED: 1.0, RELAYED: 1.0, PRODUCED: 1.0, TAKEN: 1.0, FILE: 1.0}

    def bank() -> dict[str, float]:
        client, served = bank_calls(httpx_post, *server, calls, args.transfers)
        return {BANK: client, SERVED: served}

    runs: list[Run] = [
        bank,
        lambda: {AIOHTTP: bank_calls(aiohttp_post, *server, calls, args.transfers)[0]},
        lambda: {SIGNED: signatures(args.batches)},
        lambda: {WRITES: transactions(conn, args.batches * 2)},
        lambda: outbox_rows(conn, args.batches, payloads),
        lambda: {PRODUCED: produced(config, topics, args.batches, records)},
        lambda: {TAKEN: taken_in(kafka, args.batches, args.transfers)},
        lambda: {FILE: file_and_report(args.batches, args.transfers)},
    ]
    return counts, runs


def measure(args: argparse.Namespace, bootstrap: str, store_url: str) -> None:
    """Every piece `args.rounds` times; prints the table and the floor."""
    kafka = fresh_kafka(bootstrap, partitions=1)
    reference = [speed_reference_seconds()]
    units: dict[str, list[float]] = {}
    try:
        with loopback_server() as server, psycopg.connect(store_url, autocommit=True) as conn:
            for statement in SCHEMA:
                conn.execute(statement)
            counts, runs = pieces(args, server, conn, kafka)
            for round_ in range(args.rounds):
                say(f"round {round_ + 1} of {args.rounds}")
                for run in runs:
                    for name, value in run().items():
                        units.setdefault(name, []).append(value)
                reference.append(speed_reference_seconds())
    finally:
        delete_topics(kafka)
    report(args, [(name, count, units[name]) for name, count in counts.items()], reference)


Row = tuple[str, float, list[float]]  # a piece's name, its count per batch, its CPU seconds per unit in each round


def floor_range(rows: list[Row]) -> tuple[float, float]:
    """The floor per batch in ms, low and high: each piece's count times its lowest and its highest CPU per unit
    (a piece counted 0 times, printed for reference, adds nothing)."""
    low = sum(count * min(values) for _, count, values in rows)
    high = sum(count * max(values) for _, count, values in rows)
    return low * 1000, high * 1000


def report(args: argparse.Namespace, rows: list[Row], reference: list[float]) -> None:
    """The table, the floor per batch and in the month-end benchmark's unit. The speed reference is read before
    the first round and after each; its median is used (its readings spread by a third within one run on a
    shared machine)."""
    speed = statistics.median(reference)
    print(f"\n=== the floor per batch of {args.transfers} transfers, {args.rounds} rounds (low - high) ===")
    print(f"{'piece':44s} {'count':>5s} {'CPU per unit':>21s} {'CPU per batch':>19s}")
    for name, count, values in rows:
        each_low, each_high = min(values) * 1000, max(values) * 1000
        unit = f"{name:44s} {count:5g} {each_low:7.3f} - {each_high:7.3f} ms"
        print(unit if count == 0 else f"{unit} {count * each_low:6.2f} - {count * each_high:6.2f} ms")
    low, high = floor_range(rows)
    print(f"{'floor':44s} {'':5s} {'':21s} {low:6.2f} - {high:6.2f} ms")
    budget = TARGET * speed
    readings = ", ".join(f"{value:.3f}" for value in reference)
    print(f"speed reference (median of {len(reference)} readings: {readings}): {speed:.3f} s")
    print(
        f"floor in CPU-s per 1000 batches / speed reference: {low / speed:.1f} - {high / speed:.1f}"
        f"  (target <= {TARGET:g}: {budget:.1f} ms per batch at this speed reference, of which the floor"
        f" takes {100 * low / budget:.0f} - {100 * high / budget:.0f} %)"
    )


def main() -> int:
    """Parses the options, starts what is needed and prints the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="a PostgreSQL server (a scratch database is made)")
    parser.add_argument("--bootstrap", help="existing Kafka (default: $KAFKA_BOOTSTRAP_SERVERS, else a local one)")
    parser.add_argument("--batches", type=int, default=300, help="batches per piece and round")
    parser.add_argument("--transfers", type=int, default=100, help="transfers per batch")
    parser.add_argument("--transactions", type=int, default=10, help="write transactions per batch")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(
        f"floor benchmark {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {os.cpu_count()} cores,"
        f" load average {load_averages()}"
    )
    with (
        tempfile.TemporaryDirectory() as scratch,
        broker(args.bootstrap) as bootstrap,
        fresh_store("postgresql", args.pg_url, Path(scratch)) as store_url,
    ):
        measure(args, bootstrap, store_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
