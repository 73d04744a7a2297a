"""Two independent readings of the spec agree: payloads we build pass the sandbox bank's own file checks.

The processor imports nothing from `sandbox`; only this test puts the two side by side, as the bank would see
our bytes: parsed with exact decimals, checked field by field, hash recomputed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from text_strategies import SAFE_CHARACTERS

from processor.domain.batch import OriginAccount, PayrollBatch, Transfer
from processor.domain.payload import prepare_file_payload
from sandbox import filecheck
from sandbox.jsonutil import loads

CONSENT_ID = "pay-fi-0b8e4a47-3c1d-4f5e-9a6b-7c8d9e0f1a2b"


def batch_of(transfers: list[Transfer]) -> PayrollBatch:
    return PayrollBatch(
        batch_id="interop",
        integration="sandbox",
        file_reference="PAYROLL-2024-11",
        origin=OriginAccount("0100123456", "MONETARY", "GTQ"),
        transactions=tuple(transfers),
        requested_at=datetime(2024, 11, 30, tzinfo=UTC),
        source="test",
    )


rows = st.lists(
    st.tuples(
        st.from_regex(r"[a-z0-9]{1,12}@[a-z]{1,10}\.(com|gt)", fullmatch=True),
        st.sampled_from(["SAVINGS", "MONETARY"]),
        st.integers(min_value=1, max_value=999_999_999_999_99).map(lambda c: Decimal(c) / 100),
        st.text(SAFE_CHARACTERS, max_size=140),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows)
def test_the_sandbox_accepts_our_consent_and_upload(data: list[tuple[str, str, Decimal, str]]) -> None:
    transfers = [
        Transfer(f"GT{i}", kind, "GTQ", email, amount, concept) for i, (email, kind, amount, concept) in enumerate(data)
    ]
    payload = prepare_file_payload(batch_of(transfers))
    initiation = loads(b"".join(payload.initiation_parts()))
    summary = filecheck.check_initiation(initiation, max_transactions=100_000)
    assert summary.count == len(transfers)
    assert summary.control_sum == payload.control_sum
    assert filecheck.payload_hash(initiation["SupplementaryData"]) == payload.file_hash
    assert filecheck.verify_upload(loads(payload.upload_json(CONSENT_ID)), initiation, CONSENT_ID, 100_000) == summary
    # The dict forms serialise to the same thing through the sandbox's JSON writer.
    assert filecheck.canonical_json(payload.initiation()["SupplementaryData"]) == payload.canonical


def test_the_sandbox_rejects_a_tampered_upload() -> None:
    transfers = [Transfer(f"GT{i}", "SAVINGS", "GTQ", f"e{i}@example.com", Decimal("10.50"), "x") for i in range(3)]
    payload = prepare_file_payload(batch_of(transfers))
    initiation = loads(b"".join(payload.initiation_parts()))
    changed = prepare_file_payload(batch_of([*transfers[:2], replace(transfers[2], amount=Decimal("10.51"))]))
    with pytest.raises(filecheck.CheckError):
        filecheck.verify_upload(loads(changed.upload_json(CONSENT_ID)), initiation, CONSENT_ID, 100_000)
    with pytest.raises(filecheck.CheckError):
        filecheck.verify_upload(loads(payload.upload_json("pay-fi-other")), initiation, CONSENT_ID, 100_000)
