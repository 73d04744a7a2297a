"""The sandbox's document store: memory and SQLite give back the same values, and a read is a copy."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.jsonutil import dumps, loads
from sandbox.store import Store

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def identical(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (a Decimal with the same digits and exponent)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(values)
def test_memory_gives_back_what_the_json_file_would(value: Any) -> None:
    try:
        expected = loads(dumps(value))  # what a SQLite-backed sandbox reads back
    except (TypeError, ValueError):
        return  # not JSON (a lone surrogate): refused by both, tested below
    memory = Store()
    memory.put("kind", "id", {"v": value})
    assert identical(memory.get("kind", "id"), {"v": expected})


def test_sqlite_and_memory_agree_on_a_payment_document(tmp_path: Path) -> None:
    doc = {"Amount": Decimal("1500.50"), "Whole": Decimal("100"), "At": 1.5e9, "Tags": ("a", "b"), "N": 7}
    memory, file = Store(), Store(str(tmp_path / "sandbox.sqlite"))
    for store in (memory, file):
        store.put("payment", "p-1", doc)
    assert identical(memory.get("payment", "p-1"), file.get("payment", "p-1"))
    assert memory.get("payment", "p-1") == {
        "Amount": Decimal("1500.50"),
        "Whole": 100,
        "At": Decimal("1500000000.0"),
        "Tags": ["a", "b"],
        "N": 7,
    }
    file.close()


def test_a_read_is_a_copy_and_so_is_a_write() -> None:
    store = Store()
    doc: dict[str, Any] = {"Data": {"Status": "AwaitingUpload", "Items": [1, 2]}}
    store.put("consent", "c-1", doc)
    doc["Data"]["Status"] = "changed by the caller after the write"
    read = store.get("consent", "c-1")
    assert read is not None
    read["Data"]["Items"].append(3)
    assert store.get("consent", "c-1") == {"Data": {"Status": "AwaitingUpload", "Items": [1, 2]}}
    assert [value for _, value in store.items("consent")] == [{"Data": {"Status": "AwaitingUpload", "Items": [1, 2]}}]


@pytest.mark.parametrize("bad", [{"text": "\ud800"}, {"n": 2**64}, {"x": object()}])
def test_what_json_cannot_hold_is_refused_in_memory_too(bad: dict[str, Any]) -> None:
    store = Store()
    with pytest.raises((TypeError, ValueError)):
        store.put("kind", "id", bad)
    assert store.get("kind", "id") is None
