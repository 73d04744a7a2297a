"""The consumer-lag gauge follows the partitions this member owns: librdkafka's statistics can be served after a
revoke (close() serves queued callbacks), and a stale sample must not bring back a series the revoke removed."""

from __future__ import annotations

import json

from confluent_kafka import TopicPartition
from prometheus_client import REGISTRY

from consumers.loop import _forget_lag, _record_lag


def stats(topic: str, lags: dict[int, int]) -> str:
    partitions = {str(p): {"consumer_lag": lag} for p, lag in lags.items()}
    partitions["-1"] = {"consumer_lag": 99}  # librdkafka's internal partition: never a series
    return json.dumps({"topics": {topic: {"partitions": partitions}}})


def lag(topic: str, partition: int) -> float | None:
    return REGISTRY.get_sample_value("dispersion_consumer_lag", {"topic": topic, "partition": str(partition)})


def test_only_owned_partitions_are_reported() -> None:
    assigned = {("unit.lag.a", 0)}
    _record_lag(stats("unit.lag.a", {0: 4, 1: 7}), assigned)
    assert lag("unit.lag.a", 0) == 4
    assert lag("unit.lag.a", 1) is None  # not ours
    assert lag("unit.lag.a", -1) is None


def test_statistics_served_after_a_revoke_do_not_bring_the_series_back() -> None:
    assigned = {("unit.lag.b", 0)}
    before_revoke = stats("unit.lag.b", {0: 3})
    _record_lag(before_revoke, assigned)
    assert lag("unit.lag.b", 0) == 3
    _forget_lag([TopicPartition("unit.lag.b", 0)], assigned)
    assert lag("unit.lag.b", 0) is None
    assert assigned == set()
    _record_lag(before_revoke, assigned)  # the queued sample, served by close()
    assert lag("unit.lag.b", 0) is None


def test_unreadable_statistics_are_ignored() -> None:
    _record_lag("not json", {("unit.lag.c", 0)})
    _record_lag(
        json.dumps({"topics": {"unit.lag.c": {"partitions": {"0": {"consumer_lag": "x"}}}}}), {("unit.lag.c", 0)}
    )
    assert lag("unit.lag.c", 0) is None
