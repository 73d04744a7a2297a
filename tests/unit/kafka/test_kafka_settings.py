"""The `[kafka]` table's membership and partitioning settings as the clients get them: the producer always
partitions like the Java client, the processor's consumer joins as a static member named after its instance unless
`static_membership = false`, and a bad value is a clear error."""

from __future__ import annotations

import pytest

from processor.kafka.clients import consumer_config, producer_config
from processor.kafka.settings import KafkaSettings, KafkaSetupError, settings_from


def test_static_membership_is_on_by_default_and_names_the_instance() -> None:
    settings = settings_from({}, bootstrap="broker:9092")
    assert settings.static_membership is True
    config = consumer_config(settings, "processor", instance="processor-1")
    assert config["group.instance.id"] == "processor-1"
    assert config["group.id"] == "dispersion-processor"
    # A consumer that is no named instance (a library user's, a tool's) stays a dynamic member.
    assert "group.instance.id" not in consumer_config(settings, "batches")


def test_static_membership_can_be_switched_off() -> None:
    settings = settings_from({"static_membership": False}, bootstrap="broker:9092")
    assert "group.instance.id" not in consumer_config(settings, "processor", instance="processor-1")


@pytest.mark.parametrize("value", ["yes", 1, "true"])
def test_a_static_membership_that_is_no_boolean_is_refused(value: object) -> None:
    with pytest.raises(KafkaSetupError, match=r"\[kafka\] static_membership must be true or false"):
        settings_from({"static_membership": value}, bootstrap="broker:9092")


def test_an_unknown_kafka_key_lists_the_known_ones() -> None:
    with pytest.raises(KafkaSetupError, match=r"unknown key\(s\) static_member \(known: .*static_membership"):
        settings_from({"static_member": True}, bootstrap="broker:9092")


def test_every_producer_partitions_like_the_java_client() -> None:
    settings = KafkaSettings(bootstrap="broker:9092", client={"partitioner": "consistent_random"})
    assert producer_config(settings, "relay")["partitioner"] == "murmur2_random"
    assert producer_config(settings, "dlq", partitioner="random")["partitioner"] == "murmur2_random"
