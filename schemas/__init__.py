"""Avro schemas of the dispersion topics and their codecs (Avro single-object encoding, Confluent wire format).

    from schemas import encode, decode
    data = encode("payroll.batches", batch)       # C3 01 + fingerprint + Avro body
    batch = decode("payroll.batches", data)       # any known writer version, read as the newest

    codec = WireCodec("dispersion.status", wire)  # the deployment's wire format (single-object or Confluent)

See docs/kafka.md for the topics, their fields and both wire formats.
"""

from schemas.codec import (
    CONFLUENT,
    CONFLUENT_MAGIC,
    HEADER_SIZE,
    MAGIC,
    SINGLE_OBJECT,
    TOPICS,
    WIRE_FORMATS,
    Codec,
    DecodeError,
    EncodeError,
    Registry,
    RegistryUnavailableError,
    SchemaError,
    SchemaVersion,
    UnknownSchemaError,
    UnknownTopicError,
    WireCodec,
    WireSettings,
    codec,
    decode,
    encode,
    fingerprint,
    identify,
    load_schema,
    registry_client,
    registry_text,
    registry_transport_errors,
    schema,
    subject_name,
    versions,
    wire_format_of,
)

__all__ = [
    "CONFLUENT",
    "CONFLUENT_MAGIC",
    "HEADER_SIZE",
    "MAGIC",
    "SINGLE_OBJECT",
    "TOPICS",
    "WIRE_FORMATS",
    "Codec",
    "DecodeError",
    "EncodeError",
    "Registry",
    "RegistryUnavailableError",
    "SchemaError",
    "SchemaVersion",
    "UnknownSchemaError",
    "UnknownTopicError",
    "WireCodec",
    "WireSettings",
    "codec",
    "decode",
    "encode",
    "fingerprint",
    "identify",
    "load_schema",
    "registry_client",
    "registry_text",
    "registry_transport_errors",
    "schema",
    "subject_name",
    "versions",
    "wire_format_of",
]
