"""A dead letter's record made readable (processor.api.letter_record): an Avro record decoded, UTF-8 bytes as text
(JSON pretty-printed, accounts masked), anything else as hex; `dlq show` prints the same forms."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from processor_support import payroll_batch

import schemas
from processor.api.letter_record import readable
from processor.cli.dlq import record_lines


def test_an_avro_record_is_decoded_with_accounts_masked() -> None:
    record = payroll_batch("B-1")
    view = readable(schemas.Codec("payroll.batches").encode(record), "demo.x1.payroll.batches")
    assert view.decoded is not None and view.text is None and view.hex is None
    decoded = json.loads(view.decoded)
    assert decoded["batch_id"] == "B-1"
    assert decoded["transactions"][0]["destination_account"]["account_number"] == "****0300"


def test_json_text_that_is_not_of_the_schema_reads_as_text_with_accounts_masked() -> None:
    value = json.dumps({"batch_id": "B-2", "origin": {"account_number": "100200300"}, "amount": "10.5"}).encode()
    view = readable(value, "payroll.batches")
    assert view.decoded is None and view.hex is None and view.text is not None
    assert '"batch_id": "B-2"' in view.text and "****0300" in view.text and "100200300" not in view.text
    plain = readable("nómina de noviembre, sin formato".encode(), "payroll.batches")
    assert plain.text == "nómina de noviembre, sin formato"


def test_bytes_that_are_neither_are_hex_and_dlq_show_prints_each_form() -> None:
    view = readable(b"\x00\x01not an avro record\xff", "payroll.batches")
    assert (
        view.decoded is None
        and view.text is None
        and view.hex == "0001 6e6f 7420 616e 2061 7672 6f20 7265\n636f 7264 ff"
    )
    view.key = "poison-1"
    lines = record_lines(view.as_dict())
    assert lines[:2] == ["  key: poison-1", "  record (does not decode, not text; hex, 21 bytes):"]
    assert lines[2] == "    0001 6e6f 7420 616e 2061 7672 6f20 7265"
    text = readable(b'{"a": 1}', "payroll.batches").as_dict()
    assert record_lines(text)[:3] == [
        "  key: none",
        "  record (not of the topic's schema; UTF-8 text, 8 bytes):",
        "    {",
    ]
    assert record_lines({"unreadable": "no Kafka here"}) == ["  record: not readable here (no Kafka here)"]


def test_instants_in_a_decoded_record_are_iso_8601_utc_with_milliseconds() -> None:
    record = payroll_batch("B-3")
    record["requested_at"] = datetime(2026, 11, 26, 10, 50, 8, 675000, tzinfo=UTC)
    view = readable(schemas.Codec("payroll.batches").encode(record), "payroll.batches")
    assert view.decoded is not None
    assert '"requested_at": "2026-11-26T10:50:08.675Z"' in view.decoded, view.decoded
    assert "+00:00" not in view.decoded
