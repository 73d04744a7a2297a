"""The Dead letters pages' data: the recorded dead letters (store), one dead letter's original record read back from
the DLQ topic and shown decoded, as text or as hex with its key (`processor.api.letter_record`), and its replays.
Dead letters of every input topic are listed together; those of `vrp.mandates` and `vrp.payments` say so (`kind`)
and name their mandate (recorded in the letter's `batch_id` column), whose page they link to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from processor.api.letter_record import logical_topic, read_record
from processor.domain.time import iso_ms
from processor.store import StoreTx
from processor.store.operator import DeadLetterRow, ReplayRow
from producers.replay import DeadLetterReplayer
from schemas.topics import VRP_MANDATES_TOPIC, VRP_PAYMENTS_TOPIC


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
    return KINDS.get(logical_topic(source_topic) or "", "batch")


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
    text: str | None = None
    hex: str | None = None
    key: str | None = None
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


def fill_record(page: LetterPage, replayer: DeadLetterReplayer | None) -> None:
    """Read the dead letter's record back from Kafka and fill its readable forms (blocking)."""
    letter = page.letter
    view = read_record(replayer, (letter.dlq_topic, letter.dlq_partition, letter.dlq_offset), letter.source_topic)
    page.size, page.key, page.decoded, page.text, page.hex = view.size, view.key, view.decoded, view.text, view.hex
    page.headers, page.unreadable = view.headers, view.unreadable
