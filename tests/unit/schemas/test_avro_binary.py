"""The compiled Avro writer (schemas/avro_binary.py): byte for byte fastavro's strict writer for every record of
every schema version, fastavro's own outcome for whatever it does not take, and no fastavro call when it does."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schemas
from schemas import Codec, EncodeError
from schemas.avro_binary import compile_writer, write_long
from schemas.topics import TRANSFERS_TOPIC

VERSIONS = [(topic, item.version) for topic in schemas.TOPICS for item in schemas.versions(topic)]
EPOCH_DAY = date(1970, 1, 1).toordinal()
ZONES = st.sampled_from([UTC, timezone(timedelta(hours=-6)), timezone(timedelta(hours=5, minutes=45))])


def fastavro_outcome(topic: str, version: int, record: Any) -> bytes | type[Exception]:
    """What fastavro's strict writer makes of `record`: the message's bytes, or the kind of error it raises."""
    writer = schemas.schema(topic, version)
    try:
        return writer.header + strict_fastavro_bytes(writer.schema, record)
    except Exception:  # any refusal is an EncodeError from the codec
        return EncodeError


def codec_outcome(topic: str, version: int, record: Any) -> bytes | type[Exception]:
    """What the codec makes of `record`."""
    try:
        return Codec(topic, write_version=version).encode(record)
    except EncodeError:
        return EncodeError


def compiled_bytes(schema: Any, record: Any) -> bytes:
    """The body the compiled writer of `schema` (parsed by fastavro) writes for `record`; it must take it."""
    writer = compile_writer(schema)
    assert writer is not None
    out = bytearray()
    writer(out, record)
    return bytes(out)


def strict_fastavro_bytes(schema: Any, record: Any) -> bytes:
    """The body fastavro's strict writer writes for `record`."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record, strict_allow_default=True)
    return out.getvalue()


def _decimals(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    bound = Decimal(10) ** (precision - scale) - 1
    exact = st.decimals(min_value=-bound, max_value=bound, places=scale, allow_nan=False, allow_infinity=False)
    whole = st.integers(-(10 ** (precision - scale)) + 1, 10 ** (precision - scale) - 1).map(Decimal)
    # fastavro sizes a decimal by its magnitude plus a sign bit: an unscaled -2^(8k-1) (-1.28 at scale 2) takes a
    # byte more than two's complement needs, and a writer that counted otherwise differs only there.
    signs = [Decimal(-(2 ** (8 * k - 1))).scaleb(-scale) for k in (1, 2, 3, 7)]
    plain = [Decimal("-0.00"), Decimal("0"), Decimal("1E+2"), Decimal("-0.01")]
    edges = st.sampled_from([value for value in signs + plain if len(value.as_tuple().digits) <= precision])
    return st.one_of(exact, whole, edges)


def strategy(schema: Any) -> st.SearchStrategy[Any]:
    """Values that fit `schema` (parsed by fastavro), of every kind the compiled writer takes."""
    if isinstance(schema, list):
        return st.one_of(*(strategy(branch) for branch in schema))
    if isinstance(schema, str):
        primitives: dict[str, st.SearchStrategy[Any]] = {
            "null": st.none(),
            "boolean": st.booleans(),
            "int": st.integers(-(2**31), 2**31 - 1),
            "long": st.integers(-(2**63), 2**63 - 1),
            "string": st.text(max_size=12),
            "bytes": st.binary(max_size=12),
        }
        return primitives[schema]
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal":
        return _decimals(schema["precision"], schema.get("scale", 0))
    # Logical values within what fastavro's reader turns back into a date or a datetime (years 1 to 9999).
    if logical == "date":
        return st.one_of(st.dates(), st.integers(date.min.toordinal() - EPOCH_DAY, date.max.toordinal() - EPOCH_DAY))
    if logical == "timestamp-millis":
        moments = st.datetimes(min_value=datetime(1800, 1, 1), max_value=datetime(9000, 1, 1), timezones=ZONES)
        return st.one_of(moments, st.integers(-(2**45), 2**45))
    if kind == "record":
        given = {field["name"]: strategy(field["type"]) for field in schema["fields"] if "default" not in field}
        left_out = {field["name"]: strategy(field["type"]) for field in schema["fields"] if "default" in field}
        return st.fixed_dictionaries(given, optional=left_out)
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "array":
        return st.lists(strategy(schema["items"]), max_size=3)
    return strategy(kind)


def test_every_schema_version_compiles() -> None:
    # Otherwise fastavro would write every record of it, correctly but slowly, and nothing else would tell.
    for topic, version in VERSIONS:
        assert compile_writer(schemas.schema(topic, version).schema) is not None, (topic, version)


@pytest.mark.parametrize(("topic", "version"), VERSIONS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_compiled_writer_writes_what_fastavro_writes(topic: str, version: int, data: st.DataObject) -> None:
    item = schemas.schema(topic, version)
    record = data.draw(strategy(item.schema))
    writer = compile_writer(item.schema)
    assert writer is not None
    written = bytearray(item.header)
    writer(written, record)  # takes every drawn record itself: a refusal would leave it to fastavro, slowly
    assert bytes(written) == fastavro_outcome(topic, version, record)
    assert codec_outcome(topic, version, record) == bytes(written)
    codec = Codec(topic, read_version=version)
    assert codec.decode(bytes(written)) == codec.decode(codec.encode(record))


NULL_SECOND = fastavro.parse_schema(
    {
        "type": "record",
        "name": "NullSecond",
        "fields": [
            {"name": "text", "type": ["string", "null"]},
            {"name": "at", "type": [{"type": "long", "logicalType": "timestamp-millis"}, "null"]},
            {"name": "amounts", "type": [{"type": "array", "items": "long"}, "null"], "default": []},
        ],
    }
)


@settings(max_examples=200, deadline=None)
@given(record=strategy(NULL_SECOND))
def test_a_union_with_null_second_is_written_as_fastavro_writes_it(record: dict[str, Any]) -> None:
    assert compiled_bytes(NULL_SECOND, record) == strict_fastavro_bytes(NULL_SECOND, record)


def _transfer() -> dict[str, Any]:
    return {
        "event_id": "0b4b3c2e-6f0e-5c43-9a55-2f1f6c0e8a11",
        "batch_id": "ERP-2026-11-0007",
        "index": 3,
        "employee_reference": "E-Peña-003",
        "amount": Decimal("1234.50"),
        "currency": "MXN",
        "origin_account": "012345678901234567",
        "destination_account": "098765432109876543",
        "outcome": "FAILED",
        "reason_code": "AC04",
        "reason": "cuenta cerrada",
        "occurred_at": datetime(2026, 11, 30, 18, 5, 1, 999999, tzinfo=timezone(timedelta(hours=-6))),
    }


def test_a_record_that_fits_is_written_without_fastavro(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = fastavro_outcome(TRANSFERS_TOPIC, 1, _transfer())

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("fastavro's writer was called")

    # `schemas.codec` as an attribute is the package's `codec()` function; the module is in sys.modules.
    monkeypatch.setattr(sys.modules["schemas.codec"], "schemaless_writer", refuse)
    assert Codec(TRANSFERS_TOPIC).encode(_transfer()) == expected


def _changed(**changes: Any) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        record = _transfer()
        for name, value in changes.items():
            if value is KeyError:
                del record[name]
            else:
                record[name] = value
        return record

    return build


@pytest.mark.parametrize(
    "build",
    [
        _changed(extra="a key the schema does not name"),
        _changed(index=KeyError, extra=1),  # as many keys as fields, one of them foreign
        _changed(currency=KeyError),  # missing, no default
        _changed(amount=Decimal("1.005")),  # more places than the scale
        _changed(amount=Decimal("12345678901234567.89")),  # 19 digits, precision 18
        _changed(amount=Decimal("NaN")),
        _changed(amount="1234.50"),
        _changed(index=True),
        _changed(index=2**31),
        _changed(outcome="PAID"),
        _changed(reason=7),
        _changed(reason="\ud800"),  # a lone surrogate: UTF-8 cannot encode it
        _changed(occurred_at=datetime(2026, 11, 30, 18, 5, 1)),  # naive: fastavro reads it as local time
        _changed(occurred_at="2026-11-30T18:05:01Z"),
        _changed(reason_code=KeyError),  # left out: its default (null)
    ],
)
def test_what_the_compiled_writer_does_not_take_fastavro_decides(build: Callable[[], dict[str, Any]]) -> None:
    topic = TRANSFERS_TOPIC
    assert codec_outcome(topic, 1, build()) == fastavro_outcome(topic, 1, build())


def test_an_encode_error_names_the_field_as_fastavro_does() -> None:
    with pytest.raises(EncodeError, match="extra"):
        Codec(TRANSFERS_TOPIC).encode(_changed(extra=1)())


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (64, b"\x80\x01"), (-65, b"\x81\x01"),
     (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"), (-(2**63), b"\xff" * 9 + b"\x01")],
)  # fmt: skip
def test_longs_are_zig_zag_seven_bits_a_byte(value: int, encoded: bytes) -> None:
    out = bytearray()
    write_long(out, value)
    assert bytes(out) == encoded


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "map", "values": "string"},
        {"type": "fixed", "name": "F", "size": 4},
        "double",
        ["null", "string", "int"],
        ["string", "int"],
        {"type": "string", "logicalType": "uuid"},
        {"type": "bytes", "logicalType": "decimal"},  # no precision: fastavro parses it, the compiler leaves it
    ],
)
def test_what_the_compiler_does_not_handle_is_left_to_fastavro(schema: Any) -> None:
    record = fastavro.parse_schema({"type": "record", "name": "R", "fields": [{"name": "f", "type": schema}]})
    assert compile_writer(record) is None


@pytest.mark.parametrize("day", [date(1969, 12, 31), date(2026, 11, 30), date(1, 1, 1)])
def test_dates_are_days_since_the_epoch(day: date) -> None:
    schema = fastavro.parse_schema(
        {"type": "record", "name": "R", "fields": [{"name": "d", "type": {"type": "int", "logicalType": "date"}}]}
    )
    assert compiled_bytes(schema, {"d": day}) == strict_fastavro_bytes(schema, {"d": day})
