"""The flow engine's tunables: the `[engine]` table of the configuration file (all keys optional).

    [engine]
    authorization_deadline = 172800   # seconds the approver has, from AUTHORIZATION_REQUIRED (48 h)
    concurrency = 32                  # flow steps run at once per instance
    lease_seconds = 120               # how long a claimed flow is held (renewed while a step runs)
    idle_interval = 0.5               # seconds between claims when nothing is due
    poll_first = 1.0                  # first wait before re-reading a pending file payment
    poll_max = 60.0                   # longest wait between two reads
    retry_first = 2.0                 # first wait after a failed (transient) bank call
    retry_max = 300.0                 # longest wait between two tries
    attempt_ttl = 600                 # seconds an authorization attempt (`state`) stays usable
    duplicate_wait = 10.0             # a repeated redirect waits this long for the first one to finish
    exchange_recovery_after = 30      # a used `state` whose code exchange left no tokens may be retried after this
    consent_watch_interval = 60       # seconds between two reads of a consent awaiting its approver
    mandate_watch_interval = 3600     # seconds between two reads of an authorised VRP mandate's consent
    duplicate_window_days = 35        # a batch paying what another of the last 35 days pays is held (0: off)
    duplicate_overlap = 0.8           # ... when it shares at least this share of its transfers (account, amount)

Unknown keys and out-of-range values are refused with the key named, like the rest of the configuration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from processor.domain.settings import ConfigError
from processor.domain.steps import doubling


@dataclass(frozen=True)
class EngineSettings:
    """Tunables of the flow engine, the worker and the authorization machinery (seconds unless noted)."""

    authorization_deadline: float = 172_800.0
    concurrency: int = 32
    lease_seconds: float = 120.0
    idle_interval: float = 0.5
    poll_first: float = 1.0
    poll_max: float = 60.0
    retry_first: float = 2.0
    retry_max: float = 300.0
    attempt_ttl: float = 600.0
    duplicate_wait: float = 10.0
    exchange_recovery_after: float = 30.0
    consent_watch_interval: float = 60.0
    mandate_watch_interval: float = 3600.0
    duplicate_window_days: float = 35.0  # the duplicate-payroll guard looks this far back (0: off)
    duplicate_overlap: float = 0.8  # share of a new batch's transfers another batch must hold to hold it

    def poll_delay(self, attempt: int) -> float:
        """Wait before the next read of a pending payment: doubling from `poll_first`, capped at `poll_max`."""
        return doubling(attempt, self.poll_first, self.poll_max)

    def retry_delay(self, attempt: int) -> float:
        """Wait before trying a failed step again: doubling from `retry_first`, capped at `retry_max`."""
        return doubling(attempt, self.retry_first, self.retry_max)


# (low, high) per key; also the ranges of the configuration models and the JSON Schema (processor/cli/config_models.py).
ENGINE_LIMITS: dict[str, tuple[float, float]] = {
    "authorization_deadline": (1, 90 * 86_400),
    "concurrency": (1, 10_000),
    "lease_seconds": (1, 3_600),
    "idle_interval": (0.001, 60),
    "poll_first": (0.001, 3_600),
    "poll_max": (0.001, 86_400),
    "retry_first": (0.001, 3_600),
    "retry_max": (0.001, 86_400),
    "attempt_ttl": (10, 86_400),
    "duplicate_wait": (0, 120),
    "exchange_recovery_after": (1, 86_400),
    "consent_watch_interval": (1, 86_400),
    "mandate_watch_interval": (1, 7 * 86_400),
    "duplicate_window_days": (0, 366),
    "duplicate_overlap": (0.01, 1),
}


def engine_settings(table: Mapping[str, Any] | None = None, *, source: str = "<memory>") -> EngineSettings:
    """Read the `[engine]` table (`source` names the file in errors); defaults when absent."""
    table = table or {}
    known = {f.name: f for f in fields(EngineSettings)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{source}: engine.{key}: unknown key (known: {', '.join(sorted(known))})")
        low, high = ENGINE_LIMITS[key]
        if key == "concurrency":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{source}: engine.{key}: must be an integer, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{source}: engine.{key}: must be a number of seconds, got {value!r}")
        if not low <= value <= high:
            raise ConfigError(f"{source}: engine.{key}: must be between {low:g} and {high:g}, got {value!r}")
        values[key] = value if key == "concurrency" else float(value)
    settings = EngineSettings(**values)
    if settings.poll_max < settings.poll_first or settings.retry_max < settings.retry_first:
        raise ConfigError(f"{source}: engine: poll_max/retry_max must not be smaller than poll_first/retry_first")
    return settings
