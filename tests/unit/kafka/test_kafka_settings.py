"""The `[kafka]` table's membership and partitioning settings as the clients get them: the producer always
partitions like the Java client, the processor's consumer joins as a static member named after its instance unless
`static_membership = false`, and a bad value is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
from bank_support import toml

from processor.cli.config import load_kafka_settings
from processor.domain.settings import ConfigError
from processor.kafka.clients import consumer_config, producer_config
from processor.kafka.settings import KafkaSettings, KafkaTable, settings_from


def kafka_problem(folder: Path, table: dict[str, object]) -> str:
    """The message a `[kafka]` table gets when the configuration is read."""
    path = folder / "dispersion.toml"
    path.write_text(f"kafka = {toml(table)}\n")
    with pytest.raises(ConfigError) as caught:
        load_kafka_settings(path, environ={})
    return str(caught.value)


def test_static_membership_is_on_by_default_and_names_the_instance() -> None:
    settings = settings_from(bootstrap="broker:9092")
    assert settings.static_membership is True
    config = consumer_config(settings, "processor", instance="processor-1")
    assert config["group.instance.id"] == "processor-1"
    assert config["group.id"] == "dispersion-processor"
    # A consumer that is no named instance (a library user's, a tool's) stays a dynamic member.
    assert "group.instance.id" not in consumer_config(settings, "batches")


def test_static_membership_can_be_switched_off() -> None:
    settings = settings_from(KafkaTable(static_membership=False), bootstrap="broker:9092")
    assert "group.instance.id" not in consumer_config(settings, "processor", instance="processor-1")


@pytest.mark.parametrize("value", ["yes", 1, "true"])
def test_a_static_membership_that_is_no_boolean_is_refused(tmp_path: Path, value: object) -> None:
    assert "kafka.static_membership: must be true or false" in kafka_problem(tmp_path, {"static_membership": value})


def test_an_unknown_kafka_key_lists_the_known_ones(tmp_path: Path) -> None:
    message = kafka_problem(tmp_path, {"static_member": True})
    assert "kafka.static_member: unknown key (did you mean 'static_membership'?); known keys: " in message


def test_every_producer_partitions_like_the_java_client() -> None:
    settings = KafkaSettings(bootstrap="broker:9092", client={"partitioner": "consistent_random"})
    assert producer_config(settings, "relay")["partitioner"] == "murmur2_random"
    assert producer_config(settings, "dlq", partitioner="random")["partitioner"] == "murmur2_random"
