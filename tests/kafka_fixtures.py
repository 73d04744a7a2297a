"""Kafka fixtures (loaded from tests/conftest.py as a pytest plugin): a real Apache Kafka broker for the tests.

- `kafka_bootstrap` (session): a bootstrap address. In order: `KAFKA_BOOTSTRAP_SERVERS` when set; a
  testcontainers broker when the optional `testcontainers` package imports and a Docker engine answers; else a
  local single-node KRaft broker from the Maven Central jars (`processor.devtools.kafka_local`, the same broker as
  `dispersion dev kafka`). What the fixture started is stopped at the end of the session.
- `local_kafka` (per test): a dedicated local broker the test may stop, start and restart (same ports, same
  data), e.g. for broker-restart tests. Always the local broker, whatever `kafka_bootstrap` uses.
- `kafka_topic`: a fresh uniquely named topic (3 partitions) on `kafka_bootstrap`.

Without Java or Maven the fixtures skip; with `DISPERSION_REQUIRE_KAFKA=1` (CI) they fail instead.
The first local start downloads the jars (allow a few minutes on a cold Maven repository); `dispersion dev kafka
fetch` warms the cache.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processor.devtools.kafka_local import KafkaLocalError, LocalKafka

REQUIRE_KAFKA_ENV = "DISPERSION_REQUIRE_KAFKA"
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
IMAGE_ENV = "DISPERSION_KAFKA_IMAGE"
DEFAULT_IMAGE = "confluentinc/cp-kafka:7.6.0"


def kafka_unavailable(reason: str) -> None:
    """Skip, or fail when CI demands a real broker."""
    if os.environ.get(REQUIRE_KAFKA_ENV, "") == "1":
        pytest.fail(f"{REQUIRE_KAFKA_ENV}=1 but no Kafka broker could be started: {reason}")
    pytest.skip(f"no Kafka broker: {reason}")


def _docker_engine_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]  # comes with testcontainers

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no SDK, no socket, no permission: all mean "no Docker here"
        return False


def _start_container() -> Any | None:
    """A started testcontainers Kafka, or None when testcontainers or a Docker engine is missing."""
    try:
        from testcontainers.kafka import KafkaContainer
    except ImportError:
        return None
    if not _docker_engine_answers():
        return None
    container = KafkaContainer(os.environ.get(IMAGE_ENV, DEFAULT_IMAGE)).with_kraft()
    # The same strictness as the local broker: topics are created by the project, replication factors 1.
    container.with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
    container.with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
    container.with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
    container.start(timeout=120)
    return container


def _start_local(directory: Path) -> LocalKafka:
    broker = LocalKafka(directory)
    try:
        broker.start()
    except (KafkaLocalError, OSError) as exc:
        broker.stop()
        kafka_unavailable(str(exc))
    return broker


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of a real Kafka broker for this test session."""
    configured = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if configured:
        yield configured
        return
    container = _start_container()
    if container is not None:
        try:
            yield str(container.get_bootstrap_server())
        finally:
            container.stop()
        return
    broker = _start_local(tmp_path_factory.mktemp("kafka-session"))
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def local_kafka(tmp_path: Path) -> Iterator[LocalKafka]:
    """A started local broker owned by this test (stop, then start, keeps its ports and data)."""
    broker = _start_local(tmp_path / "kafka")
    try:
        yield broker
    finally:
        broker.stop()


def create_topic(bootstrap: str, name: str, partitions: int = 3, timeout: float = 30.0) -> None:
    """Create a topic and wait until the broker has it."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout)


@pytest.fixture
def kafka_topic(kafka_bootstrap: str) -> str:
    """A new topic with a unique name on the session broker."""
    name = f"test.{uuid.uuid4().hex[:12]}"
    create_topic(kafka_bootstrap, name)
    return name
