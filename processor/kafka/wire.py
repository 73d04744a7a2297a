"""The wire format of the deployment's records and the schema registry client: the Kafka side of the codec in
`schemas.codec` (which stays pure).

    codec = WireCodec("dispersion.status", settings.wire)   # writes `wire.wire_format`, reads both
    data = codec.encode(record, settings.topic("dispersion.status"))

Single-object encoding needs nothing but `schemas.codec`. The Confluent wire format (`[kafka] wire_format =
"confluent"`) is written and read by `confluent_kafka.schema_registry.avro` with confluent-kafka's own
`SchemaRegistryClient` (HTTP; imported only when a registry is configured, one client per registry and process).
The subject of a topic's values is `<topic>-value`. A reader accepts both formats in either mode, told apart by the
first byte (`schemas.wire_format_of`), so a deployment can migrate topic by topic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from schemas.codec import (
    CONFLUENT,
    SINGLE_OBJECT,
    WIRE_FORMATS,
    Codec,
    DecodeError,
    EncodeError,
    SchemaError,
    wire_format_of,
)
from schemas.codec import schema as schema_version

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient


class RegistryUnavailableError(SchemaError):
    """The schema registry cannot serve the request now (unreachable, a server error, or the subject is not
    registered yet): the record is not at fault, so it is retried later, never dead-lettered."""


def subject_name(topic: str) -> str:
    """The registry subject of a topic's values (Confluent's TopicNameStrategy): `<topic>-value`."""
    return f"{topic}-value"


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


def _not_found(exc: BaseException) -> bool:
    """The registry answered 404 (a subject or schema id it does not know)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    return isinstance(exc, SchemaRegistryError) and exc.http_status_code == 404


def _unavailable(exc: BaseException, subject: str = "") -> RegistryUnavailableError | None:
    """The error for a registry that could not answer (any other error status, the network), None when `exc` is
    not the registry's (the record's own fault: the caller's error)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(exc, SchemaRegistryError):
        return RegistryUnavailableError(f"{subject}schema registry: {exc}")
    if isinstance(exc, registry_transport_errors()):
        return RegistryUnavailableError(f"schema registry unreachable: {type(exc).__name__}: {exc}")
    return None


def registry_text(topic: str, version: int | None = None) -> str:
    """A schema version's text as the registry holds it. Stripped, as confluent_kafka's serializer strips it before
    looking it up: a registry comparing text (Apicurio does) would not find it otherwise."""
    return schema_version(topic, version).path.read_text(encoding="utf-8").strip()


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
        except Exception as exc:
            if _not_found(exc):
                raise RegistryUnavailableError(
                    f"{subject_name(physical)}: this schema is not registered in the schema registry at "
                    f"{self.registry.url if self.registry else '?'}; `dispersion topics` registers it ({exc})"
                ) from exc
            raise _unavailable(exc, f"{subject_name(physical)}: ") or EncodeError(  # else fastavro refused it
                f"record does not fit {self.topic}: {exc}"
            ) from exc
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
        from confluent_kafka.serialization import MessageField, SerializationContext

        if self._deserializer is None:
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            assert self.registry is not None
            self._deserializer = AvroDeserializer(registry_client(self.registry), registry_text(self.topic))
        try:
            record = self._deserializer(bytes(data), SerializationContext(physical, MessageField.VALUE))
        except Exception as exc:
            if _not_found(exc):
                unknown = f"{self.topic}: the schema registry does not know this record's schema: {exc}"
                raise DecodeError(unknown) from exc
            why = f"{type(exc).__name__}: {exc}"  # else a short frame, a writer schema that does not resolve, ...
            raise _unavailable(exc) or DecodeError(f"{self.topic}: undecodable Confluent-framed record: {why}") from exc
        if not isinstance(record, dict):
            raise DecodeError(f"{self.topic}: decoded a {type(record).__name__}, expected a record")
        return record
