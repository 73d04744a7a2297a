"""The shape of a state table, pure: what the engine does in each state of a flow, where it may go, and how long
it waits before looking again. The tables themselves are in `file_states` and `vrp_states`; the engine's
leased-flow base (`processor.engine.leased`) dispatches on them.

    FILE_TABLE[INITIATED] == Rule("poll_payment", frozenset({COMPLETED, FAILED}), Wait.POLL, Approval.AUTHORIZED)

- `handler`: the name of the flow's method that takes the step (None: nothing to do in this state; the flow
  waits for an outside event, such as the approver, or has ended). Only states with a handler are claimed.
- `moves`: the states a move from here may reach (the transition table; no moves: the state is terminal).
- `wait`: how the next look is scheduled while the flow stays in this state (see `Wait`).
- `approval`: what the approval link answers for a flow in this state (see `Approval`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

S = TypeVar("S", bound=StrEnum)


class Wait(StrEnum):
    """How long a flow waits in a state before the engine looks again."""

    POLL = "poll"  # doubling from the engine's poll_first up to poll_max (a payment the bank is working on)
    CHECK = "check"  # poll_max, never past the authorization deadline (a parked payment)
    WATCH = "watch"  # consent_watch_interval, never past the deadline (a consent awaiting its approver is read)
    MANDATE = "mandate"  # mandate_watch_interval, never past the deadline (an authorised mandate's consent is read)
    EXECUTE_ON = "execute_on"  # until the start of a scheduled batch's day (its integration's time zone), or now


class Approval(StrEnum):
    """Where a flow in a state stands with its approver (what its approval link answers)."""

    NOT_READY = "not_ready"  # no consent to approve yet
    AWAITING = "awaiting"  # the link works
    AUTHORIZED = "authorized"  # approved already
    REJECTED = "rejected"
    EXPIRED = "expired"
    ENDED = "ended"  # failed or invalid: nothing to approve any more


@dataclass(frozen=True)
class Rule(Generic[S]):
    """One row of a state table."""

    handler: str | None
    moves: frozenset[S]
    wait: Wait | None = None
    approval: Approval = Approval.NOT_READY

    @property
    def terminal(self) -> bool:
        """No move leaves this state."""
        return not self.moves


def handled_states(table: Mapping[S, Rule[S]]) -> tuple[str, ...]:
    """The states in which the engine has a step to take (the ones it claims work in)."""
    return tuple(state.value for state, rule in table.items() if rule.handler is not None)


def doubling(attempt: int, first: float, cap: float) -> float:
    """Seconds before the next try: doubling from `first` per attempt (attempt 0 waits `first`), capped."""
    return float(min(cap, first * (2 ** min(max(0, attempt), 30))))
