"""The Dead letters pages' data: the recorded dead letters (store), one dead letter's original record read back from
the DLQ topic and shown decoded when it decodes (account numbers masked), else its bytes as hex, and its replays.
Dead letters of every input topic are listed together; those of `vrp.mandates` and `vrp.payments` say so (`kind`)
and name their mandate (recorded in the letter's `batch_id` column), whose page they link to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import schemas
from processor.domain.masking import masked_record, shown_header
from processor.domain.time import iso_ms
from processor.store import StoreTx
from processor.store.operator import DeadLetterRow, ReplayRow
from producers.replay import DeadLetterReplayer, ReplayError
from schemas.topics import ALL_TOPICS, VRP_MANDATES_TOPIC, VRP_PAYMENTS_TOPIC

HEX_LIMIT = 64 * 1024  # bytes shown as hex; a larger record is cut (its size is said)


@dataclass(frozen=True)
class LetterRow:
    """A dead letter as the list shows it."""

    id: int
    reason: str
    dlq: str
    source: str
    batch_id: str | None
    at: str
    replayed: int
    kind: str = "batch"

    @property
    def vrp(self) -> bool:
        """A dead letter of flow B (its `batch_id` is the mandate id)."""
        return self.kind != "batch"


# What a dead letter read from each input topic is (the list's Kind column).
KINDS = {VRP_MANDATES_TOPIC: "VRP mandate", VRP_PAYMENTS_TOPIC: "VRP payment"}


def letter_kind(source_topic: str) -> str:
    """`batch`, `VRP mandate` or `VRP payment`, by the (physical) topic the record was read from."""
    return KINDS.get(_logical_topic(source_topic) or "", "batch")


def letters_page(tx: StoreTx, *, after_id: int, limit: int) -> list[LetterRow]:
    """Recorded dead letters after `after_id`, oldest first, with how often each was replayed."""
    rows = tx.operator.dead_letters(after_id=after_id, limit=limit)
    return [
        LetterRow(
            row.id,
            row.reason,
            row.coordinates,
            f"{row.source_topic}/{row.source_partition}/{row.source_offset}",
            row.batch_id,
            iso_ms(row.created_at),
            len(tx.operator.replays(row.id)),
            letter_kind(row.source_topic),
        )
        for row in rows
    ]


@dataclass
class LetterPage:
    """One dead letter: where it sits, why, its record and its replays."""

    letter: DeadLetterRow
    replays: list[ReplayRow]
    again: list[DeadLetterRow]
    decoded: str | None = None
    hex: str | None = None
    size: int = 0
    headers: list[tuple[str, str]] = field(default_factory=list)
    unreadable: str | None = None

    @property
    def kind(self) -> str:
        """`batch`, `VRP mandate` or `VRP payment`."""
        return letter_kind(self.letter.source_topic)


def letter_page(tx: StoreTx, letter_id: int) -> LetterPage | None:
    """The stored part of a dead letter's page; None when unknown."""
    row = tx.operator.dead_letter(letter_id)
    if row is None:
        return None
    return LetterPage(row, tx.operator.replays(letter_id), tx.operator.dead_letters_replaying(row.coordinates))


def _logical_topic(physical: str) -> str | None:
    for logical in ALL_TOPICS:
        if physical == logical or physical.endswith(f".{logical}"):
            return logical
    return None


def _json_default(value: object) -> str:
    return str(value)


def _text(value: bytes | None) -> str:
    if value is None:
        return ""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex()


def fill_record(page: LetterPage, replayer: DeadLetterReplayer | None) -> None:
    """Read the dead letter's record back from Kafka and fill the decoded view or the hex (blocking)."""
    if replayer is None:
        page.unreadable = "this instance has no Kafka connection: the original record cannot be read here"
        return
    letter = page.letter
    try:
        record: Mapping[str, Any] = replayer.read(letter.dlq_topic, letter.dlq_partition, letter.dlq_offset)
    except ReplayError as exc:
        page.unreadable = str(exc)
        return
    value = record.get("original_value") or b""
    page.size = len(value)
    page.headers = [
        (str(h.get("key")), shown_header(str(h.get("key")), _text(h.get("value"))))
        for h in record.get("original_headers") or []
    ]
    logical = _logical_topic(letter.source_topic)
    if logical is not None:
        try:
            decoded = schemas.Codec(logical).decode(value)
        except (schemas.DecodeError, ValueError, KeyError, TypeError):
            decoded = None
        if decoded is not None:
            page.decoded = json.dumps(masked_record(decoded), indent=2, default=_json_default, ensure_ascii=False)
            return
    shown = value[:HEX_LIMIT]
    page.hex = "\n".join(shown[i : i + 16].hex(" ", -2) for i in range(0, len(shown), 16))
