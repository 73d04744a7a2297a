"""Log lines name what they serve: every bank call made for a batch (by a worker, by the approval link, by the
callback) carries the batch id beside its interaction id, so one batch can be followed across steps and
instances by searching one field."""

from __future__ import annotations

from typing import Any

import structlog
from engine_support import engine_rig, pay

from processor.store import Store


async def test_every_bank_call_for_a_batch_names_the_batch(store: Store) -> None:
    async with engine_rig(store) as rig:
        with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            batch_id = await pay(rig)
    calls: list[dict[str, Any]] = [entry for entry in logs if entry.get("event") == "bank call"]
    operations = {str(entry["operation"]).split(" ")[0] for entry in calls}
    # Worker steps (A1, A2, A3, A4), the approval link (E4 PAR) and the callback (E6 code exchange).
    assert {"A1", "A2", "A3", "A4", "E4", "E6"} <= operations, operations
    for entry in calls:
        if entry["operation"].startswith("E1"):
            continue  # discovery serves the bank, not a batch
        assert entry.get("batch_id") == batch_id, entry
        assert entry.get("correlation_id"), entry
    assert structlog.contextvars.get_contextvars() == {}  # nothing leaked into the test's own context
