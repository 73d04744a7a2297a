"""Avro schemas of the dispersion topics and their pure codec (Avro single-object encoding).

    from schemas import encode, decode
    data = encode("payroll.batches", batch)       # C3 01 + fingerprint + Avro body
    batch = decode("payroll.batches", data)       # any known writer version, read as the newest

The deployment's wire format (single-object or Confluent, with a schema registry) is `processor.kafka.wire.WireCodec`.

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
    SchemaError,
    SchemaVersion,
    UnknownSchemaError,
    UnknownTopicError,
    codec,
    decode,
    encode,
    fingerprint,
    schema,
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
    "SchemaError",
    "SchemaVersion",
    "UnknownSchemaError",
    "UnknownTopicError",
    "codec",
    "decode",
    "encode",
    "fingerprint",
    "schema",
    "versions",
    "wire_format_of",
]
