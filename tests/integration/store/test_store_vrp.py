"""VRP mandates and payments on both engines: duplicates, exact totals, limit checks serialised per mandate."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from store_fixtures import T0, StoreTarget, at

from processor.domain.vrp_states import Mandate, Payment
from processor.store import ConstraintError, StatusEvent, Store, VersionConflictError
from schemas.topics import VRP_STATUS_TOPIC

LIMITS = {
    "MaximumIndividualAmount": {"Amount": Decimal("100.00"), "Currency": "GBP"},
    "PeriodicLimits": [
        {"Amount": Decimal("150.00"), "Currency": "GBP", "PeriodType": "Day", "PeriodAlignment": "Calendar"}
    ],
}


def _mandate(store: Store, mandate_id: str = "m-1") -> None:
    with store.transaction() as tx:
        tx.mandates.create(
            mandate_id,
            "bank",
            {"mandate_id": mandate_id, "limits": LIMITS},
            limits=LIMITS,
            currency="GBP",
            valid_from=T0,
            valid_to=T0 + timedelta(days=30),
            now=T0,
        )


def test_mandates_are_unique_and_keep_their_limits(store: Store) -> None:
    _mandate(store)
    with store.transaction() as tx:
        again = tx.mandates.create("m-1", "other", {"x": 1}, limits={}, now=at(5))
    assert not again.created and not again.same_document
    mandate = again.row
    assert mandate.integration == "bank" and mandate.state == Mandate.RECEIVED
    assert mandate.limits["MaximumIndividualAmount"]["Amount"] == "100.00"
    assert (mandate.valid_from, mandate.valid_to) == (T0, T0 + timedelta(days=30))
    with store.transaction() as tx:
        authorised = tx.mandates.transition(
            mandate,
            Mandate.AUTHORIZED,
            now=at(60),
            consent_id="vrp-1",
            event=StatusEvent("AUTHORIZED", {"mandate_id": "m-1"}, topic=VRP_STATUS_TOPIC, rank=20),
        )
        assert authorised.consent_id == "vrp-1" and tx.mandates.require("m-1") == authorised
        assert tx.outbox.statuses(VRP_STATUS_TOPIC, "m-1") == ["AUTHORIZED"]


def test_payments_need_their_mandate_and_are_unique(store: Store) -> None:
    with pytest.raises(ConstraintError), store.transaction() as tx:
        tx.vrp_payments.create("p-1", "m-404", amount=Decimal("1.00"), currency="GBP", instruction={}, now=T0)
    _mandate(store)
    with store.transaction() as tx:
        first = tx.vrp_payments.create(
            "p-1", "m-1", amount=Decimal("10.5"), currency="GBP", instruction={"a": 1}, now=T0
        )
        dup = tx.vrp_payments.create(
            "p-1", "m-1", amount=Decimal("99.00"), currency="GBP", instruction={"a": 1}, now=at(1)
        )
    assert first.created and first.row.amount == Decimal("10.50")
    assert not dup.created and dup.same_document and dup.row.amount == Decimal("10.50")
    with pytest.raises(ValueError, match="decimals"), store.transaction() as tx:
        tx.vrp_payments.create("p-2", "m-1", amount=Decimal("0.125"), currency="GBP", instruction={}, now=T0)


def test_totals_are_exact_per_state_and_window(store: Store) -> None:
    _mandate(store)
    amounts = ["0.10", "0.20", "0.30", "33.33", "66.67"]
    with store.transaction() as tx:
        for n, amount in enumerate(amounts):
            created = tx.vrp_payments.create(
                f"p-{n}", "m-1", amount=Decimal(amount), currency="GBP", instruction={"n": n}, now=at(n * 3600)
            )
            if n == 4:
                tx.vrp_payments.transition(created.row, Payment.REFUSED, now=at(n * 3600), last_error="limit")
    with store.transaction(write=False) as tx:
        live = ["RECEIVED", "SUBMITTED", "PENDING", "COMPLETED"]
        assert tx.vrp_payments.total("m-1", states=live) == Decimal("33.93")  # 0.1 + 0.2 + 0.3 exactly
        assert tx.vrp_payments.total("m-1", states=live, since=at(3600), until=at(3 * 3600)) == Decimal("0.50")
        assert tx.vrp_payments.total("m-1", states=["REFUSED"]) == Decimal("66.67")
        assert tx.vrp_payments.total("m-1", states=[]) == Decimal("0.00")
        assert [p.payment_id for p in tx.vrp_payments.for_mandate("m-1", states=["REFUSED"])] == ["p-4"]
        assert len(tx.vrp_payments.for_mandate("m-1")) == 5


def test_bank_ids_and_keys_are_unique(store: Store) -> None:
    _mandate(store)
    with store.transaction() as tx:
        one = tx.vrp_payments.create("p-1", "m-1", amount=Decimal("1.00"), currency="GBP", instruction={}, now=T0).row
        two = tx.vrp_payments.create("p-2", "m-1", amount=Decimal("2.00"), currency="GBP", instruction={}, now=T0).row
        tx.vrp_payments.update(
            "p-1", expected_version=one.version, now=at(1), domestic_vrp_id="obvrp-1", idempotency_key="cv-1"
        )
        found = tx.vrp_payments.require("p-1")
        assert (found.domestic_vrp_id, found.idempotency_key) == ("obvrp-1", "cv-1")
    with pytest.raises(ConstraintError), store.transaction() as tx:
        tx.vrp_payments.update("p-2", expected_version=two.version, now=at(2), domestic_vrp_id="obvrp-1")
    with pytest.raises(VersionConflictError), store.transaction() as tx:
        tx.vrp_payments.update("p-1", expected_version=one.version, now=at(3), state="COMPLETED")


def test_locking_the_mandate_serialises_limit_checks(store_target: StoreTarget, store: Store) -> None:
    _mandate(store)
    limit = Decimal("150.00")
    outcomes: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def pay(n: int) -> None:
        try:
            with store_target.open(migrate=False, pool_size=1) as mine:
                start.wait()
                with mine.transaction() as tx:
                    tx.mandates.require("m-1", for_update=True)
                    spent = tx.vrp_payments.total("m-1", states=["RECEIVED"])
                    if spent + Decimal("60.00") > limit:
                        outcomes.append("refused")
                        return
                    tx.vrp_payments.create(
                        f"p-{n}", "m-1", amount=Decimal("60.00"), currency="GBP", instruction={}, now=at(n)
                    )
                    outcomes.append("accepted")
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=pay, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(outcomes) == ["accepted", "accepted", "refused", "refused"]
    with store.transaction(write=False) as tx:
        assert tx.vrp_payments.total("m-1", states=["RECEIVED"]) == Decimal("120.00")


def test_vrp_work_is_claimable_like_flows(store: Store) -> None:
    _mandate(store)
    with store.transaction() as tx:
        tx.vrp_payments.create(
            "p-1", "m-1", amount=Decimal("5.00"), currency="GBP", instruction={}, now=T0, next_action_at=T0
        )
        (claimed,) = tx.vrp_payments.claim_due(now=at(1), owner="a", limit=5, lease_seconds=30)
        assert claimed.payment_id == "p-1" and claimed.lease_owner == "a"
        assert tx.vrp_payments.claim_due(now=at(2), owner="b", limit=5, lease_seconds=30) == []
        assert tx.mandates.claim_due(now=at(2), owner="b", limit=5, lease_seconds=30) == []  # not due
