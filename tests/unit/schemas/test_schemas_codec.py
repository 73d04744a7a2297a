"""The topic schemas and the single-object codec: exact round trips, the wire format, clear errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import fastavro
import pytest

import schemas
from processor.domain.batch import batch_from_dict
from schemas import Codec, DecodeError, EncodeError, UnknownSchemaError, UnknownTopicError

AT = datetime(2026, 1, 31, 23, 59, 58, 123000, tzinfo=UTC)


def _batch() -> dict[str, Any]:
    return {
        "batch_id": "ERP-2026-01-0001",
        "integration": "bank-gt",
        "file_reference": "PAYROLL-JAN",
        "origin_account": {"account_number": "3001234567", "account_type": "MONETARY", "currency": "GTQ"},
        "transactions": [
            {
                "destination_account": {
                    "account_number": "4009876543",
                    "account_type": "SAVINGS",
                    "currency": "GTQ",
                    "email": "ana@example.com",
                },
                "amount": Decimal("1234567890123456.78"),  # 18 digits: the largest the schema holds
                "concept": "Salario enero",
                "employee_reference": "E-001",
            },
            {
                "destination_account": {
                    "account_number": "4000000001",
                    "account_type": "SAVINGS",
                    "currency": "GTQ",
                    "email": "luis@example.com",
                },
                "amount": Decimal("0.01"),
                "concept": "Bono",
                "employee_reference": None,
            },
        ],
        "requested_at": AT,
        "source": "erp-export",
        "execute_on": date(2026, 1, 30),  # v2: a scheduled batch
    }


def _status() -> dict[str, Any]:
    return {
        "event_id": "0b9f6f0e-7a4c-4df4-9c61-51a1c4a1d2e3",
        "batch_id": "ERP-2026-01-0001",
        "status": "COMPLETED",
        "occurred_at": AT,
        "consent_id": "pay-fi-1f0c",
        "file_payment_id": "fp-9a8b",
        "authorization_url": None,
        "number_of_transactions": 2,
        "control_sum": Decimal("1234567890123456.79"),
        "currency": "GTQ",
        "bank_status": "InitiationCompleted",
        "reason": None,
        "transaction_results": [
            {
                "index": 0,
                "employee_reference": "E-001",
                "amount": Decimal("1234567890123456.78"),
                "status": "COMPLETED",
                "reason": None,
            },
            {"index": 1, "employee_reference": None, "amount": Decimal("0.01"), "status": "FAILED", "reason": "closed"},
        ],
        # v2: the outcome, and what a retry or a scheduled batch carries
        "transfers_completed": 1,
        "transfers_failed": 1,
        "amount_completed": Decimal("1234567890123456.78"),
        "amount_failed": Decimal("0.01"),
        "retry_of": "ERP-2026-01-0000",
        "execute_on": date(2026, 1, 30),
        # v3: the changed-account review
        "changed_accounts": [
            {"index": 1, "employee_reference": "E-002", "previous_account": "****0301", "account": "****0666"}
        ],
        "reviewed_by": "bob",
        # v3: the attempt, a withdrawal, a duplicate-payroll hold and who confirmed it
        "attempt": 2,
        "withdrawn_by": None,
        "duplicate_of": "ERP-2025-12-0001",
        "duplicate_confirmed_by": "ana",
    }


def _dead_letter() -> dict[str, Any]:
    return {
        "original_value": b"\x00\xffnot avro",
        "original_key": b"ERP-1",
        "original_headers": [{"key": "trace", "value": b"\x01\x02"}, {"key": "empty", "value": None}],
        "topic": "payroll.batches",
        "partition": 3,
        "offset": 2**40,
        "original_timestamp": AT,
        "reason": "not Avro single-object encoding",
        "batch_id": None,
        "occurred_at": AT,
    }


def _mandate() -> dict[str, Any]:
    return {
        "mandate_id": "M-1",
        "integration": "bank-uk",
        "currency": "GBP",
        "creditor_account": {
            "scheme_name": "UK.OBIE.SortCodeAccountNumber",
            "identification": "30949330000010",
            "name": "Savings pot",
        },
        "max_individual_amount": Decimal("250.00"),
        "periodic_limits": [
            {"amount": Decimal("500.50"), "period_type": "Week", "period_alignment": "Calendar"},
            {"amount": Decimal("1000"), "period_type": "Month", "period_alignment": "Consent"},
        ],
        "valid_from": AT,
        "valid_to": datetime(2027, 1, 31, 0, 0, 0, 1000, tzinfo=UTC),
        "reference": "SWEEP-1",
        "description": None,
        "requested_at": AT,
        "source": "crm",
    }


def _payment() -> dict[str, Any]:
    return {
        "payment_id": "P-1",
        "mandate_id": "M-1",
        "amount": Decimal("99.99"),
        "currency": "GBP",
        "end_to_end_id": "E2E-1",
        "remittance": "January sweep",
        "requested_at": AT,
    }


def _vrp_status() -> dict[str, Any]:
    return {
        "event_id": "e-1",
        "mandate_id": "M-1",
        "payment_id": "P-1",
        "status": "LIMIT_EXCEEDED",
        "occurred_at": AT,
        "consent_id": "vrp-1",
        "domestic_vrp_id": None,
        "authorization_url": None,
        "amount": Decimal("-0.05"),
        "currency": "GBP",
        "bank_status": None,
        "reason": "PeriodicLimits[Week] would be exceeded",
    }


def _transfer() -> dict[str, Any]:
    return {
        "event_id": "3f1e0c52-2d36-5f0b-a0f4-6a0d4d7a1c11",
        "batch_id": "F110-01/PAY-A",
        "index": 2,
        "employee_reference": "E2E-3",
        "end_to_end_id": "E2E-3",
        "amount": Decimal("750.25"),
        "currency": "GTQ",
        "origin_account": "100200300",
        "destination_account": "200109902",
        "outcome": "FAILED",
        "reason_code": "AC04",
        "reason": "ClosedAccountNumber",
        "retry_of": None,
        "original_index": None,
        "occurred_at": AT,
    }


SAMPLES = {
    "payroll.batches": _batch,
    "dispersion.status": _status,
    "payroll.batches.dlq": _dead_letter,
    "vrp.mandates": _mandate,
    "vrp.payments": _payment,
    "vrp.status": _vrp_status,
    "dispersion.transfers": _transfer,
}


def test_every_topic_has_a_sample() -> None:
    assert set(SAMPLES) == set(schemas.TOPICS)


@pytest.mark.parametrize("topic", sorted(SAMPLES))
def test_round_trip_is_exact(topic: str) -> None:
    record = SAMPLES[topic]()
    data = schemas.encode(topic, record)
    assert schemas.decode(topic, data) == record
    # Decimals come back exact, with the schema's scale; never floats.
    decoded = schemas.decode(topic, data)
    for value in _leaves(decoded):
        assert not isinstance(value, float)
        if isinstance(value, Decimal):
            assert value.as_tuple().exponent == -2


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def test_money_keeps_cents_and_timestamps_keep_milliseconds() -> None:
    decoded = schemas.decode("vrp.payments", schemas.encode("vrp.payments", _payment()))
    assert decoded["amount"] == Decimal("99.99")
    assert str(decoded["amount"]) == "99.99"
    assert decoded["requested_at"] == AT
    assert decoded["requested_at"].tzinfo is not None
    assert decoded["requested_at"].microsecond == 123000


def test_integral_amount_gets_two_decimals() -> None:
    decoded = schemas.decode("vrp.mandates", schemas.encode("vrp.mandates", _mandate()))
    assert str(decoded["periodic_limits"][1]["amount"]) == "1000.00"


def test_wire_format_is_avro_single_object_encoding() -> None:
    record = _payment()
    data = schemas.encode("vrp.payments", record)
    version = schemas.schema("vrp.payments")
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == version.fingerprint
    # The fingerprint is CRC-64-AVRO of the Parsing Canonical Form, little-endian on the wire.
    canonical = fastavro.schema.to_parsing_canonical_form(json.loads(version.path.read_text()))
    assert data[2:10].hex() == fastavro.schema.fingerprint(canonical, "CRC-64-AVRO")
    # The body is plain Avro binary: fastavro alone reads it.
    body = fastavro.schemaless_reader(
        io.BytesIO(data[10:]), fastavro.parse_schema(json.loads(version.path.read_text()))
    )
    assert body == record


def test_fingerprint_matches_the_avro_reference_value() -> None:
    # The Avro project's published CRC-64-AVRO fingerprint of the schema "null" is 7195948357588979594.
    assert int.from_bytes(schemas.fingerprint("null"), "little") == 7195948357588979594


def test_a_team_with_fastavro_alone_can_write_what_we_read() -> None:
    path = schemas.schema("vrp.payments").path
    raw = json.loads(path.read_text())
    canonical = fastavro.schema.to_parsing_canonical_form(raw)
    out = io.BytesIO()
    out.write(b"\xc3\x01" + bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO")))
    fastavro.schemaless_writer(out, fastavro.parse_schema(raw), _payment())
    assert schemas.decode("vrp.payments", out.getvalue()) == _payment()


def test_schemas_package_imports_nothing_of_the_processor() -> None:
    code = (
        "import sys, schemas; schemas.versions('payroll.batches'); "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('processor', 'sandbox', 'confluent_kafka')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_fingerprints_are_unique_across_all_schemas() -> None:
    # A new version must change the canonical form; two versions with one fingerprint could not be told apart.
    seen: dict[bytes, str] = {}
    for topic in schemas.TOPICS:
        for version in schemas.versions(topic):
            assert version.fingerprint not in seen, f"{version.path} and {seen.get(version.fingerprint)}"
            seen[version.fingerprint] = str(version.path)


# -- errors -------------------------------------------------------------------------------------------------


def test_bad_magic_is_a_clear_error() -> None:
    data = schemas.encode("vrp.payments", _payment())
    with pytest.raises(DecodeError, match=r"not Avro single-object encoding \(starts with 7b22"):
        schemas.decode("vrp.payments", b'{"payment_id": "P-1", "amount": 1}')
    with pytest.raises(DecodeError, match="expected c301"):
        schemas.decode("vrp.payments", b"\x00\x01" + data[2:])


def test_too_short_is_a_clear_error() -> None:
    with pytest.raises(DecodeError, match="too short"):
        schemas.decode("payroll.batches", b"\xc3\x01\x00")
    with pytest.raises(DecodeError, match="too short"):
        schemas.decode("payroll.batches", b"")


def test_unknown_fingerprint_names_the_known_versions() -> None:
    data = schemas.encode("vrp.payments", _payment())
    forged = data[:2] + bytes(8) + data[10:]
    with pytest.raises(UnknownSchemaError, match=r"unknown writer schema fingerprint 0000000000000000 \(known: v1="):
        schemas.decode("vrp.payments", forged)


def test_another_topics_record_is_refused() -> None:
    data = schemas.encode("payroll.batches", _batch())
    with pytest.raises(UnknownSchemaError, match=r"dispersion\.status"):
        schemas.decode("dispersion.status", data)


def test_truncated_body_is_a_clear_error() -> None:
    data = schemas.encode("payroll.batches", _batch())
    with pytest.raises(DecodeError, match="corrupt body"):
        schemas.decode("payroll.batches", data[:-5])


def test_trailing_bytes_are_refused() -> None:
    data = schemas.encode("vrp.payments", _payment())
    with pytest.raises(DecodeError, match="2 unexpected bytes"):
        schemas.decode("vrp.payments", data + b"\x00\x00")


def test_bad_enum_index_is_a_decode_error() -> None:
    record = _status()
    record["transaction_results"] = None
    data = bytearray(schemas.encode("dispersion.status", record))
    # After the header: event_id and batch_id (length-prefixed strings), then the enum index (zigzag varint).
    position = 10
    for _ in range(2):
        length = data[position] >> 1
        position += 1 + length
    assert data[position] == 2 * 6  # COMPLETED is symbol 6
    data[position] = 2 * 40
    with pytest.raises(DecodeError):
        schemas.decode("dispersion.status", bytes(data))


def test_more_than_two_decimals_is_refused() -> None:
    record = _payment()
    record["amount"] = Decimal("10.001")
    with pytest.raises(EncodeError, match=r"vrp\.payments v1"):
        schemas.encode("vrp.payments", record)


def test_float_money_is_refused() -> None:
    record = _payment()
    record["amount"] = 10.5
    with pytest.raises(EncodeError):
        schemas.encode("vrp.payments", record)


def test_unknown_and_missing_fields_are_refused() -> None:
    record = _payment()
    record["amonut"] = Decimal("1.00")
    with pytest.raises(EncodeError, match="amonut"):
        schemas.encode("vrp.payments", record)
    record = _payment()
    del record["end_to_end_id"]
    with pytest.raises(EncodeError, match="end_to_end_id"):
        schemas.encode("vrp.payments", record)


def test_optional_fields_may_be_left_out() -> None:
    record = _payment()
    del record["remittance"]
    assert schemas.decode("vrp.payments", schemas.encode("vrp.payments", record))["remittance"] is None


def test_bad_enum_symbol_is_refused() -> None:
    record = _vrp_status()
    record["status"] = "PAID"
    with pytest.raises(EncodeError):
        schemas.encode("vrp.status", record)


def test_unknown_topic() -> None:
    with pytest.raises(UnknownTopicError, match=r"payroll\.batch'"):
        Codec("payroll.batch")
    with pytest.raises(UnknownTopicError, match="no schema version 99"):
        schemas.schema("payroll.batches", 99)


def test_the_parsed_schema_is_usable_by_fastavro() -> None:
    parsed = schemas.schema("payroll.batches").schema
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, _batch())
    assert fastavro.schemaless_reader(io.BytesIO(out.getvalue()), parsed) == _batch()


def test_a_v1_batch_decodes_as_v2_without_execute_on_and_parses_unscheduled() -> None:
    record = _batch()
    del record["execute_on"]
    data = schemas.encode("payroll.batches", record, version=1)
    assert schemas.codec("payroll.batches").writer_of(data) == schemas.schema("payroll.batches", 1)
    decoded = schemas.decode("payroll.batches", data)
    assert decoded["execute_on"] is None
    assert batch_from_dict(decoded).execute_on is None


def test_a_v2_batch_carries_its_execute_on_as_a_date() -> None:
    data = schemas.encode("payroll.batches", _batch())
    assert schemas.codec("payroll.batches").writer_of(data) == schemas.schema("payroll.batches", 2)
    assert batch_from_dict(schemas.decode("payroll.batches", data)).execute_on == date(2026, 1, 30)
