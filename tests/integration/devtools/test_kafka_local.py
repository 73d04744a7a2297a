"""The real local Kafka broker: Avro messages through it, a restart that keeps data, and `dispersion dev kafka`."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kafka_fixtures import create_topic

import schemas
from processor.devtools.kafka_local import LocalKafka, broker_answers

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900)]  # the first run may download the jars

BATCH: dict[str, Any] = {
    "batch_id": "ERP-KAFKA-1",
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
            "amount": Decimal("1500.75"),
            "concept": "Salario",
            "employee_reference": "E-1",
        }
    ],
    "requested_at": datetime(2026, 1, 31, 12, 0, 0, 250000, tzinfo=UTC),
    "source": "test",
}


def produce(
    bootstrap: str, topic: str, key: bytes, value: bytes, headers: list[tuple[str, str | bytes | None]]
) -> None:
    """Produce one message with an idempotent producer (acks=all) and wait for its acknowledgement."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    producer.produce(topic, value=value, key=key, headers=headers, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None]


def consume_one(bootstrap: str, topic: str, timeout: float = 60.0) -> Any:
    """The first message of `topic`, read by a new consumer group from the beginning."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            consumer.commit(message=message, asynchronous=False)  # the group coordinator works (offsets topic RF 1)
            return message
        pytest.fail(f"no message on {topic} within {timeout} s")
    finally:
        consumer.close()


def test_avro_message_through_the_broker(kafka_bootstrap: str, kafka_topic: str) -> None:
    value = schemas.encode("payroll.batches", BATCH)
    produce(kafka_bootstrap, kafka_topic, b"ERP-KAFKA-1", value, [("source", b"test")])
    message = consume_one(kafka_bootstrap, kafka_topic)
    assert message.key() == b"ERP-KAFKA-1"
    assert message.headers() == [("source", b"test")]
    assert message.value() == value
    assert schemas.decode("payroll.batches", message.value()) == {**BATCH, "execute_on": None}  # v2 reads v2


def test_restart_keeps_port_and_data(local_kafka: LocalKafka) -> None:
    bootstrap = local_kafka.bootstrap
    first_pid = local_kafka.pid
    create_topic(bootstrap, "payroll.batches", partitions=2)
    value = schemas.encode("payroll.batches", BATCH)
    produce(bootstrap, "payroll.batches", b"ERP-KAFKA-1", value, [])

    assert local_kafka.stop() is not None
    assert not local_kafka.running
    assert first_pid is not None and not Path(f"/proc/{first_pid}").exists()
    assert not broker_answers(bootstrap, timeout=2)

    assert local_kafka.start() == bootstrap  # same port, same data directory
    assert local_kafka.pid not in (None, first_pid)
    message = consume_one(bootstrap, "payroll.batches")
    assert schemas.decode("payroll.batches", message.value()) == {**BATCH, "execute_on": None}  # v2 reads v2
    produce(bootstrap, "payroll.batches", b"ERP-KAFKA-2", value, [])
    _assert_topics_are_not_auto_created(bootstrap)


def _assert_topics_are_not_auto_created(bootstrap: str) -> None:
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 3000})
    producer.produce("no.such.topic", value=b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1
    assert errors[0] is not None
    assert errors[0].code() in (KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
    assert "no.such.topic" not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def _read_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "no output in time"
    return process.stdout.readline().strip()


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_dev_kafka_command_foreground_then_detached(tmp_path: Path) -> None:
    directory = tmp_path / "broker"
    command = [sys.executable, "-m", "processor.cli", "dev", "kafka", "--dir", str(directory)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = _read_line(process, 600)
        assert line.startswith("KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:"), line
        bootstrap = line.split("=", 1)[1]
        assert broker_answers(bootstrap)
        java_pid = int((directory / "kafka.pid").read_text())
        assert _alive(java_pid)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        assert not _alive(java_pid)
        assert not (directory / "kafka.pid").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    # Started again on the same directory, detached: same port, and `stop` ends it.
    detached = subprocess.run([*command, "--detach"], capture_output=True, text=True, timeout=600, env=env)
    assert detached.returncode == 0, detached.stderr
    values = dict(line.split("=", 1) for line in detached.stdout.split())
    assert values["KAFKA_BOOTSTRAP_SERVERS"] == bootstrap
    pid = int(values["KAFKA_PID"])
    try:
        assert _alive(pid)
        assert broker_answers(bootstrap)
        stopped = subprocess.run(
            [sys.executable, "-m", "processor.cli", "dev", "kafka", "stop", "--dir", str(directory)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert stopped.returncode == 0, stopped.stderr
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
