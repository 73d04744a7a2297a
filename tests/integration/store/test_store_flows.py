"""Flows on both engines: duplicates, exact money, compare-and-set, transitions with their outbox event."""

from __future__ import annotations

import tracemalloc
from datetime import timedelta
from decimal import Decimal

import pytest
from store_fixtures import T0, StoreTarget, at

from processor.domain.file_states import FlowState
from processor.store import ConstraintError, StatusConflictError, StatusEvent, Store, VersionConflictError
from processor.store.db import LARGE_VALUE
from processor.store.lifecycle import NewContent
from processor.store.values import dump_json
from schemas.topics import STATUS_TOPIC

PAYLOAD = '{"batch_id":"b-1","transactions":[{"amount":"100.10"},{"amount":"0.05"}]}'


def _event(status: str, batch_id: str = "b-1") -> StatusEvent:
    return StatusEvent(status, {"batch_id": batch_id, "status": status, "control_sum": Decimal("100.15")}, STATUS_TOPIC)


def test_a_duplicate_batch_is_recognised_and_changes_nothing(store: Store) -> None:
    with store.transaction() as tx:
        first = tx.flows.create("b-1", "bank-a", PAYLOAD, now=T0, control_sum=Decimal("100.15"), next_action_at=T0)
        assert first.created
        tx.flows.transition(first.row, FlowState.CONSENT_CREATED, now=at(1), consent_id="pay-fi-1")
    with store.transaction() as tx:
        again = tx.flows.create("b-1", "bank-b", PAYLOAD, now=at(5), control_sum=Decimal("1.00"))
        other = tx.flows.create("b-1", "bank-a", '{"batch_id":"b-1","transactions":[]}', now=at(6))
    assert not again.created and again.same_document
    assert not other.created and not other.same_document
    stored = again.row
    assert (stored.integration, stored.state, stored.consent_id) == ("bank-a", "CONSENT_CREATED", "pay-fi-1")
    assert stored.control_sum == Decimal("100.15")
    assert stored.version == 2
    with store.transaction() as tx:
        assert tx.flows.payload("b-1") == PAYLOAD  # verbatim, the first one kept
        assert tx.flows.payload("b-404") is None
        assert tx.flows.count_by_state() == {"CONSENT_CREATED": 1}


def test_money_and_timestamps_come_back_exact(store: Store) -> None:
    deadline = T0 + timedelta(hours=4, microseconds=987_654)
    with store.transaction() as tx:
        tx.flows.create(
            "b-1",
            "bank",
            {"amount": Decimal("9999999999999999.99")},
            now=T0,
            number_of_transactions=100_000,
            control_sum=Decimal("9999999999999999.99"),
            authorization_deadline=deadline,
        )
    with store.transaction(write=False) as tx:
        flow = tx.flows.require("b-1")
        document = tx.flows.payload_document("b-1")
    assert document == {"amount": "9999999999999999.99"}
    assert flow.control_sum == Decimal("9999999999999999.99")
    assert isinstance(flow.control_sum, Decimal)
    assert flow.number_of_transactions == 100_000
    assert flow.authorization_deadline == deadline.replace(microsecond=987_000)
    assert flow.authorization_deadline is not None and flow.authorization_deadline.utcoffset() == timedelta(0)
    with store.transaction() as tx, pytest.raises(ValueError, match="decimals"):
        tx.flows.update("b-1", expected_version=1, now=at(1), control_sum=Decimal("0.001"))


def test_control_sum_is_numeric_on_postgres_and_text_on_sqlite(store: Store) -> None:
    with store.transaction() as tx:
        tx.flows.create("b-1", "bank", "{}", now=T0, control_sum=Decimal("12.3"))
        raw = tx.raw.scalar("SELECT control_sum FROM flows WHERE batch_id = ?", ("b-1",))
    if store.dialect == "postgresql":
        assert raw == Decimal("12.30")
    else:
        assert raw == "12.30"


def test_compare_and_set_detects_a_concurrent_change(store: Store) -> None:
    with store.transaction() as tx:
        flow = tx.flows.create("b-1", "bank", "{}", now=T0).row
    with store.transaction() as tx:
        winner = tx.flows.update("b-1", expected_version=flow.version, now=at(1), state="CONSENT_CREATED")
    assert winner.version == flow.version + 1
    with store.transaction() as tx, pytest.raises(VersionConflictError):
        tx.flows.transition(flow, FlowState.FAILED, now=at(2), last_error="stale writer")
    with store.transaction(write=False) as tx:
        current = tx.flows.require("b-1")
    assert (current.state, current.last_error, current.version) == ("CONSENT_CREATED", None, 2)
    assert current.updated_at == at(1)


def test_update_refuses_unknown_columns(store: Store) -> None:
    with store.transaction() as tx:
        tx.flows.create("b-1", "bank", "{}", now=T0)
        with pytest.raises(ValueError, match="cannot be updated"):
            tx.flows.update("b-1", expected_version=1, now=T0, **{"payload": "{}"})  # type: ignore[arg-type]


def test_transition_and_its_event_commit_together(store: Store) -> None:
    with store.transaction() as tx:
        flow = tx.flows.create("b-1", "bank", PAYLOAD, now=T0).row
        moved = tx.flows.transition(
            flow,
            FlowState.AWAITING_AUTHORIZATION,
            now=at(1),
            event=StatusEvent(
                "AUTHORIZATION_REQUIRED",
                {"event_id": "e-1", "control_sum": Decimal("100.15")},
                STATUS_TOPIC,
                event_id="e-1",
            ),
            consent_id="pay-fi-1",
            next_action_at=at(3600),
        )
    assert moved.state == "AWAITING_AUTHORIZATION"
    with store.transaction(write=False) as tx:
        events = tx.outbox.events("dispersion.status", "b-1")
    assert [(e.seq, e.status, e.key, e.event_id) for e in events] == [(1, "AUTHORIZATION_REQUIRED", "b-1", "e-1")]
    assert events[0].payload["control_sum"] == "100.15"


def test_a_rolled_back_transition_leaves_neither_state_nor_event(store: Store) -> None:
    with store.transaction() as tx:
        flow = tx.flows.create("b-1", "bank", PAYLOAD, now=T0).row

    class CrashError(Exception):
        pass

    def crash_after_transition() -> None:
        with store.transaction() as tx:
            tx.flows.transition(
                flow, FlowState.AWAITING_AUTHORIZATION, now=at(1), event=_event("AUTHORIZATION_REQUIRED")
            )
            assert tx.outbox.backlog()[0] == 1  # both written inside the transaction...
            raise CrashError

    with pytest.raises(CrashError):
        crash_after_transition()
    with store.transaction(write=False) as tx:
        assert tx.flows.require("b-1").state == "RECEIVED"
        assert tx.outbox.events("dispersion.status", "b-1") == []
        assert tx.outbox.backlog()[0] == 0
        assert tx.raw.scalar("SELECT COUNT(*) FROM outbox_keys") == 0


def test_a_repeated_status_is_refused_and_rolls_the_transition_back(store: Store) -> None:
    with store.transaction() as tx:
        flow = tx.flows.create("b-1", "bank", PAYLOAD, now=T0).row
        flow = tx.flows.transition(
            flow, FlowState.AWAITING_AUTHORIZATION, now=at(1), event=_event("AUTHORIZATION_REQUIRED")
        )
    with pytest.raises(StatusConflictError, match="already emitted"), store.transaction() as tx:
        tx.flows.transition(flow, FlowState.AWAITING_AUTHORIZATION, now=at(2), event=_event("AUTHORIZATION_REQUIRED"))
    with store.transaction(write=False) as tx:
        current = tx.flows.require("b-1")
        assert current.version == flow.version  # the state update rolled back with the refused event
        assert tx.outbox.statuses("dispersion.status", "b-1") == ["AUTHORIZATION_REQUIRED"]


def test_approval_token_is_unguessable_and_kept_out_of_reprs(store: Store) -> None:
    with store.transaction() as tx:
        one = tx.flows.create("b-1", "bank", "{}", now=T0).row
        two = tx.flows.create("b-2", "bank", "{}", now=T0).row
    assert len(one.approval_token) >= 43 and one.approval_token != two.approval_token
    assert one.approval_token not in repr(one)


def test_consent_and_payment_ids_are_unique(store: Store) -> None:
    with store.transaction() as tx:
        one = tx.flows.create("b-1", "bank", "{}", now=T0).row
        two = tx.flows.create("b-2", "bank", "{}", now=T0).row
        tx.flows.update("b-1", expected_version=one.version, now=at(1), consent_id="c-1", file_payment_id="fp-1")
    with store.transaction(write=False) as tx:
        stored = tx.flows.require("b-1")
        assert (stored.consent_id, stored.file_payment_id) == ("c-1", "fp-1")
    with pytest.raises(ConstraintError), store.transaction() as tx:
        tx.flows.update("b-2", expected_version=two.version, now=at(2), consent_id="c-1")


def test_report_is_kept_as_json_with_exact_amounts(store: Store) -> None:
    report = [{"index": 0, "status": "COMPLETED", "amount": Decimal("100.10")}, {"index": 1, "status": "FAILED"}]
    with store.transaction() as tx:
        flow = tx.flows.create("b-1", "bank", "{}", now=T0).row
        tx.flows.transition(flow, FlowState.COMPLETED, now=at(9), report=report, next_action_at=None)
    with store.transaction(write=False) as tx:
        done = tx.flows.require("b-1")
        stored_report = tx.flows.report("b-1")
    assert done.terminal
    assert stored_report == [{"index": 0, "status": "COMPLETED", "amount": "100.10"}, {"index": 1, "status": "FAILED"}]
    assert done.next_action_at is None


def test_postgres_schemas_isolate_test_runs(postgres_target: StoreTarget, store_postgres_dsn: str) -> None:
    other = StoreTarget("postgresql", store_postgres_dsn, f"{postgres_target.schema}_x")
    import psycopg

    with psycopg.connect(store_postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {other.schema}")
    try:
        with postgres_target.open() as a, other.open() as b:
            with a.transaction() as tx:
                tx.flows.create("b-1", "bank", "{}", now=T0)
            with b.transaction(write=False) as tx:
                assert tx.flows.get("b-1") is None
    finally:
        with psycopg.connect(store_postgres_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {other.schema} CASCADE")


def test_a_large_batch_text_is_stored_verbatim_without_being_one_parameter(store: Store) -> None:
    """On PostgreSQL a text over LARGE_VALUE goes in pieces through COPY (`Tx.set_text`): psycopg's encoding of it
    as one parameter and libpq's buffer took twice its size at once. On both stores it reads back as it was,
    including what COPY's text format would have to escape, and a duplicate keeps the first."""
    rows = ",".join(f'{{"amount":"{i}.05","concept":"Nómina\\\\n\\t\\"{i}\\""}}' for i in range(90_000))
    text = '{"batch_id":"b-big","transactions":[' + rows + "]}"
    other = text.replace("Nómina", "Salary")
    assert len(text) > LARGE_VALUE
    tracemalloc.start()
    try:
        with store.transaction() as tx:
            # The intake gives the content's hash (the text's own would encode it whole to hash it).
            created = tx.flows.create("b-big", "bank-a", text, now=T0, payload_checked=True, content_sha256="c1")
            again = tx.flows.create("b-big", "bank-a", other, now=T0, payload_checked=True, content_sha256="c2")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert created.created and not again.created and not again.same_document
    with store.transaction(write=False) as tx:
        assert tx.flows.payload("b-big") == text
    if store.dialect == "postgresql":
        assert peak < len(text) / 2, (peak, len(text))  # as one parameter: over twice the text


def test_a_large_report_and_its_event_are_stored_whole_with_the_compare_and_set(store: Store) -> None:
    """The completion of 100,000 transfers writes a report and a COMPLETED event of many MiB each: on PostgreSQL
    in pieces after the row is written (`Tx.set_text`), in the same transaction as the compare-and-set."""
    results = [{"index": i, "status": "FAILED", "reason": f"AC04 línea\n\t\\{i}"} for i in range(110_000)]
    event = StatusEvent("COMPLETED", {"batch_id": "b-1", "transaction_results": results}, STATUS_TOPIC)
    assert len(dump_json({"transaction_results": results})) > LARGE_VALUE
    with store.transaction() as tx:
        flow = tx.flows.create("b-1", "bank-a", PAYLOAD, now=T0).row
        updated = tx.flows.transition(
            flow, FlowState.COMPLETED, now=at(1), report={"transaction_results": results}, event=event
        )
        assert len(tx.flows.payload("b-1") or "") == len(PAYLOAD)
    assert updated.state == FlowState.COMPLETED and updated.version == flow.version + 1
    with store.transaction(write=False) as tx:
        assert tx.flows.report("b-1") == {"transaction_results": results}
        (event,) = tx.outbox.events(STATUS_TOPIC, "b-1")
        assert event.payload["transaction_results"] == results
    with store.transaction() as tx, pytest.raises(VersionConflictError):  # the version still decides first
        tx.flows.transition(flow, FlowState.FAILED, now=at(2), report={"transaction_results": results})
    with store.transaction(write=False) as tx:
        assert tx.flows.require("b-1").state == FlowState.COMPLETED


def test_a_new_attempt_of_a_large_batch_stores_its_text_whole(store: Store) -> None:
    """A new attempt of an ended batch id replaces the stored text: a large one in pieces on PostgreSQL too."""
    text = '{"batch_id":"b-1","transactions":[' + ",".join(f'{{"concept":"Nómina {i}"}}' for i in range(200_000)) + "]}"
    assert len(text) > LARGE_VALUE
    with store.transaction() as tx:
        flow = tx.flows.create("b-1", "bank-a", PAYLOAD, now=T0).row
        ended = tx.flows.transition(flow, FlowState.FAILED, now=at(1), last_error="refused")
        content = NewContent("bank-a", text, "c2", FlowState.RECEIVED, None, None, None, None, None, None, None)
        renewed = tx.lifecycle.restart(ended, content, status_topic=STATUS_TOPIC, now=at(2))
    assert renewed.attempt == flow.attempt + 1 and renewed.payload_sha256 == "c2"
    with store.transaction(write=False) as tx:
        assert tx.flows.payload("b-1") == text
