"""Avro binary bodies of our topics' records, from a writer compiled once per schema version. Pure.

Hand-written for a measured reason: fastavro's writer interprets the schema for every value (a dictionary lookup
per field, a validation per union branch, the strictness checks per record): in one run of
`benchmarks/avro_encode.py`, 9.5 us per `dispersion.transfers` record and 756 us per COMPLETED status event of 100
results (the outbox relay encodes about 104 events per batch); compiled into one closure per schema node, 6.0 and
233 us.

The compiled writer takes only what it can write exactly as fastavro's `schemaless_writer` with
`strict_allow_default=True` writes it, byte for byte:

- a record as a `dict` holding no key its schema does not name; a field left out takes its default;
- null, boolean, int and long (`int` in range, not `bool`), string (`str`), bytes (`bytes`), an enum's symbol (`str`),
  an array (`list`), a union of null and one other type;
- the logical types `decimal` on bytes (a finite `Decimal` within the precision, at most the scale's places),
  `date` on int (a `date`, not a `datetime`; or its day number) and `timestamp-millis` on long (a `datetime` with a
  time zone; or its milliseconds).

Anything else raises `Unfit` (or the error of the value itself: a string that UTF-8 cannot encode), and the caller
gives the record to fastavro, which either writes it (a value it coerces, such as a naive `datetime`) or says why
it does not fit. A schema using anything not listed (a map, a fixed, a float, a union of two non-null types, a
named type referred to by name) compiles to None: fastavro writes every record of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal, Inexact, Rounded
from typing import Any

Writer = Callable[[bytearray, Any], None]
"""Appends one value's Avro binary encoding to the buffer, or raises `Unfit`."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_INT = (-(1 << 31), 1 << 31)
_LONG = (-(1 << 63), 1 << 63)
# Shifting a decimal point is exact in this context: no precision to round to, and any rounding would trap.
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact, Rounded])
_NO_DEFAULT = object()


class Unfit(Exception):  # noqa: N818 - a signal to hand the record to fastavro, not an error to report
    """A value the compiled writer does not take as it is: fastavro decides."""


class _Unsupported(Exception):  # noqa: N818 - ends compilation only
    """A schema construct the compiler does not handle."""


def compile_writer(schema: Any) -> Writer | None:
    """The writer of a schema parsed by fastavro (`parse_schema`), or None when the schema uses something the
    compiler does not handle (see the module docstring)."""
    try:
        return _compile(schema)
    except (_Unsupported, KeyError, TypeError, ValueError):  # also a schema fastavro parses but we cannot read
        return None


def write_long(out: bytearray, value: int) -> None:
    """A long (or an int, a length, a count, a union's branch) as Avro writes it: zig-zag, then 7 bits a byte."""
    value = (value << 1) ^ (value >> 63)
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _compile(schema: Any) -> Writer:
    if isinstance(schema, list):
        return _union_of(schema)
    if isinstance(schema, str):
        return _primitive(schema)
    if not isinstance(schema, Mapping):
        raise _Unsupported(repr(schema))
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical is not None:
        return _logical(kind, logical, schema)
    if kind == "record":
        return _record_of(schema["fields"])
    if kind == "enum":
        return _enum_of(schema["symbols"])
    if kind == "array":
        return _array_of(_compile(schema["items"]))
    if isinstance(kind, str | list | Mapping):
        return _compile(kind)
    raise _Unsupported(repr(kind))


def _primitive(kind: str) -> Writer:
    writers: dict[str, Writer] = {
        "null": _null,
        "boolean": _boolean,
        "int": _integer(*_INT),
        "long": _integer(*_LONG),
        "string": _string,
        "bytes": _bytes,
    }
    found = writers.get(kind)
    if found is None:  # float, double, or a named type referred to by name
        raise _Unsupported(kind)
    return found


def _logical(kind: Any, logical: str, schema: Mapping[str, Any]) -> Writer:
    if kind == "bytes" and logical == "decimal":
        return _decimal_of(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind == "int" and logical == "date":
        return _day
    if kind == "long" and logical == "timestamp-millis":
        return _instant
    raise _Unsupported(f"{kind}/{logical}")


def _null(out: bytearray, value: Any) -> None:
    if value is not None:
        raise Unfit


def _boolean(out: bytearray, value: Any) -> None:
    if type(value) is not bool:
        raise Unfit
    out.append(1 if value else 0)


def _integer(low: int, high: int) -> Writer:
    def integer(out: bytearray, value: Any) -> None:
        if type(value) is not int or not low <= value < high:
            raise Unfit
        write_long(out, value)

    return integer


def _string(out: bytearray, value: Any) -> None:
    if type(value) is not str:
        raise Unfit
    encoded = value.encode()
    write_long(out, len(encoded))
    out += encoded


def _bytes(out: bytearray, value: Any) -> None:
    if type(value) is not bytes:
        raise Unfit
    write_long(out, len(value))
    out += value


def _decimal_of(precision: int, scale: int) -> Writer:
    def decimal(out: bytearray, value: Any) -> None:
        if type(value) is not Decimal or not value.is_finite():
            raise Unfit
        _, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)  # a finite Decimal's exponent
        if len(digits) > precision or exponent + scale < 0:
            raise Unfit
        unscaled = int(value.scaleb(scale, _EXACT))
        # The magnitude's bits plus a sign bit, as fastavro counts them (-128 takes two bytes).
        size = (unscaled.bit_length() + 8) // 8  # int.bit_length counts the magnitude
        write_long(out, size)
        out += unscaled.to_bytes(size, "big", signed=True)

    return decimal


def _day(out: bytearray, value: Any) -> None:
    if type(value) is date:
        write_long(out, value.toordinal() - _EPOCH_DAY)
    elif type(value) is int and _INT[0] <= value < _INT[1]:
        write_long(out, value)
    else:  # a datetime (fastavro takes its date), a text date, anything else
        raise Unfit


def _instant(out: bytearray, value: Any) -> None:
    if type(value) is datetime and value.tzinfo is not None:
        delta = value - _EPOCH
        write_long(out, (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000)
    elif type(value) is int and _LONG[0] <= value < _LONG[1]:
        write_long(out, value)
    else:  # a naive datetime is local time to fastavro: its reading, not ours
        raise Unfit


def _enum_of(symbols: Sequence[str]) -> Writer:
    index = {symbol: position for position, symbol in enumerate(symbols)}

    def enum(out: bytearray, value: Any) -> None:
        position = index.get(value) if type(value) is str else None
        if position is None:
            raise Unfit
        write_long(out, position)

    return enum


def _array_of(item: Writer) -> Writer:
    def array(out: bytearray, value: Any) -> None:
        if type(value) is not list:
            raise Unfit
        if value:  # one block of every item; an empty array is the end marker alone
            write_long(out, len(value))
            for element in value:
                item(out, element)
        out.append(0)

    return array


def _union_of(branches: Sequence[Any]) -> Writer:
    kinds = [branch if isinstance(branch, str) else None for branch in branches]
    if len(branches) != 2 or kinds.count("null") != 1:
        raise _Unsupported("a union other than null and one type")
    null_at = kinds.index("null")
    null_mark, other_mark = (0, 2) if null_at == 0 else (2, 0)  # branch 0 and 1, zig-zag encoded
    if kinds[1 - null_at] == "string":  # the most common field of our schemas, written in one call
        return _nullable_string(null_mark, other_mark)
    other = _compile(branches[1 - null_at])

    def union(out: bytearray, value: Any) -> None:
        if value is None:
            out.append(null_mark)
        else:
            out.append(other_mark)
            other(out, value)

    return union


def _nullable_string(null_mark: int, other_mark: int) -> Writer:
    def nullable_string(out: bytearray, value: Any) -> None:
        if value is None:
            out.append(null_mark)
            return
        if type(value) is not str:
            raise Unfit
        encoded = value.encode()
        out.append(other_mark)
        write_long(out, len(encoded))
        out += encoded

    return nullable_string


def _record_of(fields: Sequence[Mapping[str, Any]]) -> Writer:
    plan = [(field["name"], _compile(field["type"]), field.get("default", _NO_DEFAULT)) for field in fields]
    every = [(name, write) for name, write, _ in plan]

    def record(out: bytearray, value: Any) -> None:
        if type(value) is not dict:
            raise Unfit
        if len(value) == len(every):  # the usual case: every field given, so no key can be foreign
            try:
                for name, write in every:
                    write(out, value[name])
            except KeyError:
                raise Unfit from None  # a field missing, so a foreign key in its place: fastavro says which
            return
        present = 0
        for name, write, default in plan:
            if name in value:
                present += 1
                write(out, value[name])
            elif default is _NO_DEFAULT:
                raise Unfit  # missing, with no default: fastavro says so
            else:
                write(out, default)
        if present != len(value):
            raise Unfit  # a key the schema does not name: fastavro says which

    return record
