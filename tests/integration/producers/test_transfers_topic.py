"""`dispersion.transfers` (issue 21 point 4) through the real outbox and relay to a real broker, in both wire
formats (Avro single-object, and the Confluent framing with a real schema registry): a batch that ends COMPLETED
with the bank's results appends, in the transaction of its state change, one event per settled or rejected
transfer (none for one still pending); the relay publishes them keyed by batch id with CloudEvents binary-mode
headers, and the CloudEvents SDK reads each message as it is. Ending the same outcome again is refused with the
state change (the outbox is one transaction), and the event ids are the deterministic ones."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from cloudevents.core.bindings.kafka import KafkaMessage, from_binary
from cloudevents.core.formats.json import JSONFormat
from kafka_layer_support import new_topic, read_topic, settings_for
from registry_fixtures import register_subjects

from processor.domain.file_states import FlowState
from processor.engine.transfer_events import end_flow, transfer_event_id
from processor.kafka.clients import producer_config
from processor.kafka.wire import Registry, WireCodec, WireSettings
from processor.store import StatusEvent, Store
from processor.store.outbox import StatusConflictError
from producers.relay import OutboxRelay
from schemas import CONFLUENT
from schemas.topics import STATUS_TOPIC, TRANSFERS_TOPIC

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

NOW = datetime(2026, 11, 26, 10, 0, 0, 123000, tzinfo=UTC)
BATCH = {
    "batch_id": "F110-7/PAY-A",
    "integration": "sandbox",
    "file_reference": "PAY-A",
    "origin_account": {"account_number": "100200300", "account_type": "MONETARY", "currency": "GTQ"},
    "transactions": [
        {
            "destination_account": {
                "account_number": acct,
                "account_type": "SAVINGS",
                "currency": "GTQ",
                "email": "a@b.c",
            },
            "amount": amount,
            "concept": "Payroll",
            "employee_reference": f"E2E-{i}",
        }
        for i, (acct, amount) in enumerate([("200100301", "1500.50"), ("200109902", "750.25"), ("200100303", "9.99")])
    ],
    "requested_at": "2026-11-26T09:00:00.000Z",
    "source": "dispersion-submit pain.001.001.09",
}
RESULTS = [
    {"index": 0, "employee_reference": "E2E-0", "amount": "1500.50", "status": "COMPLETED", "reason": None},
    {"index": 1, "employee_reference": "E2E-1", "amount": "750.25", "status": "FAILED", "reason": "AC04 closed"},
    {"index": 2, "employee_reference": "E2E-2", "amount": "9.99", "status": "PENDING", "reason": None},
]


@pytest.fixture(params=["single-object", "confluent"])
def wire(request: pytest.FixtureRequest) -> WireSettings:
    if request.param == "single-object":
        return WireSettings()
    return WireSettings(CONFLUENT, Registry(request.getfixturevalue("schema_registry_url")))


def test_one_event_per_transfer_outcome_read_by_the_cloudevents_sdk(
    kafka_bootstrap: str, sqlite_store: Store, wire: WireSettings
) -> None:
    topics = {
        TRANSFERS_TOPIC: new_topic(kafka_bootstrap, "transfers", 1),
        STATUS_TOPIC: new_topic(kafka_bootstrap, "st", 1),
    }
    settings = settings_for(kafka_bootstrap, topics, wire)
    if wire.wire_format == CONFLUENT:
        register_subjects(settings)
    ended = StatusEvent(
        "COMPLETED",
        {"batch_id": BATCH["batch_id"], "occurred_at": "2026-11-26T10:00:00.123Z", "transaction_results": RESULTS},
        STATUS_TOPIC,
    )
    with sqlite_store.transaction() as tx:
        flow = tx.flows.create(str(BATCH["batch_id"]), "sandbox", json.dumps(BATCH), now=NOW).row
        end_flow(tx, flow, FlowState.COMPLETED, now=NOW, event=ended)
    with sqlite_store.transaction() as tx:
        again = tx.flows.get(str(BATCH["batch_id"]))
    assert again is not None
    with pytest.raises(StatusConflictError):  # the same outcome again: refused with its state change
        sqlite_store.run(lambda tx: end_flow(tx, again, FlowState.COMPLETED, now=NOW, event=ended))
    relay = OutboxRelay(sqlite_store, producer_config(settings, "relay"), topic_name=settings.topic, wire=wire)
    try:
        assert relay.drain(30)
    finally:
        relay.close()

    messages = read_topic(kafka_bootstrap, topics[TRANSFERS_TOPIC], expect=2)
    assert len(messages) == 2  # index 2 is still pending at the bank: no outcome yet
    codec = WireCodec(TRANSFERS_TOPIC, wire)
    records = [codec.decode(m.value or b"", topics[TRANSFERS_TOPIC]) for m in messages]
    assert [(r["index"], r["outcome"], r["reason_code"]) for r in records] == [
        (0, "COMPLETED", None),
        (1, "FAILED", "AC04"),
    ]
    assert records[1]["amount"] == Decimal("750.25") and records[1]["end_to_end_id"] == "E2E-1"
    for message, record in zip(messages, records, strict=True):
        assert message.key == b"F110-7/PAY-A"
        headers = {name: value for name, value in message.headers if value is not None}
        cloud = from_binary(KafkaMessage(headers=headers, key=message.key, value=message.value or b""), JSONFormat())
        assert (
            cloud.get_id()
            == record["event_id"]
            == transfer_event_id("F110-7/PAY-A", record["index"], record["outcome"])
        )
        assert cloud.get_subject() == f"F110-7/PAY-A/{record['index']}"
        assert cloud.get_time() == NOW
        assert cloud.get_datacontenttype() == "application/avro"
        data = cloud.get_data()
        assert isinstance(data, bytes) and codec.decode(data, topics[TRANSFERS_TOPIC]) == record
