"""What every part of the engine shares: the store, the bank clients, the clock, the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from processor.domain.time import Clock, SystemClock
from processor.engine.banks import BankPool
from processor.engine.settings import EngineSettings
from processor.store import Store

Checkpoint = Callable[[str, str], None]
"""Called as `checkpoint(point, flow_id)` at named points of a step (e.g. `create_consent:before`): a test
raises from it to abort the step exactly there, as a crash would."""


def _no_checkpoint(point: str, flow_id: str) -> None:
    return None


@dataclass
class EngineContext:
    """The engine's collaborators. `public_url` is where the callback API (and so the approval links) live."""

    store: Store
    banks: BankPool
    public_url: str
    settings: EngineSettings = field(default_factory=lambda: EngineSettings())
    clock: Clock = field(default_factory=SystemClock)
    checkpoint: Checkpoint = _no_checkpoint
    # Called after a change that makes work due now (e.g. the redirect authorised a flow), to wake the worker.
    notify: Callable[[], None] = lambda: None
