"""Every schema change stays backward compatible: the newest version of each topic reads data written with
every earlier version (Avro schema resolution), checked structurally and by decoding generated records.

Add `<topic>.v<N+1>.avsc` next to the old files and these tests cover it without change. A released version is
never edited (its data is on the topics): `RELEASED` pins each one's content, and a new version is added there.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import string
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import fastavro
import pytest

import schemas
from schemas import Codec, SchemaVersion

PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "double": {"double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}


def _raw(version: SchemaVersion) -> Any:
    return json.loads(version.path.read_text())


# -- structural check (reader = new schema, writer = old schema) ----------------------------------------------


def _full_name(schema: dict[str, Any], namespace: str) -> str:
    name = str(schema["name"])
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def _type_name(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema["type"])
    return str(schema)


class _Checker:
    """Collects the reasons the reader schema cannot read data of the writer schema."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.named: dict[str, Any] = {}

    def register(self, schema: Any, namespace: str = "") -> None:
        """Record every named type so references by name can be followed."""
        if isinstance(schema, list):
            for branch in schema:
                self.register(branch, namespace)
        elif isinstance(schema, dict):
            kind = schema["type"]
            if kind in ("record", "enum", "fixed"):
                full = _full_name(schema, namespace)
                self.named[full] = schema
                namespace = full.rpartition(".")[0]
            if kind == "record":
                for field in schema["fields"]:
                    self.register(field["type"], namespace)
            elif kind == "array":
                self.register(schema["items"], namespace)
            elif kind == "map":
                self.register(schema["values"], namespace)

    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema in self.named:
            return self.named[schema]
        if isinstance(schema, str):
            for full, named in self.named.items():
                if full.rsplit(".", 1)[-1] == schema:
                    return named
        return schema

    def matches(self, reader: Any, writer: Any, where: str) -> bool:
        """Whether reader can read writer (no problems recorded for a miss)."""
        saved = list(self.problems)
        self.check(reader, writer, where)
        ok = self.problems == saved
        self.problems = saved
        return ok

    def check(self, reader: Any, writer: Any, where: str) -> None:
        reader, writer = self.resolve(reader), self.resolve(writer)
        if isinstance(writer, list):
            for index, branch in enumerate(writer):
                self.check(reader, branch, f"{where}[writer branch {index}]")
            return
        if isinstance(reader, list):
            if not any(self.matches(branch, writer, where) for branch in reader):
                self.problems.append(f"{where}: no reader union branch reads writer type {_type_name(writer)}")
            return
        r_type, w_type = _type_name(reader), _type_name(writer)
        if w_type in PROMOTIONS:
            if r_type not in PROMOTIONS[w_type]:
                self.problems.append(f"{where}: writer {w_type} cannot be read as {r_type}")
            elif isinstance(reader, dict) or isinstance(writer, dict):
                self._logical(reader, writer, where)
            return
        if r_type != w_type:
            self.problems.append(f"{where}: writer {w_type} cannot be read as {r_type}")
            return
        if w_type in ("null", "boolean"):
            return
        if w_type == "array":
            self.check(reader["items"], writer["items"], f"{where}[]")
        elif w_type == "map":
            self.check(reader["values"], writer["values"], f"{where}{{}}")
        elif w_type in ("record", "enum", "fixed"):
            names = {reader["name"].rsplit(".", 1)[-1], *(a.rsplit(".", 1)[-1] for a in reader.get("aliases", []))}
            if writer["name"].rsplit(".", 1)[-1] not in names:
                self.problems.append(f"{where}: writer {writer['name']} is not the reader's {reader['name']}")
            elif w_type == "enum":
                missing = set(writer["symbols"]) - set(reader["symbols"])
                if missing and "default" not in reader:
                    self.problems.append(f"{where}: reader lost enum symbols {sorted(missing)} and has no default")
            elif w_type == "fixed" and reader["size"] != writer["size"]:
                self.problems.append(f"{where}: fixed size changed")
            elif w_type == "record":
                self._record(reader, writer, where)

    def _logical(self, reader: Any, writer: Any, where: str) -> None:
        r_logical = reader.get("logicalType") if isinstance(reader, dict) else None
        w_logical = writer.get("logicalType") if isinstance(writer, dict) else None
        if r_logical != w_logical:
            self.problems.append(f"{where}: logical type changed from {w_logical} to {r_logical}")
        elif w_logical == "decimal" and (reader.get("scale", 0), reader["precision"]) != (
            writer.get("scale", 0),
            writer["precision"],
        ):
            # A changed scale silently multiplies every amount by a power of ten.
            self.problems.append(f"{where}: decimal precision/scale changed")

    def _record(self, reader: dict[str, Any], writer: dict[str, Any], where: str) -> None:
        written = {field["name"]: field for field in writer["fields"]}
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            source = next((written[name] for name in names if name in written), None)
            if source is None:
                if "default" not in field:
                    self.problems.append(f"{where}.{field['name']}: new field without a default")
                continue
            self.check(field["type"], source["type"], f"{where}.{field['name']}")


def compatibility_problems(reader: Any, writer: Any) -> list[str]:
    """Why `reader` cannot read data written with `writer` (empty when it can)."""
    checker = _Checker()
    checker.register(writer)
    checker.register(reader)
    checker.check(reader, writer, str(reader.get("name", "")))
    return checker.problems


# -- generated records --------------------------------------------------------------------------------------


class _Generator:
    """A valid datum for any schema, different for each seed, covering every union branch and enum symbol."""

    def __init__(self, schema: Any, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.checker = _Checker()
        self.checker.register(schema)

    def datum(self, schema: Any) -> Any:
        schema = self.checker.resolve(schema)
        if isinstance(schema, list):
            return self.datum(schema[self.seed % len(schema)] if self.seed < 4 else self.rng.choice(schema))
        kind = _type_name(schema)
        logical = schema.get("logicalType") if isinstance(schema, dict) else None
        if logical == "decimal":
            cents = self.rng.randrange(-(10**12), 10**12)
            return Decimal(cents).scaleb(-schema.get("scale", 0))
        if logical == "date":
            return date(2020, 1, 1) + timedelta(days=self.rng.randrange(0, 20_000))
        if logical == "timestamp-millis":
            base = datetime(2020, 1, 1, tzinfo=UTC)
            return base + timedelta(milliseconds=self.rng.randrange(0, 10**12))
        if kind == "record":
            return {field["name"]: self.datum(field["type"]) for field in schema["fields"]}
        if kind == "enum":
            return schema["symbols"][(self.seed + self.rng.randrange(2)) % len(schema["symbols"])]
        if kind == "array":
            return [self.datum(schema["items"]) for _ in range(self.rng.randrange(0, 4))]
        if kind == "map":
            return {f"k{i}": self.datum(schema["values"]) for i in range(self.rng.randrange(0, 3))}
        simple: dict[str, Callable[[], Any]] = {
            "null": lambda: None,
            "boolean": lambda: self.rng.random() < 0.5,
            "int": lambda: self.rng.randrange(-(2**31), 2**31),
            "long": lambda: self.rng.randrange(-(2**63), 2**63),
            "float": lambda: float(self.rng.randrange(1000)),
            "double": lambda: self.rng.random(),
            "string": lambda: "".join(self.rng.choices(string.printable + "ñé€", k=self.rng.randrange(0, 12))),
            "bytes": lambda: self.rng.randbytes(self.rng.randrange(0, 12)),
        }
        return simple[kind]()


SEEDS = range(24)
PAIRS = [
    pytest.param(topic, old.version, id=f"{topic}-v{old.version}-to-v{schemas.schema(topic).version}")
    for topic in schemas.TOPICS
    for old in schemas.versions(topic)
]


@pytest.mark.parametrize(("topic", "old_version"), PAIRS)
def test_newest_version_is_structurally_able_to_read_every_older_version(topic: str, old_version: int) -> None:
    newest = schemas.schema(topic)
    old = schemas.schema(topic, old_version)
    assert compatibility_problems(_raw(newest), _raw(old)) == []


@pytest.mark.parametrize(("topic", "old_version"), PAIRS)
def test_newest_version_decodes_records_written_with_every_older_version(topic: str, old_version: int) -> None:
    old = schemas.schema(topic, old_version)
    writer = Codec(topic, write_version=old_version)
    reader = Codec(topic)
    new_fields = {field["name"] for field in _raw(schemas.schema(topic))["fields"]}
    for seed in SEEDS:
        record = _Generator(_raw(old), seed).datum(_raw(old))
        decoded = reader.decode(writer.encode(record))
        # Every field that both versions have keeps its value; the others got their defaults.
        assert {k: v for k, v in decoded.items() if k in record} == {k: v for k, v in record.items() if k in new_fields}
        assert set(decoded) == new_fields


def test_versions_are_numbered_without_gaps() -> None:
    for topic in schemas.TOPICS:
        numbers = [item.version for item in schemas.versions(topic)]
        assert numbers == list(range(1, len(numbers) + 1)), topic


# -- the checks themselves catch breaking changes -------------------------------------------------------------


def _evolved(change: str) -> dict[str, Any]:
    raw = _raw(schemas.schema("vrp.payments", 1))
    if change == "optional field":
        raw["fields"].append({"name": "channel", "type": ["null", "string"], "default": None})
    elif change == "required field":
        raw["fields"].append({"name": "channel", "type": "string"})
    elif change == "scale":
        raw["fields"][2]["type"] = {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 3}
    elif change == "type":
        raw["fields"][0]["type"] = "long"
    elif change == "enum":
        raw = _raw(schemas.schema("vrp.status", 1))
        raw["fields"][3]["type"]["symbols"].remove("EXPIRED")
    return dict(raw)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("required field", "new field without a default"),
        ("scale", "decimal precision/scale changed"),
        ("type", "writer string cannot be read as long"),
        ("enum", "lost enum symbols ['EXPIRED']"),
    ],
)
def test_checker_flags_breaking_changes(change: str, problem: str) -> None:
    topic = "vrp.status" if change == "enum" else "vrp.payments"
    problems = compatibility_problems(_evolved(change), _raw(schemas.schema(topic, 1)))
    assert any(problem in item for item in problems), problems


def test_checker_accepts_an_optional_field_and_fastavro_agrees() -> None:
    old = _raw(schemas.schema("vrp.payments", 1))
    new = _evolved("optional field")
    assert compatibility_problems(new, old) == []
    record = _Generator(old, 1).datum(old)
    data = schemas.encode("vrp.payments", record, version=1)
    body = io.BytesIO(data[schemas.HEADER_SIZE :])
    decoded = fastavro.schemaless_reader(body, fastavro.parse_schema(old), fastavro.parse_schema(new))
    assert decoded == {**record, "channel": None}


def test_fastavro_refuses_what_the_checker_flags() -> None:
    old = _raw(schemas.schema("vrp.payments", 1))
    record = _Generator(old, 2).datum(old)
    data = schemas.encode("vrp.payments", record, version=1)
    with pytest.raises(fastavro.read.SchemaResolutionError):
        fastavro.schemaless_reader(
            io.BytesIO(data[schemas.HEADER_SIZE :]),
            fastavro.parse_schema(old),
            fastavro.parse_schema(_evolved("required field")),
        )


# The content of every released version (SHA-256 of its JSON with sorted keys and no whitespace: reformatting
# is fine, an edit is not). The wire fingerprint alone would miss edits to defaults, docs and decimal scales,
# which Avro's Parsing Canonical Form drops.
RELEASED = {
    ("payroll.batches", 1): "df1e215b1e6ca57bff99d587a4e6692c108c1f274add5991e92bc9769a9b0354",
    ("payroll.batches", 2): "c345602f555282d7f50abefc4cf6b551c0b7c9aefa1d573f5b70ec0dc31cb5fd",
    ("dispersion.status", 1): "f4dde67164403b98b07368d80842148b2f355a689a02547bc2dae27d20e24af8",
    ("dispersion.status", 2): "9b91cc5faab1286f114fdbf1845a1e1a49869a8f68d6b9dd5f703bd4135ffb35",
    ("dispersion.status", 3): "2725a318fcf064e61d07040998f15359637096a818966da3310d9801ed08b63f",
    ("payroll.batches.dlq", 1): "d85341e52cd8ef7218e2bf1b06c2e2953408d540aee4bdb234982954c946882a",
    ("vrp.mandates", 1): "76004b2017a96ecedaab9ff75cc3d630d16f4aa20cf2f276838a48a146fb65e5",
    ("vrp.payments", 1): "4fb60f73087e75f33600c6870f3ec4f5e4209779ffa7fb043c28b899131a07f5",
    ("vrp.status", 1): "847e1215dd216986d455dce7fd54c9a54422e4759d07d4c132f85583572ed930",
    ("dispersion.transfers", 1): "e896caef6df9d86d295019e564b7f6863fdb1150b77107896fcca6bc30e95945",
}


def _content_digest(version: SchemaVersion) -> str:
    body = json.dumps(_raw(version), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def test_released_versions_are_never_edited_and_every_version_is_pinned() -> None:
    found = {
        (topic, item.version): _content_digest(item) for topic in schemas.TOPICS for item in schemas.versions(topic)
    }
    edited = sorted(key for key in RELEASED if found.get(key) != RELEASED[key])
    assert not edited, f"released schema versions changed (add a new version instead): {edited}"
    assert set(found) == set(RELEASED), "pin each new schema version in RELEASED when it is released"
