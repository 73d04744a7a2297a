"""Scheduled batches with `dispersion processor` as deployed: real Kafka broker, real PostgreSQL, the sandbox bank and
the processor as subprocesses. A `payroll.batches` v2 record with `execute_on` is approved at once and paid only on
its day, across processor restarts; a v1 record (no `execute_on`) is paid as before.

The processes run on the wall clock, so "the day comes" by moving the integration's time zone: at any instant the
date at UTC+14 is one or two days after the date at UTC-12. The wait scheduled at the approval (the start of the
day at UTC-12) is made due by hand while the processor is stopped, as a stale schedule would be: the payment step
itself decides, with the zone configured when it runs."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest
from processor_support import (
    BATCHES_TOPIC,
    STATUS_TOPIC,
    Deployment,
    DeploymentFactory,
    TopicLog,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    payroll_batch,
    unique_id,
)

import schemas

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(300)]

WEST, EAST = "Etc/GMT+12", "Etc/GMT-14"
FILE_FLOW = ["AUTHORIZATION_REQUIRED", "AUTHORIZED", "INITIATED", "COMPLETED"]


def has(key: str, status: str) -> Callable[[TopicLog], bool]:
    return lambda log: log.find(key, status) is not None


def set_timezone(deployment: Deployment, zone: str) -> None:
    """`timezone` of the integration in the deployment's configuration file (read by the next start)."""
    text = deployment.config_path.read_text()
    text = re.sub(r'(?m)^timezone = ".*"\n', "", text)
    text = text.replace("[integrations.sandbox]\n", f'[integrations.sandbox]\ntimezone = "{zone}"\n', 1)
    deployment.config_path.write_text(text)


def make_due(deployment: Deployment, batch_id: str) -> None:
    with psycopg.connect(deployment.store_url) as conn:
        conn.execute("UPDATE flows SET next_action_at = now() WHERE batch_id = %s", (batch_id,))


def next_action_at(deployment: Deployment, batch_id: str) -> datetime:
    with psycopg.connect(deployment.store_url) as conn:
        row = conn.execute("SELECT next_action_at FROM flows WHERE batch_id = %s", (batch_id,)).fetchone()
    assert row is not None and isinstance(row[0], datetime)
    return row[0]


def test_a_scheduled_batch_is_approved_now_and_paid_on_its_day_across_restarts(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap)
    set_timezone(deployment, WEST)
    instance = deployment.start(0)
    statuses = deployment.topic_log(STATUS_TOPIC)
    producer = deployment.producer()
    approver = deployment.approver()
    tomorrow = (datetime.now(UTC) - timedelta(hours=12)).date() + timedelta(days=1)  # at UTC-12
    scheduled_id, plain_id = unique_id("B-SCHED"), unique_id("B-V1")
    value = producer.send(BATCHES_TOPIC, scheduled_id, {**payroll_batch(scheduled_id), "execute_on": tomorrow})
    assert schemas.codec(BATCHES_TOPIC).writer_of(value) == schemas.schema(BATCHES_TOPIC, 2)
    # A v1 record, as producers that never heard of execute_on still write it.
    v1 = schemas.encode(BATCHES_TOPIC, payroll_batch(plain_id), version=1)
    producer.send_raw(BATCHES_TOPIC, plain_id.encode(), v1)

    for batch_id in (scheduled_id, plain_id):
        statuses.wait_until(has(batch_id, "AUTHORIZATION_REQUIRED"), timeout=60, what=f"{batch_id}: the link")
        required = statuses.find(batch_id, "AUTHORIZATION_REQUIRED")
        assert required is not None
        assert required.record["execute_on"] == (tomorrow if batch_id == scheduled_id else None)
        assert approver.approve(str(required.record["authorization_url"]), via=instance.url).status_code == 200

    # The v1 batch is paid at once; the scheduled one is AUTHORIZED, carrying its day, and waits.
    statuses.wait_until(has(plain_id, "COMPLETED"), timeout=60, what="the v1 batch COMPLETED")
    assert statuses.statuses(plain_id) == FILE_FLOW
    statuses.wait_until(has(scheduled_id, "AUTHORIZED"), timeout=30, what="AUTHORIZED")
    authorized = statuses.find(scheduled_id, "AUTHORIZED")
    assert authorized is not None and authorized.record["execute_on"] == tomorrow
    assert isinstance(authorized.record["execute_on"], date)
    waits_until = next_action_at(deployment, scheduled_id)
    assert waits_until == datetime.combine(tomorrow, datetime.min.time(), tzinfo=UTC) + timedelta(hours=12)
    statuses.poll(2.0)
    assert statuses.statuses(scheduled_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]
    assert deployment.bank_counts()["file_payment"] == 1  # the v1 batch's only

    # Restarted with the row made due early: the step holds it back, nothing is sent, the wait is set again.
    assert instance.terminate() == 0
    make_due(deployment, scheduled_id)
    instance = deployment.start(0)
    statuses.poll(3.0)
    assert statuses.statuses(scheduled_id) == ["AUTHORIZATION_REQUIRED", "AUTHORIZED"]
    assert deployment.bank_counts()["file_payment"] == 1
    assert next_action_at(deployment, scheduled_id) == waits_until

    # Restarted where the day has come (UTC+14): the payment is created once, and the batch completes.
    assert instance.terminate() == 0
    set_timezone(deployment, EAST)
    make_due(deployment, scheduled_id)
    instance = deployment.start(0)
    statuses.wait_until(has(scheduled_id, "COMPLETED"), timeout=60, what="the scheduled batch COMPLETED")
    statuses.poll(1.0)
    assert statuses.statuses(scheduled_id) == FILE_FLOW
    assert statuses.raw_duplicates() == 0
    initiated = statuses.find(scheduled_id, "INITIATED")
    assert initiated is not None and initiated.record["execute_on"] == tomorrow
    counts = deployment.bank_counts()
    assert (counts["file_consent"], counts["file_payment"]) == (2, 2)
    assert instance.terminate() == 0
