"""The dispersion events on the wire: Avro single-object encoding (fastavro alone) or the Confluent wire format
(a schema registry), and the one place that decides which (`WireCodec`).

Single-object encoding (Avro specification): the two marker bytes `C3 01`, the 8-byte
little-endian CRC-64-AVRO (Rabin) fingerprint of the writer schema's Parsing Canonical Form, then the Avro
binary body. No schema registry is needed: a reader recognises the writer's schema version by its fingerprint
and resolves it to the version it reads with (by default the newest), so data written with an older version
stays readable.

Schemas live next to this file as `<topic with dots as underscores>.v<N>.avsc`; every version ever released
stays, so old data can be decoded.

Confluent wire format (`[kafka] wire_format = "confluent"`): a zero byte, the registry's 4-byte schema id, then the
Avro binary body, written and read by `confluent_kafka.schema_registry.avro` (imported only when a registry is
configured). The subject of a topic's values is `<topic>-value`. A reader accepts both formats in either mode, told
apart by the first byte (`00` Confluent, `C3 01` single-object), so a deployment can migrate topic by topic.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint as _fingerprint_hex
from fastavro.schema import to_parsing_canonical_form

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


class RegistryUnavailableError(SchemaError):
    """The schema registry cannot serve the request now (unreachable, a server error, or the subject is not
    registered yet): the record is not at fault, so it is retried later, never dead-lettered."""


@dataclass(frozen=True)
class SchemaVersion:
    """One released version of one topic's schema."""

    topic: str
    version: int
    path: Path
    schema: Any = field(repr=False)  # parsed by fastavro, ready for its reader and writer
    canonical_form: str = field(repr=False)
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
    canonical = to_parsing_canonical_form(raw)
    return SchemaVersion(
        topic=topic,
        version=version,
        path=path,
        schema=parsed,
        canonical_form=canonical,
        fingerprint=bytes.fromhex(_fingerprint_hex(canonical, "CRC-64-AVRO")),
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


def load_schema(topic: str, version: int | None = None) -> Any:
    """The parsed (fastavro) schema of a topic, ready for `fastavro.schemaless_writer`/`schemaless_reader`."""
    return schema(topic, version).schema


def identify(data: bytes) -> SchemaVersion | None:
    """Which known schema (of any topic) wrote these bytes, from their fingerprint; None when unknown."""
    if len(data) < HEADER_SIZE or data[:2] != MAGIC:
        return None
    wanted = bytes(data[2:HEADER_SIZE])
    for topic in TOPICS:
        for item in versions(topic):
            if item.fingerprint == wanted:
                return item
    return None


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

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """Single-object encoding of `record`; unknown or missing fields, and bad values, raise EncodeError."""
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


# -- the wire format: single-object or Confluent (schema registry) ------------------------------------------------

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient


def subject_name(topic: str) -> str:
    """The registry subject of a topic's values (Confluent's TopicNameStrategy): `<topic>-value`."""
    return f"{topic}-value"


def wire_format_of(data: bytes) -> str | None:
    """Which wire format wrote `data`, from its first bytes: CONFLUENT (`00`), SINGLE_OBJECT (`C3 01`), or None."""
    if data[:1] == CONFLUENT_MAGIC:
        return CONFLUENT
    if data[:2] == MAGIC:
        return SINGLE_OBJECT
    return None


@dataclass(frozen=True)
class Registry:
    """Where the schema registry is (its Confluent-compatible API) and how to log in (HTTP basic, optional)."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # a secret: never in a repr or a log line

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            shown = self.url if "@" not in self.url else "an address with credentials"
            raise ValueError(f"schema_registry_url must be an http:// or https:// address, got {shown!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "schema_registry_url must not hold credentials; use schema_registry_username and "
                "schema_registry_password (or schema_registry_password_env)"
            )
        if (self.username is None) != (self.password is None):
            raise ValueError("schema_registry_username and schema_registry_password go together")

    def client_config(self) -> dict[str, Any]:
        """Properties of `confluent_kafka.schema_registry.SchemaRegistryClient`."""
        config: dict[str, Any] = {"url": self.url.rstrip("/")}
        if self.username is not None and self.password is not None:
            config["basic.auth.user.info"] = f"{self.username}:{self.password}"
        return config


@dataclass(frozen=True)
class WireSettings:
    """The deployment's wire format (what producers write) and its registry (needed to write `confluent`, and to
    read Confluent-framed records in either mode)."""

    wire_format: str = SINGLE_OBJECT
    registry: Registry | None = None

    def __post_init__(self) -> None:
        if self.wire_format not in WIRE_FORMATS:
            raise ValueError(f"wire_format must be one of {', '.join(WIRE_FORMATS)}, got {self.wire_format!r}")
        if self.wire_format == CONFLUENT and self.registry is None:
            raise ValueError('wire_format = "confluent" needs schema_registry_url')


@cache
def registry_client(registry: Registry) -> SchemaRegistryClient:
    """One registry client per registry and process (it caches schemas by id and subject)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(registry.client_config())


@cache
def registry_transport_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "the registry could not be reached" (the client's HTTP library, whichever it is)."""
    import httpx

    found: list[type[BaseException]] = [OSError, httpx.HTTPError]
    try:  # the registry client brings its own httpx flavour; its errors are not httpx's
        from confluent_kafka.schema_registry.common._httpx_compat import httpx as compat

        found.append(compat.HTTPError)
    except (ImportError, AttributeError):
        pass
    return tuple(found)


def registry_text(topic: str, version: int | None = None) -> str:
    """A schema version's text as the registry holds it. Stripped, as confluent_kafka's serializer strips it before
    looking it up: a registry comparing text (Apicurio does) would not find it otherwise."""
    return schema(topic, version).path.read_text(encoding="utf-8").strip()


class WireCodec:
    """One topic's records in the deployment's wire format: `encode` writes `wire.wire_format`, `decode` reads
    both formats (the first byte decides), resolved to the newest local schema version.

    `topic` arguments are physical topic names (the subject is `<topic>-value`); the logical topic picks the
    schema. Registry problems raise `RegistryUnavailableError` (retry later), bad bytes `DecodeError`.
    """

    def __init__(self, logical_topic: str, wire: WireSettings | None = None) -> None:
        self.topic = logical_topic
        self.wire = wire or WireSettings()
        self.local = Codec(logical_topic)
        self._serializer: Any = None
        self._deserializer: Any = None

    @property
    def registry(self) -> Registry | None:
        """The registry, when one is configured."""
        return self.wire.registry

    def encode(self, record: Mapping[str, Any], topic: str | None = None) -> bytes:
        """`record` in the configured wire format, for the physical `topic` (default: the logical name)."""
        if self.wire.wire_format == SINGLE_OBJECT:
            return self.local.encode(record)
        self.local.encode(record)  # the strict check of single-object encoding: a misspelt field is an error
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        physical = topic or self.topic
        if self._serializer is None:
            from confluent_kafka.schema_registry.avro import AvroSerializer

            assert self.registry is not None  # WireSettings insists
            # The subjects are registered (with their compatibility) by `dispersion topics`, not by each producer.
            self._serializer = AvroSerializer(
                registry_client(self.registry), registry_text(self.topic), conf={"auto.register.schemas": False}
            )
        try:
            data = self._serializer(dict(record), SerializationContext(physical, MessageField.VALUE))
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise RegistryUnavailableError(
                    f"{subject_name(physical)}: this schema is not registered in the schema registry at "
                    f"{self.registry.url if self.registry else '?'}; `dispersion topics` registers it ({exc})"
                ) from exc
            raise RegistryUnavailableError(f"{subject_name(physical)}: schema registry: {exc}") from exc
        except registry_transport_errors() as exc:
            raise RegistryUnavailableError(f"schema registry unreachable: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # fastavro refuses the record
            raise EncodeError(f"record does not fit {self.topic}: {exc}") from exc
        if not isinstance(data, bytes):
            raise EncodeError(f"{self.topic}: the serializer returned no bytes")
        return data

    def decode(self, data: bytes, topic: str | None = None) -> dict[str, Any]:
        """The record in `data`, whichever format wrote it (single-object or Confluent)."""
        kind = wire_format_of(data)
        if kind == SINGLE_OBJECT:
            return self.local.decode(data)
        if kind is None:
            start = bytes(data[:2]).hex() or "nothing"
            raise DecodeError(
                f"{self.topic}: neither Avro single-object encoding (c301) nor the Confluent wire format (00); "
                f"starts with {start}"
            )
        if self.registry is None:
            raise DecodeError(
                f"{self.topic}: a Confluent-framed record (schema registry wire format) but no "
                "[kafka] schema_registry_url is configured to read it"
            )
        return self._decode_confluent(data, topic or self.topic)

    def _decode_confluent(self, data: bytes, physical: str) -> dict[str, Any]:
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        if self._deserializer is None:
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            assert self.registry is not None
            self._deserializer = AvroDeserializer(registry_client(self.registry), registry_text(self.topic))
        try:
            record = self._deserializer(bytes(data), SerializationContext(physical, MessageField.VALUE))
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise DecodeError(
                    f"{self.topic}: the schema registry does not know this record's schema: {exc}"
                ) from exc
            raise RegistryUnavailableError(f"schema registry: {exc}") from exc
        except registry_transport_errors() as exc:
            raise RegistryUnavailableError(f"schema registry unreachable: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # a short frame, a writer schema that does not resolve, a corrupt body
            why = f"{type(exc).__name__}: {exc}"
            raise DecodeError(f"{self.topic}: undecodable Confluent-framed record: {why}") from exc
        if not isinstance(record, dict):
            raise DecodeError(f"{self.topic}: decoded a {type(record).__name__}, expected a record")
        return record
