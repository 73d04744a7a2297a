"""A batch document handed over to the intake (`Handed`, as the Kafka consumer hands each decoded record) is let
go of once a new batch is checked, before the transaction that stores it, so a 100,000-transfer record (about
90 MiB of dicts) is not held through its INSERT; a known batch's document is kept for the verdict that needs it.
On the real store (SQLite and PostgreSQL)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from engine_support import batch

from processor.domain.batch import batch_from_dict, batch_from_json
from processor.engine.intake import Handed, accept_batch
from processor.store import Store

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
    result = await accept_batch(store, Handed(Document(document)), now=NOW)
    assert result.created
    text = store.run(lambda tx: tx.flows.payload("HANDED-3"), write=False)
    assert text is not None and text.isascii() and "N\\u00f3mina de noviembre \\u0150" in text
    assert batch_from_json(text) == batch_from_dict(batch("HANDED-3") | {"transactions": document["transactions"]})
