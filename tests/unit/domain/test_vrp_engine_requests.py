"""Reading VRP requests, building the bank's bodies and the status records: pure functions, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

import schemas
from processor.domain.vrp_limits import check_payment
from processor.domain.vrp_requests import (
    CONSENT_CREATED_KEY,
    InvalidRequestError,
    consent_parts,
    limits_of,
    parse_mandate,
    parse_payment,
    payment_parts,
    status_record,
)
from processor.store import OutboxEvent
from processor.store.values import dump_json
from producers.relay import outbox_record

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def published(record: dict[str, Any]) -> dict[str, Any]:
    """A stored `vrp.status` record as the relay publishes it (`outbox_record` over its outbox event), decoded."""
    event = OutboxEvent(1, str(record["event_id"]), "vrp.status", "M-1", 1, None, dump_json(record), None, NOW, None)
    return schemas.decode("vrp.status", schemas.encode("vrp.status", outbox_record(event)))


def mandate_doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "mandate_id": "M-1",
        "integration": "sandbox",
        "currency": "GBP",
        "creditor_account": {"identification": "08080021325698", "name": "Savings pot"},
        "max_individual_amount": "500",
        "periodic_limits": [
            {"amount": Decimal("1000.00"), "period_type": "Month", "period_alignment": "Calendar"},
            {"amount": "600.5", "period_type": "Week", "period_alignment": "Consent"},
        ],
        "valid_from": "2026-11-01T00:00:00Z",
        "valid_to": NOW + timedelta(days=365),
        "reference": "SWEEP-ANA",
        "requested_at": NOW,
    }
    doc.update(overrides)
    return doc


def test_a_mandate_request_is_read_and_normalised() -> None:
    request = parse_mandate(mandate_doc())
    assert request.max_individual_amount == Decimal("500.00")
    assert request.creditor.scheme_name == "UK.OBIE.SortCodeAccountNumber"  # the schema's default
    assert request.valid_from == datetime(2026, 11, 1, tzinfo=UTC)
    document = request.document()
    assert document["max_individual_amount"] == "500.00"
    assert document["periodic_limits"][1] == {"amount": "600.50", "period_type": "Week", "period_alignment": "Consent"}
    assert document["valid_from"] == "2026-11-01T00:00:00.000Z"
    assert parse_mandate(document) == request  # the stored form reads back to the same request


def test_an_avro_decoded_mandate_reads_like_its_json_form() -> None:
    record = {
        "mandate_id": "M-2",
        "integration": "sandbox",
        "currency": "GBP",
        "creditor_account": {
            "scheme_name": "UK.OBIE.SortCodeAccountNumber",
            "identification": "08080021325698",
            "name": "Savings pot",
        },
        "max_individual_amount": Decimal("99.99"),
        "periodic_limits": [{"amount": Decimal("150.00"), "period_type": "Day", "period_alignment": "Consent"}],
        "valid_from": NOW,
        "valid_to": NOW + timedelta(days=30),
        "reference": "R",
        "description": None,
        "requested_at": NOW,
        "source": None,
    }
    decoded = schemas.decode("vrp.mandates", schemas.encode("vrp.mandates", record))
    request = parse_mandate(decoded)
    assert request.max_individual_amount == Decimal("99.99")
    assert parse_mandate(request.document()) == request


def test_every_problem_of_a_mandate_request_is_reported() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_mandate(
            mandate_doc(
                currency="pounds",
                max_individual_amount=10.5,
                creditor_account={"identification": "12-34", "name": ""},
                periodic_limits=[
                    {"amount": "0", "period_type": "Year", "period_alignment": "Calendar"},
                    {"amount": "1.001", "period_type": "Day", "period_alignment": "Consent"},
                    {"amount": "5", "period_type": "Day", "period_alignment": "Consent"},
                    {"amount": "5", "period_type": "Day", "period_alignment": "Consent"},
                ],
                valid_to="2026-10-01T00:00:00",
                reference="x" * 36,
            )
        )
    fields = [p.split(":")[0] for p in caught.value.problems]
    assert fields == [
        "currency",
        "creditor_account.name",
        "creditor_account.identification",
        "max_individual_amount",
        "periodic_limits[0].amount",
        "periodic_limits[0].period_type",
        "periodic_limits[1].amount",
        "periodic_limits[2]",  # a second Day/Consent limit (after [1]), and a third
        "periodic_limits[3]",
        "valid_to",
        "reference",
    ]
    assert "never a float" in caught.value.problems[3]
    assert "UTC offset" in caught.value.problems[9]
    assert caught.value.mandate_id == "M-1"


def test_validity_must_run_forward_and_ids_are_kept_when_readable() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_mandate(mandate_doc(valid_to="2026-10-31T00:00:00+00:00"))
    assert caught.value.problems == ("valid_to: must be after valid_from",)
    with pytest.raises(InvalidRequestError) as missing:
        parse_mandate({"integration": "sandbox"})
    assert missing.value.mandate_id is None and missing.value.problems[0] == "mandate_id: is required"


def test_consent_parts_follow_the_spec_and_the_description_convention() -> None:
    parts = consent_parts(parse_mandate(mandate_doc()), "Acme Pay")
    control = parts.control_parameters
    assert control["PSUAuthenticationMethods"] == ["UK.OBIE.SCA"]
    assert control["VRPType"] == ["UK.OBIE.VRPType.Sweeping"]
    assert control["ValidFromDateTime"] == "2026-11-01T00:00:00.000Z"
    assert control["MaximumIndividualAmount"] == {"Amount": "500.00", "Currency": "GBP"}
    assert control["PeriodicLimits"][1] == {
        "Amount": "600.50",
        "Currency": "GBP",
        "PeriodType": "Week",
        "PeriodAlignment": "Consent",
    }
    assert parts.initiation == {
        "CreditorAccount": {
            "SchemeName": "UK.OBIE.SortCodeAccountNumber",
            "Identification": "08080021325698",
            "Name": "Savings pot",
        }
    }
    assert parts.remittance_information == {"Reference": "SWEEP-ANA", "Unstructured": "VRP - CUOTAS - Acme Pay"}
    described = consent_parts(parse_mandate(mandate_doc(description="Monthly sweep")), "Acme Pay")
    assert described.remittance_information["Unstructured"] == "Monthly sweep"


def test_payment_parts_repeat_the_consent_initiation() -> None:
    mandate = parse_mandate(mandate_doc())
    payment = parse_payment(
        {"payment_id": "P-1", "mandate_id": "M-1", "amount": 12, "currency": "GBP", "end_to_end_id": "E2E-1"}
    )
    parts = payment_parts(payment, mandate, "Acme Pay")
    assert parts.initiation == consent_parts(mandate, "Acme Pay").initiation
    instruction = parts.instruction
    assert instruction["InstructionIdentification"] == "P-1"
    assert instruction["EndToEndIdentification"] == "E2E-1"
    assert instruction["InstructedAmount"] == {"Amount": "12.00", "Currency": "GBP"}
    assert instruction["CreditorAccount"] == parts.initiation["CreditorAccount"]
    assert instruction["RemittanceInformation"] == {"Unstructured": "VRP - CUOTAS - Acme Pay", "Reference": "SWEEP-ANA"}


def test_payment_problems_are_all_reported_with_the_ids() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_payment(
            {
                "payment_id": "P-2",
                "mandate_id": "M-1",
                "amount": "-3",
                "currency": "GB",
                "end_to_end_id": "E" * 36,
                "remittance": 7,
            }
        )
    assert [p.split(":")[0] for p in caught.value.problems] == ["amount", "currency", "end_to_end_id", "remittance"]
    assert (caught.value.payment_id, caught.value.mandate_id) == ("P-2", "M-1")


def test_limits_view_counts_consent_periods_from_the_bank_s_creation_time() -> None:
    mandate = parse_mandate(mandate_doc())
    created = datetime(2026, 11, 2, 8, 30, tzinfo=UTC)
    view = limits_of(mandate, created, NOW)
    assert view.created_at == created and view.max_individual == Decimal("500.00")
    assert limits_of(mandate, None, NOW).created_at == NOW
    assert CONSENT_CREATED_KEY == "ConsentCreationDateTime"
    # 600.50 per Consent-aligned week: 600.00 already in this week leaves room for 0.50 only.
    from processor.domain.vrp_limits import PastPayment

    history = [PastPayment(Decimal("600.00"), created + timedelta(hours=1))]
    breaches = check_payment(view, Decimal("0.51"), "GBP", created + timedelta(days=6), history)
    assert [b.field for b in breaches] == ["ControlParameters.PeriodicLimits[1]"]
    assert check_payment(view, Decimal("0.51"), "GBP", created + timedelta(days=7), history) == []


def test_status_records_are_valid_vrp_status_events() -> None:
    record = status_record(
        mandate_id="M-1",
        payment_id="P-1",
        status="PAYMENT_COMPLETED",
        occurred_at=NOW + timedelta(microseconds=123_456),
        consent_id="vrp-1",
        domestic_vrp_id="obvrp-1",
        amount=Decimal("12.5"),
        currency="GBP",
        bank_status="AcceptedSettlementCompleted",
    )
    assert record["occurred_at"] == "2026-11-02T09:00:00.123Z" and record["amount"] == "12.50"
    decoded = published(record)
    assert decoded["amount"] == Decimal("12.50") and decoded["event_id"] == record["event_id"]
    assert decoded["occurred_at"] == NOW + timedelta(milliseconds=123)
    mandate_event = status_record(mandate_id="M-1", status="AUTHORIZATION_REQUIRED", occurred_at=NOW)
    assert published(mandate_event)["amount"] is None
