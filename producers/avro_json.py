"""Turn a JSON document (as the outbox stores it: Decimals as strings, instants as ISO 8601 text) into a record
that fits an Avro schema, guided by the schema itself. Pure.

    record = convert(raw_schema, {"status": "COMPLETED", "control_sum": "1500.75", "occurred_at": "2026-...Z"},
                     Coercion(), "$")

- decimal logical types: a string or Decimal becomes a Decimal with the schema's scale (`1.500` -> `1.50`; more
  decimals than the scale are refused, never rounded; a float is refused: money never passes a float);
- `timestamp-millis`: ISO 8601 text (with offset) or an aware datetime becomes an aware datetime; an int stays
  milliseconds since the epoch;
- `date`: ISO 8601 date text (`2026-11-30`) or a date becomes a date; an int stays days since the epoch;
- unions with null: a missing or null value is null; otherwise the first branch that accepts the value;
- records: missing fields take their default; fields the schema does not know are dropped and reported in
  `Coercion.dropped` (the caller decides whether that matters).

Anything that does not fit raises `CoercionError` naming the path (`transaction_results[3].amount`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}

# One compiled schema: (value, context, path) -> the converted value.
Converter = Callable[[Any, "Coercion", str], Any]


class CoercionError(ValueError):
    """The document does not fit the schema."""


@dataclass
class Coercion:
    """Context of one conversion: the fields that were dropped."""

    dropped: list[str] = field(default_factory=list)


def _full_name(schema: Mapping[str, Any], namespace: str | None) -> str:
    name = str(schema["name"])
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


_COMPILED: dict[tuple[int, str | None], tuple[Any, Converter]] = {}
_COMPILED_LOCK = threading.Lock()


def convert(schema: Any, value: Any, ctx: Coercion, path: str, namespace: str | None = None) -> Any:
    """Convert `value` for `schema` (the raw JSON schema as in the .avsc file) at `path` (`"$"` for a whole
    document); `CoercionError` if it cannot be. The schema is walked once and kept compiled into one function per
    type (the relay converts each event of a topic with the same schema object): per value, only the checks and
    conversions its fields need run."""
    key = (id(schema), namespace)
    entry = _COMPILED.get(key)
    if entry is None or entry[0] is not schema:
        entry = (schema, _compile(schema, namespace, {}))
        with _COMPILED_LOCK:
            if len(_COMPILED) >= 64:  # callers building schemas on the fly (tests) must not grow it forever
                _COMPILED.clear()
            _COMPILED[key] = entry
    return entry[1](value, ctx, path)


def _compile(schema: Any, namespace: str | None, named: dict[str, list[Converter]]) -> Converter:
    """The converter of `schema`; `named` holds the named types defined so far (a list, filled once compiled, so
    a record may refer to itself)."""
    if isinstance(schema, list):
        return _union_of(schema, namespace, named)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _primitive_of(schema, None, None)
        return _reference(schema, namespace, named)
    if not isinstance(schema, Mapping):
        return _refusal("{path}: unsupported schema " + repr(schema).replace("{", "{{").replace("}", "}}"))
    kind = schema["type"]
    if kind == "record":
        return _record_of(schema, namespace, named)
    if kind == "enum":
        return _named(named, _full_name(schema, namespace), _enum_of(schema["symbols"]))
    if kind == "array":
        return _array_of(_compile(schema["items"], namespace, named))
    if kind == "map":
        return _map_of(_compile(schema["values"], namespace, named))
    if kind == "fixed":
        return _named(named, _full_name(schema, namespace), _primitive_of("bytes", None, None))
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return _primitive_of(kind, schema.get("logicalType"), schema.get("scale"))
    return _compile(kind, namespace, named)


def _refusal(message: str) -> Converter:
    def refuse(value: Any, ctx: Coercion, path: str) -> Any:
        raise CoercionError(message.format(path=path))

    return refuse


def _named(named: dict[str, list[Converter]], full: str, converter: Converter) -> Converter:
    named.setdefault(full, []).append(converter)
    return converter


def _reference(name: str, namespace: str | None, named: dict[str, list[Converter]]) -> Converter:
    target = named[name] if name in named else named.get(f"{namespace}.{name}")
    if target is None:
        return _refusal("{path}: unknown type " + repr(name).replace("{", "{{").replace("}", "}}"))
    slot = target

    def refer(value: Any, ctx: Coercion, path: str) -> Any:
        return slot[0](value, ctx, path)

    return refer


def _enum_of(symbols: list[str]) -> Converter:
    allowed = frozenset(symbols)
    listed = ", ".join(symbols)

    def enum(value: Any, ctx: Coercion, path: str) -> Any:
        if not isinstance(value, str) or value not in allowed:
            raise CoercionError(f"{path}: {value!r} is not one of {listed}")
        return value

    return enum


def _array_of(item: Converter) -> Converter:
    def array(value: Any, ctx: Coercion, path: str) -> Any:
        if not isinstance(value, list | tuple):
            raise CoercionError(f"{path}: expected an array, got {type(value).__name__}")
        return [item(element, ctx, f"{path}[{i}]") for i, element in enumerate(value)]

    return array


def _map_of(values: Converter) -> Converter:
    def mapping(value: Any, ctx: Coercion, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise CoercionError(f"{path}: expected an object, got {type(value).__name__}")
        return {str(k): values(v, ctx, f"{path}.{k}") for k, v in value.items()}

    return mapping


def _union_of(branches: list[Any], namespace: str | None, named: dict[str, list[Converter]]) -> Converter:
    nullable = "null" in branches
    options = [_compile(branch, namespace, named) for branch in branches if branch != "null"]

    def union(value: Any, ctx: Coercion, path: str) -> Any:
        if value is None:
            if nullable:
                return None
            raise CoercionError(f"{path}: is required")
        problems = []
        for option in options:
            try:
                return option(value, ctx, path)
            except CoercionError as exc:
                problems.append(str(exc))
        raise CoercionError("; ".join(problems) or f"{path}: no branch accepts {value!r}")

    return union


_REQUIRED = object()  # a field with neither a default nor null among its types


def _record_of(schema: Mapping[str, Any], namespace: str | None, named: dict[str, list[Converter]]) -> Converter:
    full = _full_name(schema, namespace)
    slot = named.setdefault(full, [])  # registered before its fields: they may refer to it
    inner = full.rpartition(".")[0] or None
    fields: list[tuple[str, Converter, Any]] = []
    for item in schema["fields"]:
        if "default" in item:
            missing = item["default"]
        elif _nullable(item["type"]):
            missing = None
        else:
            missing = _REQUIRED
        fields.append((item["name"], _compile(item["type"], inner, named), missing))
    names = frozenset(name for name, _, _ in fields)

    def record(value: Any, ctx: Coercion, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise CoercionError(f"{path}: expected an object, got {type(value).__name__}")
        top = path == "$"
        out: dict[str, Any] = {}
        for name, converter, missing in fields:
            if name in value:
                out[name] = converter(value[name], ctx, name if top else f"{path}.{name}")
            elif missing is _REQUIRED:
                raise CoercionError(f"{name if top else f'{path}.{name}'}: is required")
            else:
                out[name] = missing
        for extra in value:
            if extra not in names:
                ctx.dropped.append(str(extra) if top else f"{path}.{extra}")
        return out

    slot.append(record)
    return record


def _nullable(schema: Any) -> bool:
    return isinstance(schema, list) and "null" in schema


def _primitive_of(kind: str, logical: str | None, scale: int | None) -> Converter:
    """The converter of a primitive type (with its logical type, if one applies)."""
    if logical == "decimal" and kind in ("bytes", "fixed"):
        quantum = None if scale is None else Decimal(1).scaleb(-scale)
        return lambda value, ctx, path: _at_scale(_decimal(value, path), quantum, scale, path)
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return lambda value, ctx, path: _instant(value, path)
    if logical == "date" and kind == "int":
        return lambda value, ctx, path: _day(value, path)
    checks: dict[str, Converter] = {
        "null": _null,
        "boolean": _boolean,
        "int": _integer,
        "long": _integer,
        "float": _number,
        "double": _number,
        "string": _string,
        "bytes": _bytes,
    }
    return checks.get(kind) or _refusal("{path}: unsupported type " + kind.replace("{", "{{").replace("}", "}}"))


def _null(value: Any, ctx: Coercion, path: str) -> Any:
    if value is not None:
        raise CoercionError(f"{path}: expected null")
    return None


def _boolean(value: Any, ctx: Coercion, path: str) -> Any:
    if not isinstance(value, bool):
        raise CoercionError(f"{path}: expected a boolean, got {type(value).__name__}")
    return value


def _integer(value: Any, ctx: Coercion, path: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CoercionError(f"{path}: expected an integer, got {type(value).__name__}")
    return value


def _number(value: Any, ctx: Coercion, path: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CoercionError(f"{path}: expected a number, got {type(value).__name__}")
    return float(value)


def _string(value: Any, ctx: Coercion, path: str) -> Any:
    if not isinstance(value, str):
        raise CoercionError(f"{path}: expected a string, got {type(value).__name__}")
    return value


def _bytes(value: Any, ctx: Coercion, path: str) -> Any:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise CoercionError(f"{path}: expected bytes, got {type(value).__name__}")


def _decimal(value: Any, path: str) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool | float):
        raise CoercionError(f"{path}: money must be a decimal string or Decimal, not {type(value).__name__}")
    if isinstance(value, int | str):
        try:
            result = Decimal(value)
        except InvalidOperation:
            raise CoercionError(f"{path}: {value!r} is not a decimal") from None
        if not result.is_finite():
            raise CoercionError(f"{path}: {value!r} is not a finite decimal")
        return result
    raise CoercionError(f"{path}: expected a decimal, got {type(value).__name__}")


def _at_scale(value: Decimal, quantum: Decimal | None, scale: int | None, path: str) -> Decimal:
    """The decimal with exactly the schema's scale (`quantum`, 10 ** -scale: `1.500` -> `1.50` for scale 2: the
    Avro writer refuses any other scale); a value with more significant decimals than the scale is an error, never
    rounded."""
    if quantum is None:
        return value
    exact = value.quantize(quantum)
    if exact != value:
        raise CoercionError(f"{path}: {value} has more than {scale} decimals")
    return exact


def _day(value: Any, path: str) -> date | int:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise CoercionError(f"{path}: {value!r} is not an ISO 8601 date") from None
    raise CoercionError(f"{path}: expected a date, got {type(value).__name__}")


def _instant(value: Any, path: str) -> datetime | int:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise CoercionError(f"{path}: {value!r} is not an ISO 8601 timestamp") from None
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    else:
        raise CoercionError(f"{path}: expected a timestamp, got {type(value).__name__}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise CoercionError(f"{path}: timestamp {value!r} has no UTC offset")
    return moment.astimezone(UTC)
