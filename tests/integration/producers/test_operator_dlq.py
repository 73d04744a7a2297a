"""Dead letters recorded, listed and replayed (issue 11, point 5) on a real broker, over the real store (SQLite
and PostgreSQL) and the admin API on loopback, with the sandbox bank paying what the replay brings in:

- a batch dead-lettered because of a defect in the intake (the intake raised: a poison message) is recorded where
  the admin API lists it; after the fix its replay re-publishes the original bytes and key with headers naming the
  dead letter, who, when and why; it is paid once; the replay is recorded; a second replay is refused unless
  forced (and the forced one changes nothing: the batch is a duplicate);
- an invalid batch replayed is dead-lettered again, with the chain visible from both ends.

The defect is simulated by a wrapper that makes the real intake raise while `broken` (the loop's collaborator);
the broker, the consumer group, the dead-letter producer, the store and the admin API are real.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from engine_support import batch, bound_socket, engine_rig, serve
from kafka_layer_support import committed, new_topic, produce, read_topic, settings_for
from starlette.applications import Starlette
from starlette.routing import Mount

import schemas
from consumers.batches import BatchHandler, EngineIntake, IntakeOutcome, MessageRef
from consumers.loop import AtLeastOnceConsumer
from processor.api.admin import admin_app
from processor.api.admin_input import token_digest
from processor.devtools.processes import eventually
from processor.domain.file_states import FlowState
from processor.domain.roles import AdminToken, Role
from processor.engine.intake import Handed
from processor.kafka.clients import consumer_config, producer_config
from processor.kafka.settings import KafkaSettings
from processor.store import Store
from producers.dlq import DeadLetterPublisher
from producers.replay import DeadLetterReplayer, store_recorder
from schemas.topics import BATCHES_TOPIC, DLQ_TOPIC

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

TOKEN = "dlq-admin-token-for-tests-0123456789"


def personal(name: str) -> dict[str, AdminToken]:
    """TOKEN as `name`'s personal token with the operator role (the replay is recorded with that name)."""
    return {name: AdminToken(name, token_digest(TOKEN), Role.OPERATOR)}


AUTH = {"Authorization": f"Bearer {TOKEN}"}


class DefectiveIntake:
    """The real intake, raising (a defect this message triggers) while `broken` is set."""

    def __init__(self, intake: EngineIntake) -> None:
        self.intake = intake
        self.broken = threading.Event()

    def __call__(self, document: Handed, *, message: MessageRef | None = None) -> IntakeOutcome:
        if self.broken.is_set():
            raise RuntimeError("intake defect: KeyError 'origin_account' in a code path")
        return self.intake(document, message=message)


@pytest.fixture
def topics(kafka_bootstrap: str) -> dict[str, str]:
    return {
        BATCHES_TOPIC: new_topic(kafka_bootstrap, "batches", partitions=1),
        DLQ_TOPIC: new_topic(kafka_bootstrap, "dlq", partitions=1),
    }


@pytest.fixture
def kafka(kafka_bootstrap: str, topics: dict[str, str]) -> KafkaSettings:
    return settings_for(kafka_bootstrap, topics)


class Running:
    """The consumer loop in a thread, stopped at the end."""

    def __init__(self, consumer: AtLeastOnceConsumer) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: consumer.run(self.stop), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.fixture
def intake(store: Store) -> Iterator[DefectiveIntake]:
    real = EngineIntake(store, integrations={"sandbox"})
    yield DefectiveIntake(real)
    real.close()


@pytest.fixture
def loop(kafka: KafkaSettings, store: Store, intake: DefectiveIntake) -> Iterator[Running]:
    publisher = DeadLetterPublisher(
        producer_config(kafka, "dlq"),
        topic=kafka.topic(DLQ_TOPIC),
        timeout=10.0,
        recorder=store_recorder(store, intake.intake.clock.now),
    )
    consumer = AtLeastOnceConsumer(
        consumer_config(kafka, "batches"),
        [kafka.topic(BATCHES_TOPIC)],
        BatchHandler(intake),
        publisher,
        poison_attempts=2,
        max_backoff=0.2,
    )
    running = Running(consumer)
    yield running
    running.close()
    publisher.close()


def wait_for(condition: Any, what: str, timeout: float = 60) -> Any:
    return eventually(condition, what=what, timeout=timeout, interval=0.2)


def avro_batch(**options: Any) -> dict[str, Any]:
    """The engine tests' batch in the Avro form (`requested_at` an aware datetime)."""
    document = batch(**options)
    document["requested_at"] = datetime.fromisoformat(document["requested_at"])
    return document


def letters(store: Store) -> list[Any]:
    return store.run(lambda tx: tx.operator.dead_letters(), write=False)


async def test_a_dead_letter_replayed_after_the_fix_is_paid_once_and_recorded(
    store: Store, kafka: KafkaSettings, topics: dict[str, str], intake: DefectiveIntake, loop: Running
) -> None:
    async with engine_rig(store) as rig:
        sock, port = bound_socket()
        app = admin_app(store, tokens=personal("ana"), replayer=DeadLetterReplayer(kafka), clock=rig.clock)
        base = f"http://127.0.0.1:{port}/admin"
        async with serve(Starlette(routes=[Mount("/admin", app=app)]), sock), httpx.AsyncClient(timeout=60) as http:
            intake.broken.set()
            document = avro_batch()
            batch_id = str(document["batch_id"])
            value = schemas.encode(BATCHES_TOPIC, document)
            producer_headers = [("source", b"erp-x")]
            produce(kafka.bootstrap, topics[BATCHES_TOPIC], [(batch_id.encode(), value, producer_headers)])
            (letter,) = wait_for(lambda: letters(store), "the dead letter to be recorded")
            assert letter.batch_id is None and "intake defect" in letter.reason  # the loop read no batch id
            assert store.run(lambda tx: tx.flows.get(batch_id), write=False) is None

            listed = (await http.get(f"{base}/dead-letters", headers=AUTH)).json()["dead_letters"]
            assert [(d["id"], d["topic"], d["offset"]) for d in listed] == [(letter.id, topics[BATCHES_TOPIC], 0)]

            intake.broken.clear()  # the fix is deployed
            body = {"reason": "intake fixed in 1.4.2", "replayed_by": "ana"}
            first = await http.post(f"{base}/dead-letters/{letter.id}/replay", json=body, headers=AUTH)
            assert first.status_code == 200, first.text
            assert first.json()["topic"] == topics[BATCHES_TOPIC]
            flow = wait_for(lambda: store.run(lambda tx: tx.flows.get(batch_id), write=False), "the replayed batch")
            assert flow.state == FlowState.RECEIVED

            replayed = read_topic(kafka.bootstrap, topics[BATCHES_TOPIC], expect=2)
            assert [(m.key, m.value) for m in replayed] == [(batch_id.encode(), value)] * 2  # the same bytes
            headers = dict(replayed[1].headers)
            assert headers["source"] == b"erp-x"  # the original headers are kept
            assert headers["dispersion-replay-of"] == letter.coordinates.encode()
            assert headers["dispersion-replayed-by"] == b"ana"
            assert headers["dispersion-replay-reason"] == b"intake fixed in 1.4.2"
            assert headers["dispersion-replayed-at"].endswith(b"Z")

            again = await http.post(f"{base}/dead-letters/{letter.id}/replay", json=body, headers=AUTH)
            assert again.status_code == 409 and "already replayed" in again.json()["error"]
            forced = await http.post(
                f"{base}/dead-letters/{letter.id}/replay", json={**body, "force": True}, headers=AUTH
            )
            assert forced.status_code == 200, forced.text
            shown = (await http.get(f"{base}/dead-letters/{letter.id}", headers=AUTH)).json()
            assert [(r["replayed_by"], r["reason"]) for r in shown["replays"]] == [("ana", body["reason"])] * 2
            assert all(r["offset"] is not None for r in shown["replays"])
            trail = await http.get(f"{base}/audit", params={"since": "2026-01-01T00:00:00Z"}, headers=AUTH)
            entries = [(e["actor"], e["role"], e["action"], e["subject"]) for e in trail.json()["entries"]]
            assert entries == [("ana", "operator", "replay", str(letter.id))] * 2  # the token's name, its role

            await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
            approval = await rig.approve(rig.approval_url(batch_id))
            assert approval.callback is not None and approval.callback.status_code == 200
            assert (await rig.to_state(batch_id, FlowState.COMPLETED)).state == FlowState.COMPLETED
            topic = topics[BATCHES_TOPIC]
            wait_for(  # the forced replay was consumed as well
                lambda: committed(kafka.bootstrap, kafka.group_id, topic, partitions=1).get(0, 0) >= 3, "3 consumed"
            )
            assert rig.count("file_payment") == 1  # paid once, whatever was replayed
            assert len(letters(store)) == 1  # the duplicate is no dead letter


async def test_an_invalid_batch_replayed_is_dead_lettered_again_with_the_chain(
    store: Store, kafka: KafkaSettings, topics: dict[str, str], loop: Running
) -> None:
    document = avro_batch(transfers=[("200100300", "-5.00")])
    batch_id = str(document["batch_id"])
    produce(kafka.bootstrap, topics[BATCHES_TOPIC], [(batch_id.encode(), schemas.encode(BATCHES_TOPIC, document), [])])
    (first,) = wait_for(lambda: letters(store), "the first dead letter")
    assert first.reason.startswith("invalid: ") and first.replay_of is None

    sock, port = bound_socket()
    app = admin_app(store, tokens=personal("bruno"), replayer=DeadLetterReplayer(kafka))
    base = f"http://127.0.0.1:{port}/admin"
    async with serve(Starlette(routes=[Mount("/admin", app=app)]), sock), httpx.AsyncClient(timeout=60) as http:
        body = {"reason": "integration configured now", "replayed_by": "bruno"}
        assert (await http.post(f"{base}/dead-letters/{first.id}/replay", json=body, headers=AUTH)).status_code == 200
        second = wait_for(lambda: letters(store)[1:], "the second dead letter")[0]
        assert second.replay_of == first.coordinates
        assert second.batch_id == batch_id
        shown = (await http.get(f"{base}/dead-letters/{first.id}", headers=AUTH)).json()
        assert shown["dead_lettered_again_as"] == [second.id]
        listed = (await http.get(f"{base}/dead-letters", params={"batch_id": batch_id}, headers=AUTH)).json()
        assert [d["replay_of"] for d in listed["dead_letters"]] == [None, first.coordinates]
