"""The dispersion events as bytes: Avro single-object encoding, and how to tell it from the Confluent wire format.
Pure: no I/O beyond reading the schema files next to this module. fastavro parses the schemas and reads; a record
is written by the schema version's compiled writer (`schemas.avro_binary`, fastavro's bytes exactly), and by
fastavro when that writer does not take it as it is (fastavro then coerces it or says why it does not fit).

Single-object encoding (Avro specification): the two marker bytes `C3 01`, the 8-byte
little-endian CRC-64-AVRO (Rabin) fingerprint of the writer schema's Parsing Canonical Form, then the Avro
binary body. No schema registry is needed: a reader recognises the writer's schema version by its fingerprint
and resolves it to the version it reads with (by default the newest), so data written with an older version
stays readable.

Schemas live next to this file as `<topic with dots as underscores>.v<N>.avsc`; every version ever released
stays, so old data can be decoded.

Confluent wire format (`[kafka] wire_format = "confluent"`): a zero byte, the registry's 4-byte schema id, then the
Avro binary body. It needs a schema registry (HTTP), so its codec (`WireCodec`) and the registry client live in
the Kafka package, `processor.kafka.wire`; `wire_format_of` here tells the two formats apart by the first byte
(`00` Confluent, `C3 01` single-object).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Final

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint as _fingerprint_hex
from fastavro.schema import to_parsing_canonical_form

from schemas.avro_binary import Writer, compile_writer
from schemas.topics import ALL_TOPICS

MAGIC = b"\xc3\x01"
"""The two bytes that open every single-object encoded message."""
HEADER_SIZE = len(MAGIC) + 8
CONFLUENT_MAGIC = b"\x00"
"""The byte that opens every Confluent-framed message (followed by the 4-byte schema id)."""
SINGLE_OBJECT: Final = "single-object"
CONFLUENT: Final = "confluent"
WIRE_FORMATS: Final = (SINGLE_OBJECT, CONFLUENT)
SCHEMA_DIR = Path(__file__).resolve().parent

TOPICS: dict[str, str] = {topic: topic.replace(".", "_") for topic in ALL_TOPICS}
"""Topic name -> file stem of its schemas (`payroll.batches` -> `payroll_batches.v1.avsc`, ...)."""

_FILE_NAME = re.compile(r"^(?P<stem>[a-z0-9_]+)\.v(?P<version>[1-9][0-9]*)\.avsc$")


class SchemaError(Exception):
    """Base class of this module's errors."""


class UnknownTopicError(SchemaError, KeyError):
    """The topic has no schema here."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown topic"


class EncodeError(SchemaError, ValueError):
    """A record does not fit its topic's schema."""


class DecodeError(SchemaError, ValueError):
    """The bytes are not a single-object encoded record of the expected topic."""


class UnknownSchemaError(DecodeError):
    """The bytes carry a fingerprint that matches no known version of the topic's schema."""


@dataclass(frozen=True)
class SchemaVersion:
    """One released version of one topic's schema."""

    topic: str
    version: int
    path: Path
    schema: Any = field(repr=False)  # parsed by fastavro, ready for its reader and writer
    fingerprint: bytes = field(repr=False)  # 8 bytes, as they appear on the wire

    @property
    def header(self) -> bytes:
        """The 10 bytes that open every message written with this version."""
        return MAGIC + self.fingerprint

    @property
    def fingerprint_hex(self) -> str:
        """The fingerprint as hex, in wire order."""
        return self.fingerprint.hex()


def fingerprint(schema: Any) -> bytes:
    """CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form, 8 bytes little-endian (wire order)."""
    return bytes.fromhex(_fingerprint_hex(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def _load(path: Path, topic: str, version: int) -> SchemaVersion:
    raw = json.loads(path.read_text(encoding="utf-8"))
    parsed = parse_schema(raw, named_schemas={})
    return SchemaVersion(
        topic=topic,
        version=version,
        path=path,
        schema=parsed,
        fingerprint=fingerprint(raw),
    )


@cache
def versions(topic: str) -> tuple[SchemaVersion, ...]:
    """Every released version of a topic's schema, oldest first."""
    stem = TOPICS.get(topic)
    if stem is None:
        raise UnknownTopicError(f"no schema for topic {topic!r}; known topics: {', '.join(TOPICS)}")
    found: list[SchemaVersion] = []
    for path in SCHEMA_DIR.glob(f"{stem}.v*.avsc"):
        match = _FILE_NAME.match(path.name)
        if match and match["stem"] == stem:
            found.append(_load(path, topic, int(match["version"])))
    if not found:
        raise UnknownTopicError(f"no schema file {stem}.v<N>.avsc in {SCHEMA_DIR}")
    return tuple(sorted(found, key=lambda item: item.version))


def schema(topic: str, version: int | None = None) -> SchemaVersion:
    """A topic's schema: the newest version, or the one asked for."""
    known = versions(topic)
    if version is None:
        return known[-1]
    for item in known:
        if item.version == version:
            return item
    raise UnknownTopicError(f"topic {topic!r} has no schema version {version}")


@cache
def _compiled(topic: str, version: int) -> Writer | None:
    """The compiled writer of a topic's schema version (`schemas.avro_binary`), built once per process."""
    return compile_writer(schema(topic, version).schema)


class Codec:
    """Encoder and decoder for one topic.

    `encode` writes with the newest version (or `write_version`); `decode` accepts any known version and
    returns the record as the newest version (or `read_version`) sees it: fields added since get their
    defaults.
    """

    def __init__(self, topic: str, *, write_version: int | None = None, read_version: int | None = None) -> None:
        self.topic = topic
        self.writer = schema(topic, write_version)
        self.reader = schema(topic, read_version)
        self._by_fingerprint = {item.fingerprint: item for item in versions(topic)}
        self._compiled: Writer | None = _compiled(topic, self.writer.version)

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """Single-object encoding of `record`; unknown or missing fields, and bad values, raise EncodeError."""
        if self._compiled is not None:
            body = bytearray(self.writer.header)
            try:
                self._compiled(body, record)
                return bytes(body)
            except Exception:  # noqa: S110 - Unfit, or a value's own error (a lone surrogate): fastavro decides
                pass
        out = io.BytesIO()
        out.write(self.writer.header)
        try:
            # a misspelt field or a missing one without default is an error, not silently dropped
            schemaless_writer(out, self.writer.schema, record, strict_allow_default=True)
        except Exception as exc:  # fastavro raises ValueError, TypeError, KeyError, AttributeError...
            raise EncodeError(f"record does not fit {self.topic} v{self.writer.version}: {exc}") from exc
        return out.getvalue()

    def writer_of(self, data: bytes) -> SchemaVersion:
        """The version that wrote `data`, checking the marker and the fingerprint."""
        if len(data) < HEADER_SIZE:
            raise DecodeError(f"{self.topic}: {len(data)} bytes is too short for a single-object encoded record")
        if data[:2] != MAGIC:
            raise DecodeError(
                f"{self.topic}: not Avro single-object encoding (starts with {bytes(data[:2]).hex()}, expected c301)"
            )
        found = self._by_fingerprint.get(bytes(data[2:HEADER_SIZE]))
        if found is None:
            known = ", ".join(f"v{item.version}={item.fingerprint_hex}" for item in self._by_fingerprint.values())
            raise UnknownSchemaError(
                f"{self.topic}: unknown writer schema fingerprint {bytes(data[2:HEADER_SIZE]).hex()} (known: {known})"
            )
        return found

    def decode(self, data: bytes) -> dict[str, Any]:
        """The record in `data`, resolved to the reader version."""
        writer = self.writer_of(data)
        body = io.BytesIO(data)
        body.seek(HEADER_SIZE)
        try:
            if writer.version == self.reader.version:
                record = schemaless_reader(body, writer.schema, None)
            else:
                record = schemaless_reader(body, writer.schema, self.reader.schema)
        except Exception as exc:  # truncated or corrupt body: EOFError, IndexError, UnicodeDecodeError...
            raise DecodeError(
                f"{self.topic}: corrupt body for schema v{writer.version}: {type(exc).__name__}: {exc}"
            ) from exc
        if body.tell() != len(data):
            raise DecodeError(f"{self.topic}: {len(data) - body.tell()} unexpected bytes after the record")
        if not isinstance(record, dict):
            raise DecodeError(f"{self.topic}: decoded a {type(record).__name__}, expected a record")
        return record


@cache
def codec(topic: str) -> Codec:
    """The shared default Codec of a topic (newest version for writing and reading)."""
    return Codec(topic)


def encode(topic: str, record: Mapping[str, Any], *, version: int | None = None) -> bytes:
    """Single-object encode `record` for `topic` (with the newest schema version unless `version` is given)."""
    return (codec(topic) if version is None else Codec(topic, write_version=version)).encode(record)


def decode(topic: str, data: bytes, *, version: int | None = None) -> dict[str, Any]:
    """Decode a single-object encoded record of `topic`, read as the newest version (or `version`)."""
    return (codec(topic) if version is None else Codec(topic, read_version=version)).decode(data)


# -- telling the two wire formats apart (the Confluent codec and the registry: processor.kafka.wire) ------------


def wire_format_of(data: bytes) -> str | None:
    """Which wire format wrote `data`, from its first bytes: CONFLUENT (`00`), SINGLE_OBJECT (`C3 01`), or None."""
    if data[:1] == CONFLUENT_MAGIC:
        return CONFLUENT
    if data[:2] == MAGIC:
        return SINGLE_OBJECT
    return None
