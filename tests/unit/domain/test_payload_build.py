"""The file payload: every field of the spec's table, FileHash per DESIGN.md, the Initiation and the upload body."""

from __future__ import annotations

import base64
import hashlib
import json
import tracemalloc
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson
import pytest
import rfc8785

from processor.domain.batch import OriginAccount, PayrollBatch, Transfer, loads_exact
from processor.domain.canonical import canonicalize, canonicalize_pure
from processor.domain.payload import (
    FILE_TYPE,
    PayloadSettings,
    _render,
    build_file_payload,
    file_facts,
    file_hash,
    prepare_file_payload,
)
from processor.domain.validation import InvalidBatchError, Reason, validated

CONSENT_ID = "pay-fi-6f1c2b9e-8a54-4b1e-9d7a-2f0c3e4d5a6b"


def sample_batch(**changes: Any) -> PayrollBatch:
    base = PayrollBatch(
        batch_id="erp-1",
        integration="bank-gt",
        file_reference="PAYROLL-2024-11",
        origin=OriginAccount("0100123456", "MONETARY", "GTQ"),
        transactions=(
            Transfer("3000000001", "SAVINGS", "GTQ", "ana@example.com", Decimal("1500.50"), "Planilla noviembre"),
            Transfer("3000000002", "MONETARY", "GTQ", "luis@example.com", Decimal("100.00"), "Bonificación", "E-2"),
            Transfer("3000000003", "SAVINGS", "GTQ", "eva@example.com", Decimal("0.10"), 'Pago "extra" 2/2'),
        ),
        requested_at=datetime(2024, 11, 30, tzinfo=UTC),
        source="test",
    )
    return replace(base, **changes)


# The payload above in canonical form, written out by hand from the spec's table and RFC 8785.
EXPECTED_CANONICAL = (
    '{"data":{"transaction":['
    '{"destinationAccount":{"accountNumber":"3000000001","accountType":"SAVINGS","currency":"GTQ",'
    '"email":"ana@example.com"},'
    '"originAccount":{"accountNumber":"0100123456","accountType":"MONETARY","currency":"GTQ"},'
    '"transferInfo":{"concept":"Planilla noviembre","debitType":"D","executionType":"ONLINE","reference":"",'
    '"transactionAmount":1500.5,"transactionType":"THIRD_PROVIDER"}},'
    '{"destinationAccount":{"accountNumber":"3000000002","accountType":"MONETARY","currency":"GTQ",'
    '"email":"luis@example.com"},'
    '"originAccount":{"accountNumber":"0100123456","accountType":"MONETARY","currency":"GTQ"},'
    '"transferInfo":{"concept":"Bonificación","debitType":"D","executionType":"ONLINE","reference":"",'
    '"transactionAmount":100,"transactionType":"THIRD_PROVIDER"}},'
    '{"destinationAccount":{"accountNumber":"3000000003","accountType":"SAVINGS","currency":"GTQ",'
    '"email":"eva@example.com"},'
    '"originAccount":{"accountNumber":"0100123456","accountType":"MONETARY","currency":"GTQ"},'
    '"transferInfo":{"concept":"Pago \\"extra\\" 2/2","debitType":"D","executionType":"ONLINE","reference":"",'
    '"transactionAmount":0.1,"transactionType":"THIRD_PROVIDER"}}'
    "]}}"
).encode()


def _floats(value: Any) -> Any:
    """For the rfc8785 oracle: amounts here are exact doubles' texts, so float() keeps them."""
    if isinstance(value, Decimal):
        assert Decimal(repr(float(value))) == value
        return float(value)
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return value


def test_canonical_bytes_and_hash_are_the_known_answer() -> None:
    payload = prepare_file_payload(sample_batch())
    assert payload.canonical == EXPECTED_CANONICAL
    assert payload.file_hash == base64.b64encode(hashlib.sha256(EXPECTED_CANONICAL).digest()).decode()
    assert payload.file_hash == file_hash(EXPECTED_CANONICAL)
    assert len(base64.b64decode(payload.file_hash)) == 32


def test_hash_matches_the_rfc8785_oracle_and_our_general_encoder() -> None:
    payload = prepare_file_payload(sample_batch())
    as_dict = payload.to_dict()
    assert rfc8785.dumps(_floats(as_dict)) == payload.canonical
    assert canonicalize(as_dict) == payload.canonical


def test_every_field_of_the_spec_table() -> None:
    payload = prepare_file_payload(sample_batch())
    rows = payload.to_dict()["data"]["transaction"]
    assert len(rows) == 3
    first = rows[0]
    assert first == {
        "originAccount": {"accountNumber": "0100123456", "accountType": "MONETARY", "currency": "GTQ"},
        "destinationAccount": {
            "accountNumber": "3000000001",
            "accountType": "SAVINGS",
            "currency": "GTQ",
            "email": "ana@example.com",
        },
        "transferInfo": {
            "transactionType": "THIRD_PROVIDER",
            "debitType": "D",
            "transactionAmount": Decimal("1500.50"),
            "executionType": "ONLINE",
            "concept": "Planilla noviembre",
            "reference": "",
        },
    }
    assert type(first["transferInfo"]["transactionAmount"]) is Decimal
    assert rows[1]["destinationAccount"]["accountType"] == "MONETARY"  # taken from the batch
    assert [r["transferInfo"]["concept"] for r in rows] == ["Planilla noviembre", "Bonificación", 'Pago "extra" 2/2']


def test_consent_metadata() -> None:
    payload = prepare_file_payload(sample_batch())
    assert payload.number_of_transactions == "3"
    assert payload.control_sum == Decimal("1600.60")
    assert type(payload.control_sum) is Decimal
    assert payload.file_reference == "PAYROLL-2024-11"
    initiation = payload.initiation()
    assert initiation == {
        "SupplementaryData": payload.to_dict(""),
        "FileType": FILE_TYPE,
        "FileHash": payload.file_hash,
        "FileReference": "PAYROLL-2024-11",
        "NumberOfTransactions": "3",
        "ControlSum": Decimal("1600.60"),
    }
    assert FILE_TYPE == "UK.OBIE.PaymentInitiation.4.0"


def test_initiation_parts_join_to_the_same_object_with_exact_numbers() -> None:
    payload = prepare_file_payload(sample_batch())
    parts = payload.initiation_parts()
    assert parts[1] is payload.canonical  # the file itself, not a copy
    raw = b"".join(parts)
    # The bytes orjson writes for the Initiation with the file embedded (what A1 and A3 sent before the parts).
    assert raw == orjson.dumps(
        {**payload.initiation(), "SupplementaryData": orjson.Fragment(payload.canonical), "ControlSum": 1600.6}
    )
    parsed = loads_exact(raw)
    assert parsed["ControlSum"] == Decimal("1600.6")
    assert parsed["SupplementaryData"] == payload.initiation()["SupplementaryData"]
    assert {k: v for k, v in parsed.items() if k != "SupplementaryData"} == {
        k: v for k, v in payload.initiation().items() if k != "SupplementaryData"
    }
    # What the bank does (DESIGN.md): canonicalise SupplementaryData and compare with FileHash.
    assert file_hash(canonicalize(parsed["SupplementaryData"])) == payload.file_hash


def test_upload_json_fills_every_reference_with_the_consent_id() -> None:
    payload = prepare_file_payload(sample_batch())
    body = payload.to_dict(CONSENT_ID)
    assert [r["transferInfo"]["reference"] for r in body["data"]["transaction"]] == [CONSENT_ID] * 3
    raw = payload.upload_json(CONSENT_ID)
    assert raw == canonicalize(body)
    assert loads_exact(raw) == body
    assert raw.count(f'"reference":"{CONSENT_ID}"'.encode()) == 3
    # Blanking the references again gives back the hashed bytes (the bank's check).
    for r in body["data"]["transaction"]:
        r["transferInfo"]["reference"] = ""
    assert file_hash(canonicalize(body)) == payload.file_hash
    assert payload.render("") is payload.canonical


def test_the_upload_is_the_canonical_file_with_its_references_filled_even_when_a_concept_quotes_them() -> None:
    concepts = [',"reference":"","transactionAmount":', 'x","reference":"","transactionAmount":1', "plain"]
    transfers = tuple(
        Transfer(f"ACC{i}", "SAVINGS", "GTQ", f"p{i}@example.com", Decimal(i + 1), concept)
        for i, concept in enumerate(concepts)
    )
    payload = prepare_file_payload(sample_batch(transactions=transfers))
    fast = payload.upload_json('pay-fi-"q"\\1')
    slow = _render(payload.source, payload.origin, payload.settings, payload.concept_texts, 'pay-fi-"q"\\1')
    assert fast == slow == rfc8785.dumps(_floats(payload.to_dict('pay-fi-"q"\\1')))
    assert [row["transferInfo"]["concept"] for row in json.loads(fast)["data"]["transaction"]] == concepts


@pytest.mark.parametrize("consent_id", ["", None])
def test_upload_needs_a_consent_id(consent_id: Any) -> None:
    payload = prepare_file_payload(sample_batch())
    with pytest.raises(ValueError, match="consent id"):
        payload.upload_json(consent_id)


def test_concepts_needing_escapes_and_non_ascii_match_the_oracle() -> None:
    # Control characters never reach the payload (validation refuses them); the canonical writer still escapes
    # them as RFC 8785 says, checked on its own below.
    concepts = ["back\\slash", 'quote"d', "emoji 😀 ü ß", "\u2028\u2029", "", "ok"]
    transfers = tuple(
        Transfer(f"ACC{i}", "SAVINGS", "GTQ", f"p{i}@example.com", Decimal(i + 1) / 100, concept)
        for i, concept in enumerate(concepts)
    )
    payload = prepare_file_payload(sample_batch(transactions=transfers))
    assert payload.canonical == rfc8785.dumps(_floats(payload.to_dict()))
    assert payload.upload_json(CONSENT_ID) == rfc8785.dumps(_floats(payload.to_dict(CONSENT_ID)))
    assert json.loads(payload.canonical)["data"]["transaction"][1]["transferInfo"]["concept"] == 'quote"d'
    controls = {"c": "tab\there ctl\x01\x1f del\x7f"}
    assert canonicalize_pure(controls) == rfc8785.dumps(controls)


def test_settings_change_the_constant_fields() -> None:
    settings = PayloadSettings(transaction_type="INTERBANK", debit_type="C", execution_type="SCHEDULED")
    payload = build_file_payload(validated(sample_batch()), settings)
    info = payload.to_dict()["data"]["transaction"][0]["transferInfo"]
    assert (info["transactionType"], info["debitType"], info["executionType"]) == ("INTERBANK", "C", "SCHEDULED")
    assert payload.canonical == canonicalize(payload.to_dict())
    assert payload.file_hash != prepare_file_payload(sample_batch()).file_hash


def test_an_invalid_batch_is_never_built() -> None:
    bad = sample_batch(transactions=(Transfer("3000000001", "SAVINGS", "USD", "ana@example.com", Decimal("-1"), "x"),))
    with pytest.raises(InvalidBatchError) as caught:
        prepare_file_payload(bad)
    assert caught.value.report.bad_rows() == {0: {Reason.CURRENCY_MISMATCH, Reason.NON_POSITIVE_AMOUNT}}


def test_the_hash_depends_on_every_field() -> None:
    base = prepare_file_payload(sample_batch()).file_hash
    rows = sample_batch().transactions
    variants = [
        sample_batch(origin=OriginAccount("0100123457", "MONETARY", "GTQ")),
        sample_batch(transactions=(replace(rows[0], amount=Decimal("1500.51")), *rows[1:])),
        sample_batch(transactions=(replace(rows[0], email="ana2@example.com"), *rows[1:])),
        sample_batch(transactions=(replace(rows[0], concept="Planilla Noviembre"), *rows[1:])),
        sample_batch(transactions=(replace(rows[0], account_type="MONETARY"), *rows[1:])),
        sample_batch(transactions=(rows[1], rows[0], rows[2])),  # order matters: it is an array
    ]
    hashes = {prepare_file_payload(v).file_hash for v in variants}
    assert base not in hashes and len(hashes) == len(variants)
    # ...but not on what is not in the payload.
    same = sample_batch(batch_id="other", source="elsewhere", file_reference="OTHER")
    assert prepare_file_payload(same).file_hash == base


def test_equal_amounts_written_differently_hash_the_same() -> None:
    rows = sample_batch().transactions
    other = sample_batch(transactions=(replace(rows[0], amount=Decimal("1500.5000")), *rows[1:]))
    assert prepare_file_payload(other).canonical == EXPECTED_CANONICAL


@pytest.mark.parametrize("count", [4095, 4096, 4097, 10_001])
def test_large_batches_across_render_slices(count: int) -> None:
    concepts = ["Nómina", "plain", 'say "hi"', "back\\slash", "😀"]
    transfers = tuple(
        Transfer(
            f"A{i}",
            "SAVINGS" if i % 3 else "MONETARY",
            "GTQ",
            f"p{i}@example.com",
            Decimal(i + 1) / 100,
            f"{concepts[i % 5]} {i}",
        )
        for i in range(count)
    )
    checked = validated(sample_batch(transactions=transfers))
    payload = build_file_payload(checked)
    assert payload.canonical == canonicalize(payload.to_dict())
    # What the intake stores, hashed slice by slice without building the file, is the built file's.
    facts = file_facts(checked)
    assert (facts.file_hash, facts.number_of_transactions, facts.control_sum) == (
        file_hash(canonicalize(payload.to_dict())),
        count,
        payload.control_sum,
    )
    assert payload.upload_json(CONSENT_ID) == canonicalize(payload.to_dict(CONSENT_ID))
    rows = json.loads(payload.canonical)["data"]["transaction"]
    assert len(rows) == count and rows[-1]["destinationAccount"]["accountNumber"] == f"A{count - 1}"
    assert payload.control_sum == Decimal(count * (count + 1) // 2) / 100


def test_the_file_is_rendered_into_one_buffer_not_joined_from_its_slices() -> None:
    """`b"".join` of the slices kept them all beside the joined bytes (twice the file at once); the one growing
    buffer hands its bytes over without a copy."""
    transfers = tuple(
        Transfer(f"{3000000000 + i}", "SAVINGS", "GTQ", f"e{i}@example.com", Decimal("10.25"), f"Nómina {i}")
        for i in range(20_000)
    )
    batch = validated(sample_batch(transactions=transfers))
    payload = build_file_payload(batch)  # its concepts, made before the measurement
    parts = (batch, batch.batch.origin, payload.settings, payload.concept_texts, "")
    tracemalloc.start()
    try:
        rendered = _render(*parts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rendered == payload.canonical
    assert peak < 1.5 * len(rendered), (peak, len(rendered))
