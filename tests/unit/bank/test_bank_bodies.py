"""A1 and A3's request bodies are the same bytes whichever form `Data.Initiation` is given in: data, JSON bytes, or
JSON bytes in parts (sent in parts: the file is never copied into the body)."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from processor.bank.file_payments import _initiation_body
from processor.bank.models import loads

INITIATION = {
    "SupplementaryData": {"data": {"transaction": [{"amount": Decimal("10.50"), "concept": "Nómina"}]}},
    "FileType": "UK.OBIE.PaymentInitiation.4.0",
    "ControlSum": Decimal("10.50"),
}


def _built(members: dict[str, str], initiation: Any) -> bytes:
    """The body as one attempt sends it: the parts the builder the call is given, one after the other."""
    build = _initiation_body(members, initiation)
    assert callable(build)
    parts = asyncio.run(build())
    assert isinstance(parts, tuple) and asyncio.run(build()) == parts  # every attempt sends the same bytes
    return b"".join(parts)


def test_a_file_given_in_parts_is_sent_from_those_bytes() -> None:
    file = b'{"SupplementaryData": {"data": {"transaction": []}}, "FileType": "x"}'
    build = _initiation_body({}, (file,))
    assert callable(build)
    parts = asyncio.run(build())
    assert isinstance(parts, tuple) and any(part is file for part in parts)  # the caller's bytes, not a copy


@pytest.mark.parametrize("members", [{}, {"ConsentId": "PFC-1"}], ids=["A1", "A3"])
def test_every_form_of_the_initiation_gives_the_same_body(members: dict[str, str]) -> None:
    from_data = _built(members, INITIATION)
    inner = from_data[from_data.index(b'"Initiation":') + len(b'"Initiation":') : -2]
    assert loads(inner) == INITIATION
    assert _built(members, inner) == from_data
    parts = (inner[:10], inner[10:25], inner[25:])
    assert _built(members, parts) == from_data
    assert loads(from_data) == {"Data": {**members, "Initiation": INITIATION}}
    assert b'"ControlSum":10.50' in from_data  # amounts stay exact JSON numbers


@pytest.mark.parametrize("bad", [b"[1]", (b" 1", b"}"), ()], ids=["array", "number", "empty"])
def test_bytes_that_do_not_start_an_object_are_refused(bad: bytes | tuple[bytes, ...]) -> None:
    with pytest.raises(TypeError, match="must be a JSON object"):
        _initiation_body({}, bad)
