"""The metrics hold what really happened, not just their names: real work is done, then `/metrics` of a processor
instance is scraped and parsed (prometheus_client's own parser) and its samples compared.

- bank calls (`processor.bank.metrics`, process-global, so compared before/after): a batch paid through the engine
  against the sandbox bank counts one `dispersion_bank_call_seconds` observation per HTTP exchange, under the
  operation and status class of each (as many as the requests the bank received); a flow without faults adds
  no `dispersion_bank_call_errors_total`; a 503 and a dropped connection injected by the sandbox count against
  the operation that met them, with the error class, and the 5xx / transport outcome in the histogram;
- the store's gauges (`processor.api.metrics.StoreCollector`, read at scrape time): batches by state and the outbox
  backlog follow the store, going down as events are marked published;
- consumer lag (`consumers.loop._record_lag`, fed by librdkafka's statistics; read from the default registry that
  `/metrics` exposes): a consumer stuck behind the end of a real topic reports how many messages it is behind,
  and 0 once it caught up.
"""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from confluent_kafka import Message
from engine_support import Rig, engine_rig, pay
from kafka_layer_support import committed, new_topic, poll_until, produce, settings_for
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from consumers.loop import Accept, AtLeastOnceConsumer, Retry, Verdict
from processor.cli.service import Processor
from processor.kafka.clients import consumer_config
from processor.store import Store
from schemas.topics import BATCHES_TOPIC, TRANSFERS_TOPIC

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

A1 = "A1 create file-payment-consent"
A2 = "A2 upload file"
A3 = "A3 create file-payment"
TOKEN = "E3 token client_credentials"


async def scrape(app: Starlette) -> Samples:
    """Every sample of an instance's `/metrics` (`Processor.http_app()`), parsed."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://processor") as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def changed(before: Samples, after: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The series of `name` whose value changed, with the change."""
    keys = {labels for sample, labels in (*before, *after) if sample == name}
    moved = {labels: after.get((name, labels), 0.0) - before.get((name, labels), 0.0) for labels in keys}
    return {labels: change for labels, change in moved.items() if change}


def requests_received(rig: Rig, path_suffix: str) -> int:
    return len(rig.sent.to(path_suffix, "POST"))


async def test_bank_calls_and_store_gauges_follow_a_paid_batch(store: Store) -> None:
    async with engine_rig(store) as rig:
        processor = Processor(rig.config, None, store, role="api", instance="metrics-1")
        app = processor.http_app()  # one app for every scrape, as one running instance
        try:
            before = await scrape(app)
            batch_id = await pay(rig)
            after = await scrape(app)

            # One histogram observation per exchange, under its operation and 2xx; no error counted.
            calls = changed(before, after, "dispersion_bank_call_seconds_count")
            assert delta(before, after, "dispersion_bank_call_seconds_count", operation=A1, outcome="2xx") == 1
            assert delta(before, after, "dispersion_bank_call_seconds_count", operation=A2, outcome="2xx") == 1
            assert delta(before, after, "dispersion_bank_call_seconds_count", operation=A3, outcome="2xx") == 1
            assert delta(before, after, "dispersion_bank_call_seconds_count", operation=TOKEN, outcome="2xx") >= 1
            assert {dict(labels)["outcome"] for labels in calls} == {"2xx"}, calls
            assert sum(calls.values()) == len(rig.sent.sent), calls  # every request the bank received, once
            assert delta(before, after, "dispersion_bank_call_seconds_sum", operation=A1, outcome="2xx") > 0
            assert changed(before, after, "dispersion_bank_call_errors_total") == {}

            # The store's gauges: the batch COMPLETED, its four status events and one dispersion.transfers event
            # per transfer outcome (three transfers) waiting for the relay.
            statuses = rig.statuses(batch_id)
            transfers = store.run(lambda tx: tx.outbox.events(TRANSFERS_TOPIC, batch_id), write=False)
            assert len(statuses) == 4 and len(transfers) == 3
            assert value(after, "dispersion_batches", state="COMPLETED") == 1
            assert value(after, "dispersion_batches", state="RECEIVED") == 0
            assert value(after, "dispersion_outbox_backlog") == 7

            events = rig.events(batch_id)
            now = datetime.now(UTC)
            store.run(lambda tx: tx.outbox.mark_published([e.id for e in events[:3]], now=now))
            assert value(await scrape(app), "dispersion_outbox_backlog") == 4
            store.run(lambda tx: tx.outbox.mark_published([events[3].id, *(e.id for e in transfers)], now=now))
            assert value(await scrape(app), "dispersion_outbox_backlog") == 0
        finally:
            await processor.engine.aclose()


async def test_bank_errors_count_against_the_operation_that_met_them(store: Store) -> None:
    async with engine_rig(store) as rig:
        processor = Processor(rig.config, None, store, role="api", instance="metrics-2")
        app = processor.http_app()  # one app for every scrape, as one running instance
        try:
            rig.faults(
                [
                    {"operation": "file-payment-consents.create", "fault": "error", "status": 503, "times": 1},
                    {"operation": "file-payments.create", "fault": "drop", "times": 1},
                ]
            )
            before = await scrape(app)
            await pay(rig)
            after = await scrape(app)
            assert sum(rule.fired for rule in rig.bank.faults.rules) == 2

            # A1: a 503 (counted as ServerError), then the retry's 2xx.
            assert requests_received(rig, "/file-payment-consents") == 2
            assert delta(before, after, "dispersion_bank_call_errors_total", operation=A1, error="ServerError") == 1
            assert delta(before, after, "dispersion_bank_call_seconds_count", operation=A1, outcome="5xx") == 1
            assert delta(before, after, "dispersion_bank_call_seconds_count", operation=A1, outcome="2xx") == 1
            # A3: the connection dropped (no HTTP status: a transport outcome), then the retry's 2xx.
            assert requests_received(rig, "/file-payments") == 2
            assert (
                delta(before, after, "dispersion_bank_call_errors_total", operation=A3, error="ConnectionDropped") == 1
            )
            assert delta(before, after, "dispersion_bank_call_seconds_count", operation=A3, outcome="transport") == 1
            assert delta(before, after, "dispersion_bank_call_seconds_count", operation=A3, outcome="2xx") == 1
            # Nothing else failed.
            errors = changed(before, after, "dispersion_bank_call_errors_total")
            assert errors == {
                frozenset({"operation": A1, "error": "ServerError"}.items()): 1,
                frozenset({"operation": A3, "error": "ConnectionDropped"}.items()): 1,
            }
        finally:
            await processor.engine.aclose()


def lag(topic: str) -> float | None:
    return REGISTRY.get_sample_value("dispersion_consumer_lag", {"topic": topic, "partition": "0"})


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_consumer_lag_reports_the_messages_behind(kafka_bootstrap: str) -> None:
    topic = new_topic(kafka_bootstrap, "lag", partitions=1)
    settings = settings_for(kafka_bootstrap, {BATCHES_TOPIC: topic})
    produce(kafka_bootstrap, topic, [(f"k-{i}".encode(), f"v-{i}".encode(), None) for i in range(5)])
    store_up = {"up": False}

    def handler(message: Message) -> Verdict:
        # The first message goes through; then the store is "down" until the test brings it back.
        if message.offset() == 0 or store_up["up"]:
            return Accept()
        return Retry("database is down")

    class NoDeadLetters:
        def publish(self, message: object, reason: str, *, batch_id: str | None = None) -> None:
            raise AssertionError(f"nothing is dead-lettered here: {reason}")

    config = consumer_config(settings, "lag", **{"statistics.interval.ms": 100})
    consumer = AtLeastOnceConsumer(config, [topic], handler, NoDeadLetters(), max_backoff=0.1)
    try:
        assert lag(topic) is None  # a new topic: no sample until statistics arrived
        poll_until(
            consumer,
            lambda: lag(topic) == 4,
            "a lag of 4 (1 of 5 committed)",
            values=lambda: lag(topic),
            timeout=30,
            poll=0.1,
        )
        assert consumer.handled == 1
        assert committed(kafka_bootstrap, settings.group_id, topic, partitions=1) == {0: 1}

        store_up["up"] = True
        poll_until(
            consumer,
            lambda: consumer.handled == 5 and lag(topic) == 0,
            "a lag of 0",
            values=lambda: lag(topic),
            timeout=30,
            poll=0.1,
        )
    finally:
        consumer.close()
    assert committed(kafka_bootstrap, settings.group_id, topic, partitions=1) == {0: 5}
    assert lag(topic) is None  # leaving the group revoked the partition: no stale series stays behind
