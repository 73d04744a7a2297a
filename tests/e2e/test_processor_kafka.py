"""`dispersion processor` end to end, as deployed: real Kafka broker, real PostgreSQL, the sandbox bank and the
processor as subprocesses. Input goes in as Avro on the input topics; everything is judged from what comes out
on the output topics (decoded), what the bank holds (its admin counts) and what the approver's browser sees."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from decimal import Decimal

import pytest
from kafka_layer_support import committed
from processor_support import (
    BATCHES_TOPIC,
    DLQ_TOPIC,
    STATUS_TOPIC,
    VRP_MANDATES_TOPIC,
    VRP_PAYMENTS_TOPIC,
    VRP_STATUS_TOPIC,
    ApproveEach,
    DeploymentFactory,
    TopicLog,
    count_rows,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    payroll_batch,
    unique_id,
    vrp_mandate,
    vrp_payment,
)

from processor.devtools.kafka_local import LocalKafka
from processor.devtools.processes import eventually

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(300)]

FILE_FLOW = ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]


def has(key: str, status: str) -> Callable[[TopicLog], bool]:
    """`wait_until` condition: the key has an event with this status."""
    return lambda log: log.find(key, status) is not None


def test_a_batch_event_ends_completed_with_per_transaction_results(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap)
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    producer = deployment.producer()
    approver = deployment.approver()
    batch_id = unique_id("B")
    transfers = [("200100300", "1500.50"), ("200100301", "2000.00"), ("200109902", "750.25")]
    producer.send(BATCHES_TOPIC, batch_id, payroll_batch(batch_id, transfers))

    statuses.wait_until(has(batch_id, "AUTHORIZATION_REQUIRED"), timeout=60, what="the approval link")
    required = statuses.find(batch_id, "AUTHORIZATION_REQUIRED")
    assert required is not None
    link = str(required.record["authorization_url"])
    assert link.startswith(f"{deployment.public_url}/approve/file/")
    assert required.record["consent_id"].startswith("pay-fi-")
    assert required.record["number_of_transactions"] == 3
    assert required.record["control_sum"] == Decimal("4250.75")

    answer = approver.approve(link, via=instance.url)
    assert answer.status_code == 200, answer.text

    statuses.wait_until(has(batch_id, "COMPLETED"), timeout=60, what="COMPLETED")
    statuses.poll(1.0)  # anything published after COMPLETED would show up now
    assert statuses.statuses(batch_id) == FILE_FLOW
    assert statuses.raw_duplicates() == 0
    completed = statuses.find(batch_id, "COMPLETED")
    assert completed is not None
    record = completed.record
    assert record["consent_id"] == required.record["consent_id"]
    assert str(record["file_payment_id"]).startswith("fp-")
    results = record["transaction_results"]
    assert [(r["index"], r["employee_reference"], r["amount"]) for r in results] == [
        (0, "E-0000", Decimal("1500.50")),
        (1, "E-0001", Decimal("2000.00")),
        (2, "E-0002", Decimal("750.25")),
    ]
    assert [r["status"] for r in results] == ["COMPLETED", "COMPLETED", "FAILED"]
    counts = deployment.bank_counts()
    assert (counts["file_consent"], counts["file_payment"]) == (1, 1)
    health = approver.http.get(f"{instance.url}/healthz")
    assert (health.status_code, health.json()["status"]) == (200, "ok")
    assert instance.terminate() == 0


def test_a_rejected_authorization_ends_rejected_and_pays_nothing(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap)
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    batch_id = unique_id("B-REJ")
    deployment.producer().send(BATCHES_TOPIC, batch_id, payroll_batch(batch_id))
    reject = ApproveEach(deployment.approver(), lambda: instance.url, approve=False)

    statuses.wait_until(has(batch_id, "REJECTED"), timeout=60, what="REJECTED", each=reject)
    statuses.poll(1.0)

    assert reject.answers == {batch_id: 200}
    assert statuses.statuses(batch_id) == ["AUTHORIZATION_REQUIRED", "REJECTED"]
    rejected = statuses.find(batch_id, "REJECTED")
    assert rejected is not None
    assert rejected.record["reason"]
    assert rejected.record["file_payment_id"] is None
    counts = deployment.bank_counts()
    assert (counts["file_consent"], counts["file_payment"]) == (1, 0)
    assert instance.terminate() == 0


def test_an_invalid_batch_ends_invalid_and_is_dead_lettered_byte_for_byte(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap)
    instance = deployment.start(0)
    producer = deployment.producer()
    batch_id = unique_id("B-BAD")
    bad = payroll_batch(batch_id, [("200100300", "-5.00"), ("200100301", "10.00")])
    bad["transactions"][1]["destination_account"]["email"] = "not-an-email"
    invalid_bytes = producer.send(BATCHES_TOPIC, batch_id, bad)
    garbage = b"\x00not avro\xff"
    producer.send_raw(BATCHES_TOPIC, b"garbage-key", garbage)
    good_id = unique_id("B-OK")
    producer.send(BATCHES_TOPIC, good_id, payroll_batch(good_id))  # the consumer goes on after both

    statuses = deployment.topic_log(STATUS_TOPIC)
    statuses.wait_until(
        lambda log: has(batch_id, "INVALID")(log) and has(good_id, "AUTHORIZATION_REQUIRED")(log),
        timeout=60,
        what="INVALID and the next batch's AUTHORIZATION_REQUIRED",
    )
    letters = deployment.topic_log(DLQ_TOPIC)
    letters.wait_until(lambda log: len(log.events) >= 2, timeout=30, what="two dead letters")
    letters.poll(1.0)
    statuses.poll(0.5)

    assert statuses.statuses(batch_id) == ["INVALID"]
    invalid = statuses.find(batch_id, "INVALID")
    assert invalid is not None
    assert "non_positive_amount" in invalid.record["reason"]
    assert statuses.statuses(good_id) == ["AUTHORIZATION_REQUIRED"]

    assert len(letters.events) == 2
    by_key = {event.key: event.record for event in letters.events}
    letter = by_key[batch_id]
    assert letter["original_value"] == invalid_bytes
    assert letter["original_key"] == batch_id.encode()
    assert letter["topic"] == deployment.topics[BATCHES_TOPIC]
    assert letter["batch_id"] == batch_id
    assert "non_positive_amount" in letter["reason"]
    assert "malformed_email" in letter["reason"]
    poison = by_key["garbage-key"]
    assert poison["original_value"] == garbage
    assert poison["batch_id"] is None
    assert poison["reason"].startswith("undecodable")

    counts = deployment.bank_counts()
    assert counts["file_consent"] == 1  # the valid batch only
    assert instance.terminate() == 0


def test_a_vrp_mandate_is_authorised_and_payments_complete_within_its_limits(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap)
    instance = deployment.start(0)
    producer = deployment.producer()
    events = deployment.topic_log(VRP_STATUS_TOPIC)
    mandate_id = unique_id("M")
    producer.send(VRP_MANDATES_TOPIC, mandate_id, vrp_mandate(mandate_id, max_individual="500.00", monthly="1000.00"))
    approve = ApproveEach(deployment.approver(), lambda: instance.url)

    events.wait_until(has(mandate_id, "AUTHORIZED"), timeout=60, what="the mandate AUTHORIZED", each=approve)
    required = events.find(mandate_id, "AUTHORIZATION_REQUIRED")
    assert required is not None
    assert str(required.record["authorization_url"]).startswith(f"{deployment.public_url}/approve/mandate/")
    assert approve.answers == {mandate_id: 200}

    payments = {"P1": "120.00", "P2": "380.00", "P3": "500.01"}  # P3 is over MaximumIndividualAmount
    for name, amount in payments.items():
        producer.send(VRP_PAYMENTS_TOPIC, mandate_id, vrp_payment(mandate_id, f"{mandate_id}-{name}", amount))

    def settled(log: TopicLog) -> bool:
        finals = {"PAYMENT_COMPLETED", "PAYMENT_REJECTED", "LIMIT_EXCEEDED"}
        return all(finals & set(log.statuses(mandate_id, payment_id=f"{mandate_id}-{name}")) for name in payments)

    events.wait_until(settled, timeout=60, what="every payment settled")
    events.poll(1.0)

    assert events.statuses(mandate_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]
    for name in ("P1", "P2"):
        got = events.statuses(mandate_id, payment_id=f"{mandate_id}-{name}")
        assert got in (["PAYMENT_PENDING", "PAYMENT_COMPLETED"], ["PAYMENT_COMPLETED"]), (name, got)
        done = next(
            e
            for e in events.deduplicated(mandate_id)
            if e.record["payment_id"] == f"{mandate_id}-{name}" and e.status == "PAYMENT_COMPLETED"
        )
        assert done.record["amount"] == Decimal(payments[name])
        assert str(done.record["domestic_vrp_id"]).startswith("obvrp-")
    assert events.statuses(mandate_id, payment_id=f"{mandate_id}-P3") == ["LIMIT_EXCEEDED"]
    refused = next(e for e in events.deduplicated(mandate_id) if e.status == "LIMIT_EXCEEDED")
    assert "MaximumIndividualAmount" in refused.record["reason"]
    assert refused.record["domestic_vrp_id"] is None
    assert events.raw_duplicates() == 0

    counts = deployment.bank_counts()
    assert (counts["vrp_consent"], counts["domestic_vrp"]) == (1, 2)
    assert instance.terminate() == 0


def test_the_same_batch_event_twice_pays_once_with_one_event_sequence(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap, partitions=3)
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    producer = deployment.producer()
    batch_id = unique_id("B-DUP")
    value = producer.send(BATCHES_TOPIC, batch_id, payroll_batch(batch_id))
    producer.send_raw(BATCHES_TOPIC, batch_id.encode(), value)  # the ERP (or a retrying producer) sends it again
    approve = ApproveEach(deployment.approver(), lambda: instance.url)

    statuses.wait_until(has(batch_id, "COMPLETED"), timeout=60, what="COMPLETED", each=approve)
    producer.send_raw(BATCHES_TOPIC, batch_id.encode(), value)  # a replay long after the payment
    topic = deployment.topics[BATCHES_TOPIC]
    consumed = lambda: sum(committed(deployment.bootstrap, deployment.group_id, topic).values()) >= 3  # noqa: E731
    eventually(consumed, what="the replay consumed", timeout=30, interval=0.3)
    statuses.poll(2.0)

    assert approve.answers == {batch_id: 200}
    assert statuses.statuses(batch_id) == FILE_FLOW
    assert statuses.raw_duplicates() == 0
    counts = deployment.bank_counts()
    assert (counts["file_consent"], counts["file_payment"]) == (1, 1)
    assert count_rows(deployment.store_url, "SELECT COUNT(*) FROM flows") == 1
    assert instance.terminate() == 0


def test_a_broker_restart_mid_run_loses_nothing_and_duplicates_nothing(
    local_kafka: LocalKafka, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(local_kafka.bootstrap)
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    producer = deployment.producer()
    approver = deployment.approver()
    first, second, third = unique_id("B-R1"), unique_id("B-R2"), unique_id("B-R3")
    for batch_id in (first, second):
        producer.send(BATCHES_TOPIC, batch_id, payroll_batch(batch_id))
    statuses.wait_until(
        lambda log: has(first, "AUTHORIZATION_REQUIRED")(log) and has(second, "AUTHORIZATION_REQUIRED")(log),
        timeout=60,
        what="both approval links",
    )
    links = {
        b: str(e.record["authorization_url"])
        for b in (first, second)
        if (e := statuses.find(b, "AUTHORIZATION_REQUIRED"))
    }

    local_kafka.stop()
    # While the broker is down: the approver approves the first batch (HTTP and store only), the ERP produces a
    # third batch (the client queues it), and the first batch is paid; its events wait in the outbox.
    assert approver.approve(links[first], via=instance.url).status_code == 200
    producer.send(BATCHES_TOPIC, third, payroll_batch(third), flush=False)
    done_sql = f"SELECT COUNT(*) FROM flows WHERE batch_id = '{first}' AND state = 'COMPLETED'"
    paid = lambda: count_rows(deployment.store_url, done_sql) == 1  # noqa: E731
    eventually(paid, what="the first batch paid while the broker was down", timeout=60, interval=0.3)
    pending = count_rows(deployment.store_url, "SELECT COUNT(*) FROM outbox WHERE published_at IS NULL")
    assert pending >= 3  # AUTHORIZED, INITIATED, COMPLETED of the first batch, not yet published
    assert instance.alive

    local_kafka.start()
    producer.flush()
    assert approver.approve(links[second], via=instance.url).status_code == 200
    approve = ApproveEach(approver, lambda: instance.url)
    statuses.wait_until(
        lambda log: all(has(b, "COMPLETED")(log) for b in (first, second, third)),
        timeout=90,
        what="all three COMPLETED",
        each=approve,
    )
    statuses.poll(2.0)

    assert approve.answers == {third: 200}
    for batch_id in (first, second, third):
        assert statuses.statuses(batch_id) == FILE_FLOW, batch_id
    assert statuses.raw_duplicates() == 0
    counts = deployment.bank_counts()
    assert (counts["file_consent"], counts["file_payment"]) == (3, 3)
    assert count_rows(deployment.store_url, "SELECT COUNT(*) FROM outbox WHERE published_at IS NULL") == 0
    assert instance.terminate() == 0


def test_a_processor_started_while_kafka_is_down_completes_batches_once_it_is_up(
    local_kafka: LocalKafka, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(local_kafka.bootstrap)  # the topics exist; then the broker goes away
    producer = deployment.producer()
    early, late = unique_id("B-E"), unique_id("B-L")
    producer.send(BATCHES_TOPIC, early, payroll_batch(early))
    local_kafka.stop()

    instance = deployment.start(0)  # no broker: the instance still starts (and serves its HTTP API)
    producer.send(BATCHES_TOPIC, late, payroll_batch(late), flush=False)
    time.sleep(3)
    assert instance.alive, instance.log()[-3000:]

    local_kafka.start()
    producer.flush()
    statuses = deployment.topic_log(STATUS_TOPIC)
    approve = ApproveEach(deployment.approver(), lambda: instance.url)
    statuses.wait_until(
        lambda log: has(early, "COMPLETED")(log) and has(late, "COMPLETED")(log),
        timeout=90,
        what="both COMPLETED",
        each=approve,
    )
    statuses.poll(1.0)

    for batch_id in (early, late):
        assert statuses.statuses(batch_id) == FILE_FLOW, batch_id
    assert statuses.raw_duplicates() == 0
    counts = deployment.bank_counts()
    assert (counts["file_consent"], counts["file_payment"]) == (2, 2)
    assert instance.terminate() == 0


def test_an_approval_whose_code_exchange_was_lost_can_still_be_completed(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap)
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    approver = deployment.approver()
    batch_id = unique_id("B-LOST")
    deployment.producer().send(BATCHES_TOPIC, batch_id, payroll_batch(batch_id))
    statuses.wait_until(has(batch_id, "AUTHORIZATION_REQUIRED"), timeout=60, what="the approval link")
    required = statuses.find(batch_id, "AUTHORIZATION_REQUIRED")
    assert required is not None
    link = str(required.record["authorization_url"])
    # The next token call (the code exchange; the client-credentials token is cached) is committed by the bank,
    # then answered with a 500: the same end state as an instance killed right after the exchange.
    rules = [{"operation": "token", "fault": "commit_then_fail", "status": 500, "times": 1}]
    deployment.admin.put(f"{deployment.sandbox.base_url}/__sandbox/faults", json=rules).raise_for_status()
    first = approver.approve(link, via=instance.url)
    assert first.status_code != 200  # the exchange was lost; the page tells the approver to open the link again

    # The approver does what the page says, until the batch is authorised (or 20 s pass).
    answers: list[int] = []

    def authorised() -> bool:
        if statuses.find(batch_id, "AUTHORIZED") is not None:
            return True
        opened = approver.http.get(link)
        answers.append(opened.status_code)
        if opened.status_code == 302:
            approver.approve(link, via=instance.url)
        statuses.poll(2.0)
        return False

    with contextlib.suppress(TimeoutError):
        eventually(authorised, what="AUTHORIZED", timeout=20, interval=0)
    assert statuses.find(batch_id, "AUTHORIZED") is not None, f"approval link answers: {sorted(set(answers))}"
    statuses.wait_until(has(batch_id, "COMPLETED"), timeout=60, what="COMPLETED")
    counts = deployment.bank_counts()
    # The first consent is Authorised at the bank with its tokens lost; a second one was paid, once.
    assert (counts["file_consent"], counts["file_payment"]) == (2, 1)
    assert statuses.statuses(batch_id) == FILE_FLOW  # the approver was asked once: the same link, both consents
