"""Scheduled batches in flow A: the file payment (A3) is created on the batch's `execute_on` day, never earlier.

The consent (A1), the upload (A2) and the approval happen at once, whatever the date. On approval the flow moves to
AUTHORIZED (the event carries `execute_on`) and is made due at the start of that day in its integration's time
zone (`Wait.EXECUTE_ON` of `FILE_TABLE`). The payment step checks the day again before anything is sent
(`hold`): a flow made due early (by an older version, a hand-edited row, a restart that reschedules it, a clock
that was wrong) is put back to wait, so the date holds even after a crash or restart.

The authorization-code token may expire while the flow waits (the spec's lives 432,000 s, five days): on the day,
`processor.engine.tokens.access_token` refreshes it with the refresh grant before A3, as it does for any token
about to expire. The intake refuses days further ahead than the integration's `schedule_max_days`, so the
refresh token is still valid on the day (docs/engine.md, "Scheduled batches").
"""

from __future__ import annotations

from datetime import datetime

import structlog

from processor.domain.file_states import FlowState
from processor.domain.time import iso_ms
from processor.engine.context import EngineContext
from processor.engine.leased import LeasedFlow
from processor.store import Flow

log = structlog.get_logger("processor.engine.file")


def payment_due_at(ctx: EngineContext, flow: Flow, now: datetime) -> datetime:
    """When the flow's payment may be created: `now`, or the start of its `execute_on` day in its integration's
    time zone when that is later."""
    if flow.execute_on is None:
        return now
    calendar = ctx.banks.integration(flow.integration).calendar
    return calendar.not_before(flow.execute_on, now)


async def hold(steps: LeasedFlow[Flow], flow: Flow, owner: str) -> Flow | None:
    """Before A3: None when the payment may be created now; otherwise the flow, made due again at the start of its
    day (the state table's wait), its lease given back, and nothing sent to the bank."""
    if flow.execute_on is None:
        return None
    now = steps.now()
    due_at = payment_due_at(steps.ctx, flow, now)
    if due_at <= now:
        return None
    log.info(
        "scheduled payment; waiting for its day",
        batch_id=flow.batch_id,
        execute_on=flow.execute_on.isoformat(),
        due_at=iso_ms(due_at),
    )
    later = steps.next_look(FlowState.AUTHORIZED, now, not_before=due_at)
    return await steps.update(flow, owner, next_action_at=later, attempts=0, release_lease=True)
