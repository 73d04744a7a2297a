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

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class CoercionError(ValueError):
    """The document does not fit the schema."""


@dataclass
class Coercion:
    """Context of one conversion: named types seen so far and fields that were dropped."""

    named: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


def _full_name(schema: Mapping[str, Any], namespace: str | None) -> str:
    name = str(schema["name"])
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def convert(schema: Any, value: Any, ctx: Coercion, path: str, namespace: str | None = None) -> Any:
    """Convert `value` for `schema` (the raw JSON schema as in the .avsc file) at `path` (`"$"` for a whole
    document); `CoercionError` if it cannot be."""
    if isinstance(schema, list):
        return _union(schema, value, ctx, path, namespace)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _primitive(schema, None, value, path)
        named = ctx.named.get(schema) or ctx.named.get(f"{namespace}.{schema}")
        if named is None:
            raise CoercionError(f"{path}: unknown type {schema!r}")
        return convert(named, value, ctx, path, namespace)
    if not isinstance(schema, Mapping):
        raise CoercionError(f"{path}: unsupported schema {schema!r}")
    kind = schema["type"]
    if kind == "record":
        full = _full_name(schema, namespace)
        ctx.named[full] = schema
        return _record(schema, value, ctx, path, full.rpartition(".")[0] or None)
    if kind == "enum":
        ctx.named[_full_name(schema, namespace)] = schema
        if not isinstance(value, str) or value not in schema["symbols"]:
            raise CoercionError(f"{path}: {value!r} is not one of {', '.join(schema['symbols'])}")
        return value
    if kind == "array":
        if not isinstance(value, list | tuple):
            raise CoercionError(f"{path}: expected an array, got {type(value).__name__}")
        return [convert(schema["items"], item, ctx, f"{path}[{i}]", namespace) for i, item in enumerate(value)]
    if kind == "map":
        if not isinstance(value, Mapping):
            raise CoercionError(f"{path}: expected an object, got {type(value).__name__}")
        return {str(k): convert(schema["values"], v, ctx, f"{path}.{k}", namespace) for k, v in value.items()}
    if kind == "fixed":
        ctx.named[_full_name(schema, namespace)] = schema
        return _primitive("bytes", None, value, path)
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return _primitive(kind, schema.get("logicalType"), value, path, schema.get("scale"))
    return convert(kind, value, ctx, path, namespace)


def _union(branches: list[Any], value: Any, ctx: Coercion, path: str, namespace: str | None) -> Any:
    if value is None:
        if "null" in branches:
            return None
        raise CoercionError(f"{path}: is required")
    problems = []
    for branch in branches:
        if branch == "null":
            continue
        try:
            return convert(branch, value, ctx, path, namespace)
        except CoercionError as exc:
            problems.append(str(exc))
    raise CoercionError("; ".join(problems) or f"{path}: no branch accepts {value!r}")


def _record(schema: Mapping[str, Any], value: Any, ctx: Coercion, path: str, namespace: str | None) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise CoercionError(f"{path}: expected an object, got {type(value).__name__}")
    out: dict[str, Any] = {}
    names = set()
    for item in schema["fields"]:
        name = item["name"]
        names.add(name)
        where = name if path == "$" else f"{path}.{name}"
        if name in value:
            out[name] = convert(item["type"], value[name], ctx, where, namespace)
        elif "default" in item:
            out[name] = item["default"]
        elif _nullable(item["type"]):
            out[name] = None
        else:
            raise CoercionError(f"{where}: is required")
    for extra in value:
        if extra not in names:
            ctx.dropped.append(str(extra) if path == "$" else f"{path}.{extra}")
    return out


def _nullable(schema: Any) -> bool:
    return isinstance(schema, list) and "null" in schema


def _primitive(kind: str, logical: str | None, value: Any, path: str, scale: int | None = None) -> Any:
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return _at_scale(_decimal(value, path), scale, path)
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return _instant(value, path)
    if logical == "date" and kind == "int":
        return _day(value, path)
    if kind == "null":
        if value is not None:
            raise CoercionError(f"{path}: expected null")
        return None
    if kind == "boolean":
        if not isinstance(value, bool):
            raise CoercionError(f"{path}: expected a boolean, got {type(value).__name__}")
        return value
    if kind in ("int", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise CoercionError(f"{path}: expected an integer, got {type(value).__name__}")
        return value
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CoercionError(f"{path}: expected a number, got {type(value).__name__}")
        return float(value)
    if kind == "string":
        if not isinstance(value, str):
            raise CoercionError(f"{path}: expected a string, got {type(value).__name__}")
        return value
    if kind == "bytes":
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            return value.encode("utf-8")
        raise CoercionError(f"{path}: expected bytes, got {type(value).__name__}")
    raise CoercionError(f"{path}: unsupported type {kind}")


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


def _at_scale(value: Decimal, scale: int | None, path: str) -> Decimal:
    """The decimal with exactly the schema's scale (`1.500` -> `1.50` for scale 2: the Avro writer refuses any other
    scale); a value with more significant decimals than the scale is an error, never rounded."""
    if scale is None:
        return value
    exact = value.quantize(Decimal(1).scaleb(-scale))
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
