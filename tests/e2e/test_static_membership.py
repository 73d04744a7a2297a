"""Static group membership (`[kafka] static_membership`, `group.instance.id` = the instance name): a processor
killed with SIGKILL and restarted under the same name takes its partitions back at once, while a dynamic member's
restart waits until the broker expires the dead member's session. Real processes, a real broker, a real store.

The mechanism is compared, not a speed: the dead member's last heartbeat was at most `heartbeat.interval.ms` before
the kill, so the broker cannot expire it earlier than `session.timeout.ms - heartbeat.interval.ms` after the kill. A
dynamic member's assignment must come after that point, a static member's before it. Two live instances with one
name: the broker fences the older one, which stops with a clear message (exit 1)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from processor_support import (
    BATCHES_TOPIC,
    Deployment,
    DeploymentFactory,
    ProcessorProcess,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    log_events,
    payroll_batch,
    unique_id,
)

from processor.devtools.processes import eventually

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(240)]

SESSION = timedelta(seconds=12)  # session.timeout.ms, short to keep the dynamic case short (default 45 s)
HEARTBEAT = timedelta(seconds=3)  # librdkafka's default heartbeat.interval.ms
NAME = "proc-a"


@dataclass(frozen=True)
class Restart:
    """When the old instance was killed, the new one started, got its partitions and consumed the batch."""

    killed: datetime
    started: datetime
    assigned: datetime
    consumed: datetime

    def report(self, label: str) -> str:
        def s(moment: datetime) -> str:
            return f"{(moment - self.killed).total_seconds():.1f} s"

        return (
            f"{label}: after the kill, restarted at {s(self.started)}, partitions at {s(self.assigned)}, consumed "
            f"the batch at {s(self.consumed)}; start->consumed {(self.consumed - self.started).total_seconds():.1f} s "
            f"(session.timeout.ms {SESSION.total_seconds():.0f} s)"
        )


def _at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(entry["timestamp"]))


def _consumed(instance: ProcessorProcess, batch_id: str, timeout: float) -> dict[str, Any]:
    """The instance's `batch_consumed` log line for `batch_id` (waits for it)."""

    def entry() -> dict[str, Any] | None:
        for logged in log_events(instance):
            if logged.get("event") == "batch_consumed" and logged.get("batch_id") == batch_id:
                return logged
        return None

    found: dict[str, Any] = eventually(
        entry, what=f"{batch_id} consumed", timeout=timeout, interval=0.1, child=instance
    )
    return found


def _kill_and_restart(deployment: Deployment) -> tuple[Restart, ProcessorProcess]:
    """Run instance 0, let it consume a batch, SIGKILL it, submit a batch while it is down, start it again under
    the same name; when each step happened."""
    producer = deployment.producer()
    first, second = unique_id("SM-1"), unique_id("SM-2")
    instance = deployment.start(0, name=NAME)
    producer.send(BATCHES_TOPIC, first, payroll_batch(first))
    _consumed(instance, first, timeout=60)  # a member of a stable group, partitions assigned and consumed

    killed = datetime.now(UTC)
    instance.kill()
    producer.send(BATCHES_TOPIC, second, payroll_batch(second))
    started = datetime.now(UTC)
    restarted = deployment.start(0, name=NAME, wait=False)
    consumed = _consumed(restarted, second, timeout=SESSION.total_seconds() + 60)
    topic = deployment.topics[BATCHES_TOPIC]
    assigned = next(
        e
        for e in log_events(restarted)
        if e.get("event") == "partitions_assigned" and any(p.startswith(f"{topic}[") for p in e["partitions"])
    )
    return Restart(killed, started, _at(assigned), _at(consumed)), restarted


def _deployment(factory: DeploymentFactory, bootstrap: str, *, static: bool) -> Deployment:
    session_ms = int(SESSION.total_seconds() * 1000)
    return factory(
        bootstrap,
        instances=2,
        partitions=3,
        kafka={"static_membership": static, "client": {"session.timeout.ms": session_ms}},
    )


def test_a_static_member_restarted_takes_its_partitions_back_at_once_and_a_namesake_is_fenced(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = _deployment(deployment_factory, kafka_bootstrap, static=True)
    restart, restarted = _kill_and_restart(deployment)
    print(restart.report("static membership"))
    assert restart.started < restart.assigned <= restart.consumed
    assert restart.assigned - restart.killed < SESSION - HEARTBEAT, restart.report("static")

    # A second live instance under the same name: the broker fences the older one, which says why and exits 1.
    namesake = deployment.start(1, name=NAME)
    restarted.process.wait(60)
    assert restarted.process.returncode == 1, restarted.log()[-3000:]
    assert f"another live member of group {deployment.group_id!r} uses group.instance.id {NAME!r}" in restarted.log()
    assert "Instance names (--instance) must be unique" in restarted.log()
    assert namesake.alive
    assert namesake.terminate() == 0, namesake.log()[-3000:]


def test_a_dynamic_member_restarted_waits_for_the_dead_members_session_to_expire(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = _deployment(deployment_factory, kafka_bootstrap, static=False)
    restart, restarted = _kill_and_restart(deployment)
    print(restart.report("dynamic membership"))
    assert restart.assigned - restart.killed >= SESSION - HEARTBEAT, restart.report("dynamic")
    assert restart.assigned <= restart.consumed
    assert restarted.terminate() == 0, restarted.log()[-3000:]
