"""The processor's Kafka-facing intake and HTTP surface, over a real store (SQLite and PostgreSQL):

- VRP requests consumed from Kafka are only stored (no bank call: the bank here is an address nobody serves),
  duplicates change nothing, invalid ones are stored INVALID with their event and dead-lettered, and the
  Avro records decode through the real codec;
- `/healthz` and `/metrics` of a processor instance (role `api`, so no broker is needed) report the store's
  figures: batches and mandates by state and the outbox backlog.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

import httpx
from bank_support import integration_table
from vrp_engine_support import mandate_request, payment_request

import schemas
from consumers.loop import Accept, Reject
from consumers.vrp import VrpIntake, vrp_handlers
from processor.cli.config import Config
from processor.cli.service import Processor
from processor.engine.assembly import build_engine
from processor.engine.intake import accept_batch
from processor.engine.vrp import attach_vrp
from processor.kafka.settings import KafkaSettings
from processor.store import Store
from schemas.topics import VRP_STATUS_TOPIC

T = TypeVar("T")


def _config(unserved_port: int) -> Config:
    """The bank is a loopback address where nothing listens: any bank call would fail loudly."""
    return Config(
        processor={"public_url": "http://127.0.0.1:8600"},
        integrations={"sandbox": integration_table(f"http://127.0.0.1:{unserved_port}")},
    )


@dataclass
class _Message:
    """The part of a confluent-kafka Message the handlers read."""

    topic_name: str
    data: bytes | None

    def topic(self) -> str:
        return self.topic_name

    def value(self) -> bytes | None:
        return self.data

    def headers(self) -> list[tuple[str, bytes]] | None:
        return None  # no traceparent: the handler starts a trace of its own


_CONSUMER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="consumer")


async def _in_consumer_thread(function: Callable[..., T], *args: Any) -> T:
    """Run an intake call the way the service does: always on the one consumer thread (its own event loop)."""
    return await asyncio.get_running_loop().run_in_executor(_CONSUMER_THREAD, function, *args)


def _avro_mandate(request: dict[str, Any]) -> dict[str, Any]:
    """The JSON form of a mandate request as the Avro writer takes it (decimals and instants typed)."""
    record = dict(request)
    record["max_individual_amount"] = Decimal(request["max_individual_amount"])
    record["periodic_limits"] = [{**p, "amount": Decimal(p["amount"])} for p in request["periodic_limits"]]
    for key in ("valid_from", "valid_to", "requested_at"):
        record[key] = datetime.fromisoformat(request[key])
    return record


def _statuses(store: Store, mandate_id: str) -> list[str]:
    events = store.run(lambda tx: tx.outbox.events(VRP_STATUS_TOPIC, mandate_id), write=False)
    return [e.payload["status"] for e in events]


async def test_vrp_requests_are_stored_without_a_bank_call(store: Store, unserved_port: int) -> None:
    engine = build_engine(_config(unserved_port), store)
    vrp = attach_vrp(engine)
    woken: list[int] = []
    intake = VrpIntake(vrp, wake=lambda: woken.append(1))
    try:
        now = datetime.now(UTC)
        request = mandate_request(now=now)
        mandate_id = request["mandate_id"]
        assert await _in_consumer_thread(intake.mandate, request) == Accept()
        mandate = store.run(lambda tx: tx.mandates.require(mandate_id), write=False)
        assert mandate.state == "RECEIVED" and mandate.consent_id is None and mandate.next_action_at is not None
        assert await _in_consumer_thread(intake.mandate, request) == Accept("duplicate")
        assert woken == [1]

        # A payment while the mandate awaits authorization is parked, not refused.
        verdict = await _in_consumer_thread(intake.payment, payment_request(mandate_id, "100.00"))
        assert isinstance(verdict, Accept) and verdict.outcome == "received"

        # An invalid request with a readable id: INVALID stored and published, and dead-lettered.
        bad = mandate_request(now=now, max_individual_amount="-5")
        rejected = await _in_consumer_thread(intake.mandate, bad)
        assert isinstance(rejected, Reject) and rejected.batch_id == bad["mandate_id"]
        assert "max_individual_amount" in rejected.reason
        assert _statuses(store, bad["mandate_id"]) == ["INVALID"]
        # The same id corrected (a replay once the cause is fixed): still INVALID, and the reason says why, not
        # the problem that no longer holds.
        fixed = await _in_consumer_thread(intake.mandate, {**bad, "max_individual_amount": "5.00"})
        assert isinstance(fixed, Reject)
        assert fixed.reason.startswith(f"invalid: mandate {bad['mandate_id']} was already refused as INVALID (")
        assert _statuses(store, bad["mandate_id"]) == ["INVALID"]

        # Without a readable id there is nothing to store: dead letter only.
        nameless = await _in_consumer_thread(intake.mandate, {"integration": "sandbox"})
        assert isinstance(nameless, Reject) and nameless.batch_id is None

        # A payment for a mandate never received: refused (INVALID event) and dead-lettered.
        orphan = await _in_consumer_thread(intake.payment, payment_request("m-never-seen", "10.00"))
        assert isinstance(orphan, Reject) and "unknown" in orphan.reason
        assert _statuses(store, "m-never-seen") == ["INVALID"]
    finally:
        await _in_consumer_thread(intake.close)
        await engine.aclose()


async def test_vrp_handlers_decode_avro_and_dead_letter_what_they_cannot_read(store: Store, unserved_port: int) -> None:
    engine = build_engine(_config(unserved_port), store)
    intake = VrpIntake(attach_vrp(engine))
    settings = KafkaSettings(bootstrap="unused:9092", topics={"vrp.mandates": "t.mandates"})
    handlers = vrp_handlers(settings, intake)
    try:
        assert sorted(handlers) == ["t.mandates", "vrp.payments"]
        request = mandate_request(now=datetime.now(UTC))
        encoded = schemas.encode("vrp.mandates", _avro_mandate(request))
        assert await _in_consumer_thread(handlers["t.mandates"], _Message("t.mandates", encoded)) == Accept()  # type: ignore[arg-type]
        stored = store.run(lambda tx: tx.mandates.get(request["mandate_id"]), write=False)
        assert stored is not None and stored.state == "RECEIVED"

        garbage = await _in_consumer_thread(handlers["t.mandates"], _Message("t.mandates", b"not avro"))  # type: ignore[arg-type]
        assert isinstance(garbage, Reject) and garbage.reason.startswith("undecodable")
        tombstone = await _in_consumer_thread(handlers["vrp.payments"], _Message("vrp.payments", None))  # type: ignore[arg-type]
        assert isinstance(tombstone, Reject) and tombstone.reason.startswith("tombstone")
    finally:
        await _in_consumer_thread(intake.close)
        await engine.aclose()


def _sample(metrics: str, name: str, **labels: str) -> float | None:
    label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    wanted = f"{name}{{{label_text}}}" if labels else name
    for line in metrics.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_health_and_metrics_report_the_store(store: Store, unserved_port: int) -> None:
    config = _config(unserved_port)
    processor = Processor(config, None, store, role="api", instance="t-1")
    document: dict[str, Any] = {
        "batch_id": "B-metrics",
        "integration": "sandbox",
        "file_reference": "F",
        "origin_account": {"account_number": "100200300", "account_type": "MONETARY", "currency": "GTQ"},
        "transactions": [
            {
                "destination_account": {
                    "account_number": "200100300",
                    "account_type": "SAVINGS",
                    "currency": "GTQ",
                    "email": "a@example.com",
                },
                "amount": "10.00",
                "concept": "Salary",
            }
        ],
        "requested_at": "2026-11-22T09:00:00.000Z",
        "source": "test",
    }
    await accept_batch(store, document, now=datetime.now(UTC), integrations=config.integrations)
    await accept_batch(store, {**document, "batch_id": "B-bad", "transactions": []}, now=datetime.now(UTC))
    transport = httpx.ASGITransport(app=processor.http_app())
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://processor") as http:
            health = await http.get("/healthz")
            assert health.status_code == 200
            assert health.json() == {"status": "ok", "instance": "t-1", "role": "api", "store": "ok"}
            metrics = (await http.get("/metrics")).text
        assert _sample(metrics, "dispersion_batches", state="RECEIVED") == 1.0
        assert _sample(metrics, "dispersion_batches", state="INVALID") == 1.0
        assert _sample(metrics, "dispersion_outbox_backlog") == 1.0  # the INVALID event, not yet relayed
        assert "dispersion_bank_call_seconds" in metrics  # declared, whether or not a call was made yet

        processor.stop()  # shutting down: unhealthy, so a load balancer stops sending redirects here
        async with httpx.AsyncClient(transport=transport, base_url="http://processor") as http:
            assert (await http.get("/healthz")).status_code == 503
    finally:
        await processor.engine.aclose()
