"""A message that kills the process is dead-lettered after `poison_attempts` restarts (issue 10), on a real broker
and a real PostgreSQL store.

The first three "instances" are the processor's consumer loop in a child process (`poison_child.py`: the same
configuration, group, static instance name, store-kept attempt log and intake) whose handling of one batch ends
the process at once, as running out of memory would; the test restarts it each time, as a supervisor does. Each
attempt is counted in the store before the handler runs, so the fourth start, the real `dispersion processor`
under the same instance name, dead-letters that message without handing it to its intake again (the batch is
valid: an intake that saw it would store it), then consumes the batch behind it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from processor_support import (
    BATCHES_TOPIC,
    DLQ_TOPIC,
    DeploymentFactory,
    TopicLog,
    count_rows,
    deployment_factory_fixture,  # noqa: F401  (the fixture deployment_factory)
    e2e_database_fixture,  # noqa: F401  (the fixture e2e_database)
    payroll_batch,
    unique_id,
)

from processor.devtools.processes import eventually

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(400)]

HERE = Path(__file__).parent
CRASHED = 70  # poison_child.py's exit status when the batch killed it
POISON_ATTEMPTS = 3  # the consumer loop's default


def _run_child(config: Path, instance: str, poison: str, store_key: str) -> subprocess.CompletedProcess[bytes]:
    root = HERE.parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(HERE.parent)]),
        "DISPERSION_STORE_KEY": store_key,
    }
    env.pop("DISPERSION_STORE_ALLOW_DEV_KEY", None)
    return subprocess.run(
        [sys.executable, str(HERE / "poison_child.py"), str(config), instance, poison],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_a_message_that_kills_the_process_goes_to_the_dlq_after_poison_attempts_restarts(
    kafka_bootstrap: str, deployment_factory: DeploymentFactory
) -> None:
    deployment = deployment_factory(kafka_bootstrap, partitions=1)  # one partition: the poison blocks what follows
    poison, after = unique_id("ERP-OOM"), unique_id("ERP-AFTER")
    producer = deployment.producer()
    producer.send(BATCHES_TOPIC, poison, payroll_batch(poison))
    producer.send(BATCHES_TOPIC, after, payroll_batch(after))
    instance = unique_id("p-poison")
    topic = deployment.topics[BATCHES_TOPIC]
    attempts_sql = (
        f"SELECT COALESCE(SUM(attempts), 0) FROM delivery_attempts WHERE topic = '{topic}' AND source_offset = 0"
    )

    for restart in range(1, POISON_ATTEMPTS + 1):
        child = _run_child(deployment.config_path, instance, poison, deployment.store_key)
        assert child.returncode == CRASHED, child.stderr.decode()[-3000:] + child.stdout.decode()[-2000:]
        assert count_rows(deployment.store_url, attempts_sql) == restart  # counted before the handler ran
    assert count_rows(deployment.store_url, "SELECT COUNT(*) FROM flows") == 0  # nothing got past the poison

    letters = TopicLog(kafka_bootstrap, deployment.topics[DLQ_TOPIC], DLQ_TOPIC)
    try:
        processor = deployment.start(0, name=instance)  # the next restart: the real processor

        def lettered_and_consumed() -> bool:
            if letters.events and count_rows(
                deployment.store_url, f"SELECT COUNT(*) FROM flows WHERE batch_id = '{after}'"
            ):
                return True
            letters.poll(0.5)
            return False

        eventually(
            lettered_and_consumed,
            what=f"a dead letter and {after} consumed",
            timeout=90,
            interval=0,
            child=processor,
        )
        letters.poll(1.0)
    finally:
        letters.close()

    assert [e.key for e in letters.events] == [poison]  # dead-lettered once, whole
    record = letters.events[0].record
    assert (record["topic"], record["partition"], record["offset"]) == (topic, 0, 0)
    assert record["reason"].startswith(f"not handled after {POISON_ATTEMPTS} attempts")
    # The intake never saw it (it would have stored this valid batch); the batch behind it was consumed.
    assert count_rows(deployment.store_url, f"SELECT COUNT(*) FROM flows WHERE batch_id = '{poison}'") == 0
    reasons = count_rows(
        deployment.store_url,
        "SELECT COUNT(*) FROM dead_letters WHERE source_offset = 0"
        f" AND reason LIKE 'not handled after {POISON_ATTEMPTS} attempts%'",
    )
    assert reasons == 1  # listed for the operator too
    cleared = lambda: count_rows(deployment.store_url, attempts_sql) == 0  # noqa: E731 (once its offset was committed)
    eventually(cleared, what="the dead-lettered message's attempt count cleared", timeout=30, interval=0.2)
