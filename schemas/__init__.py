"""Avro schemas of the dispersion topics and a fastavro-only codec (Avro single-object encoding).

    from schemas import encode, decode
    data = encode("payroll.batches", batch)       # C3 01 + fingerprint + Avro body
    batch = decode("payroll.batches", data)       # any known writer version, read as the newest

See docs/kafka.md for the topics and their fields.
"""

from schemas.codec import (
    HEADER_SIZE,
    MAGIC,
    TOPICS,
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
    identify,
    load_schema,
    schema,
    versions,
)

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "TOPICS",
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
    "identify",
    "load_schema",
    "schema",
    "versions",
]
