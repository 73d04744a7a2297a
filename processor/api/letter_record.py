"""A dead letter's original record, read back from the DLQ topic and made readable (issue 20 point 5), for the
console's page and the admin API (`dispersion dlq show`).

The value is shown decoded when it decodes with its topic's Avro schema (either wire format), as text when it is
UTF-8 (pretty-printed when it is JSON), else as hex; account numbers are masked in the decoded record and in JSON
text (free text and hex show the bytes as they are). The record's Kafka key is shown too (the batch id its
producer chose, even when the value names none), as text or hex.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import schemas
from processor.domain.masking import masked_record, shown_header
from processor.domain.time import iso_ms
from producers.replay import DeadLetterReplayer, ReplayError
from schemas.topics import ALL_TOPICS

HEX_LIMIT = 64 * 1024  # bytes shown as hex or text; a larger record is cut (its size is said)


@dataclass
class RecordView:
    """The readable forms of one dead letter's record (one of `decoded`, `text`, `hex` is set, or `unreadable`)."""

    size: int = 0
    key: str | None = None
    decoded: str | None = None  # the Avro record as JSON, accounts masked
    text: str | None = None  # UTF-8 bytes that are not a record of the topic's schema
    hex: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    unreadable: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """For the admin API: headers as `[key, value]` pairs."""
        body = asdict(self)
        body["headers"] = [list(pair) for pair in self.headers]
        return body


def logical_topic(physical: str) -> str | None:
    """The project topic a physical topic name is (a deployment may prefix them)."""
    for logical in ALL_TOPICS:
        if physical == logical or physical.endswith(f".{logical}"):
            return logical
    return None


def _json_default(value: object) -> str:
    """Avro's logical types as people read them: instants ISO 8601 UTC with milliseconds, days ISO 8601,
    decimals as written, bytes as hex."""
    if isinstance(value, datetime):
        return iso_ms(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def as_text(value: bytes | None) -> str:
    """Bytes as UTF-8 text, or as hex when they are not UTF-8."""
    if value is None:
        return ""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex()


def _hex(value: bytes) -> str:
    shown = value[:HEX_LIMIT]
    return "\n".join(shown[i : i + 16].hex(" ", -2) for i in range(0, len(shown), 16))


def readable(value: bytes, source_topic: str) -> RecordView:
    """The value decoded, as text or as hex (see the module docstring)."""
    view = RecordView(size=len(value))
    logical = logical_topic(source_topic)
    if logical is not None:
        try:
            decoded = schemas.Codec(logical).decode(value)
        except (schemas.DecodeError, ValueError, KeyError, TypeError):
            decoded = None
        if decoded is not None:
            view.decoded = json.dumps(masked_record(decoded), indent=2, default=_json_default, ensure_ascii=False)
            return view
    try:
        text = value[:HEX_LIMIT].decode("utf-8")
    except UnicodeDecodeError:
        view.hex = _hex(value)
        return view
    try:
        parsed = json.loads(text)
    except ValueError:
        view.text = text
        return view
    view.text = json.dumps(masked_record(parsed), indent=2, ensure_ascii=False) if isinstance(parsed, dict) else text
    return view


def read_record(replayer: DeadLetterReplayer | None, dlq: tuple[str, int, int], source_topic: str) -> RecordView:
    """Read a dead letter's record from the DLQ topic at `dlq` (blocking) and make it readable."""
    if replayer is None:
        return RecordView(unreadable="this instance has no Kafka connection: the original record cannot be read here")
    try:
        record: Mapping[str, Any] = replayer.read(*dlq)
    except ReplayError as exc:
        return RecordView(unreadable=str(exc))
    view = readable(record.get("original_value") or b"", source_topic)
    key = record.get("original_key")
    view.key = None if key is None else as_text(key)
    view.headers = [
        (str(h.get("key")), shown_header(str(h.get("key")), as_text(h.get("value"))))
        for h in record.get("original_headers") or []
    ]
    return view
