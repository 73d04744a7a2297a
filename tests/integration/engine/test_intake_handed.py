"""A batch document handed over to the intake (`Handed`, as the Kafka consumer hands each decoded record) is let
go of once a new batch is checked, before the transaction that stores it, so a 100,000-transfer record (about
90 MiB of dicts) is not held through its INSERT; a known batch's document is kept for the verdict that needs it.
On the real store (SQLite and PostgreSQL)."""

from __future__ import annotations

import copy
import json
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Message
from engine_support import batch
from kafka_layer_support import batch_record

from consumers.batches import BatchHandler, EngineIntake
from consumers.loop import Accept, Reject, Retry
from processor.domain.batch import batch_from_dict, batch_from_json, loads_exact
from processor.domain.file_states import FlowState
from processor.domain.identity import content_sha256, document_content_sha256
from processor.engine import intake
from processor.engine.intake import Handed, accept_batch
from processor.kafka.wire import WireCodec
from processor.store import Store
from schemas.topics import BATCHES_TOPIC

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Document(dict[str, Any]):
    """A decoded record that can be watched (a plain dict takes no weak reference)."""


class Watch:
    """A store observer noting, at each write transaction, whether the document is still alive."""

    def __init__(self, document: Document) -> None:
        self.alive = weakref.ref(document)
        self.seen: list[bool] = []

    @contextmanager
    def transaction(self, *, write: bool, dialect: str) -> Iterator[object]:
        if write:
            self.seen.append(self.alive() is not None)
        yield None

    @contextmanager
    def event(self, *, topic: str, key: str, status: str | None) -> Iterator[dict[str, str]]:
        yield {}


async def test_a_new_batch_is_stored_after_its_document_was_let_go_of(store: Store) -> None:
    document = Document(batch("HANDED-1"))
    handed = Handed(document)
    watch = Watch(document)
    del document
    store.observer = watch
    try:
        result = await accept_batch(store, handed, now=NOW)
    finally:
        store.observer = None
    assert result.created and result.flow is not None and result.flow.batch_id == "HANDED-1"
    assert watch.seen == [False]  # the one write: the INSERT, with the document already gone
    with pytest.raises(RuntimeError, match="let go of"):
        _ = handed.document


async def test_a_known_batch_keeps_its_document_for_the_verdict(store: Store) -> None:
    await accept_batch(store, batch("HANDED-2"), now=NOW)
    again = Handed(Document(batch("HANDED-2")))
    result = await accept_batch(store, again, now=NOW)
    assert not result.created and result.same_document
    assert again.document["batch_id"] == "HANDED-2"


async def test_a_decoded_record_is_stored_as_ascii_json_of_the_same_batch(store: Store) -> None:
    """The text of a decoded record is written in ASCII, so the driver sends a copy of its bytes rather than a
    UTF-8 encoding at twice its size; it reads back as the same batch."""
    document = batch("HANDED-3")
    document["transactions"][0]["concept"] = "Nómina de noviembre \u0150"
    expected = batch_from_dict(copy.deepcopy(document))
    handed = Document(document)
    result = await accept_batch(store, Handed(handed), now=NOW)
    assert result.created
    text = store.run(lambda tx: tx.flows.payload("HANDED-3"), write=False)
    assert text is not None and text.isascii() and "N\\u00f3mina de noviembre \\u0150" in text
    assert batch_from_json(text) == expected
    assert handed["transactions"] == []  # let go of a transfer at a time, as it was written


async def test_a_handed_records_batch_is_parsed_from_its_text_after_the_record_is_gone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built from the record, the batch would share the record's strings and amounts and keep its memory."""
    document = Document(batch("HANDED-4"))
    alive = weakref.ref(document)
    seen: list[bool] = []

    def parse(text: str) -> Any:
        seen.append(alive() is not None)
        return batch_from_json(text)

    monkeypatch.setattr(intake, "batch_from_json", parse)
    handed = Handed(document)
    del document
    result = await accept_batch(store, handed, now=NOW)
    assert (
        result.created
        and result.flow is not None
        and result.flow.payload_sha256 == content_sha256(batch_from_dict(batch("HANDED-4")))
    )
    assert seen == [False]


def _unreadable(batch_id: str) -> dict[str, Any]:
    """A batch document that is no readable batch (INVALID), with an amount whose text form differs (100.50)."""
    document = batch(batch_id)
    document["transactions"][0]["amount"] = "a lot"
    document["transactions"][1]["amount"] = Decimal("100.50")
    return document


@pytest.mark.parametrize("first_handed", [True, False], ids=["stored from its text", "stored as a record (before)"])
async def test_an_unreadable_record_submitted_again_is_the_same_batch(store: Store, first_handed: bool) -> None:
    """An INVALID record's hash is of its text's content when handed over (the batch is read from its text); a
    redelivery matches it, and matches one stored before, whose hash was of the record."""
    first = Handed(Document(_unreadable("HANDED-5"))) if first_handed else _unreadable("HANDED-5")
    stored = await accept_batch(store, first, now=NOW)
    assert stored.created and stored.flow is not None and stored.status == FlowState.INVALID
    text = store.run(lambda tx: tx.flows.payload("HANDED-5"), write=False)
    record_form, text_form = (
        document_content_sha256(_unreadable("HANDED-5")),
        document_content_sha256(loads_exact(text)),
    )
    assert record_form != text_form  # 100.50 is "100.5" in the one, "100.50" in the other
    assert stored.flow.payload_sha256 == (text_form if first_handed else record_form)
    again = await accept_batch(store, Handed(Document(_unreadable("HANDED-5"))), now=NOW)
    assert not again.created and again.same_document
    other = _unreadable("HANDED-5")
    other["transactions"][1]["amount"] = Decimal("100.60")
    assert not (await accept_batch(store, Handed(Document(other)), now=NOW)).same_document


class AnotherInstance:
    """A store observer that, just before the first write transaction (the new batch's INSERT), stores the same
    batch id as another member of the consumer group would during a rebalance (`content`: its content hash)."""

    def __init__(self, store: Store, document: dict[str, Any], content: str) -> None:
        self.store, self.content, self.done = store, content, False
        self.batch_id, self.text = document["batch_id"], json.dumps(document, default=str)

    @contextmanager
    def transaction(self, *, write: bool, dialect: str) -> Iterator[object]:
        if write and not self.done:
            self.done = True
            self.store.run(
                lambda tx: tx.flows.create(self.batch_id, "sandbox", self.text, now=NOW, content_sha256=self.content)
            )
        yield None

    @contextmanager
    def event(self, *, topic: str, key: str, status: str | None) -> Iterator[dict[str, str]]:
        yield {}


@pytest.mark.parametrize("same", [True, False], ids=["same batch", "another document"])
def test_a_batch_another_instance_stored_meanwhile_is_a_duplicate_or_read_again(store: Store, same: bool) -> None:
    """The document was let go of as a new batch's; the INSERT then finds the row another instance wrote. The same
    batch needs no document for its verdict (duplicate); another document's conflict does, so the consumer reads
    the message again (Retry), and the second reading, a known batch, gives the conflict."""
    document = batch_record("RACE-1")
    content = content_sha256(batch_from_dict(copy.deepcopy(document))) if same else "another"
    handler = BatchHandler(EngineIntake(store))
    value = WireCodec(BATCHES_TOPIC).encode(document)
    message = Message(topic=BATCHES_TOPIC, partition=0, offset=7, key=b"RACE-1", value=value)
    store.observer = AnotherInstance(store, document, content)
    try:
        first = handler(message)
    finally:
        store.observer = None

    def verdict() -> str | None:
        kept = store.run(lambda tx: tx.lifecycle.verdict(BATCHES_TOPIC, 0, 7), write=False)
        return None if kept is None else kept.verdict

    if same:
        assert isinstance(first, Accept) and first.outcome == "duplicate"
        assert verdict() == "duplicate"  # what `dispersion submit` reads
        return
    assert isinstance(first, Retry) and "stored by another instance meanwhile" in first.reason
    assert verdict() is None  # none yet: the message is read again
    again = handler(message)
    assert isinstance(again, Reject) and again.reason.startswith("conflict: batch_id RACE-1 was already received")
    assert verdict() == "conflict"
