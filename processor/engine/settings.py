"""The flow engine's tunables: the `[engine]` table of the configuration file (all keys optional; seconds unless
noted). Each key's default and bounds are declared here once; the configuration and its JSON Schema use this
model as it is."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from processor.domain.settings import Table, problem
from processor.domain.steps import doubling

DAY = 86_400


class EngineSettings(Table):
    """`[engine]`: the flow engine's, the worker's and the authorization machinery's tunables."""

    authorization_deadline: float = Field(default=172_800.0, ge=1, le=90 * DAY)
    """Seconds the approver has, from AUTHORIZATION_REQUIRED."""
    concurrency: int = Field(default=32, ge=1, le=10_000)
    """Flow steps run at once per instance."""
    lease_seconds: float = Field(default=120.0, ge=1, le=3_600)
    """How long a claimed flow is held (renewed while a step runs)."""
    idle_interval: float = Field(default=0.5, ge=0.001, le=60)
    """Seconds between claims when nothing is due."""
    poll_first: float = Field(default=1.0, ge=0.001, le=3_600)
    """First wait before re-reading a pending file payment."""
    poll_max: float = Field(default=60.0, ge=0.001, le=DAY)
    """Longest wait between two reads."""
    retry_first: float = Field(default=2.0, ge=0.001, le=3_600)
    """First wait after a failed (transient) bank call."""
    retry_max: float = Field(default=300.0, ge=0.001, le=DAY)
    """Longest wait between two tries."""
    attempt_ttl: float = Field(default=600.0, ge=10, le=DAY)
    """Seconds an authorization attempt (`state`) stays usable."""
    duplicate_wait: float = Field(default=10.0, ge=0, le=120)
    """A repeated redirect waits this long for the first one to finish."""
    exchange_recovery_after: float = Field(default=30.0, ge=1, le=DAY)
    """A used `state` whose code exchange left no tokens may be retried after this."""
    consent_watch_interval: float = Field(default=60.0, ge=1, le=DAY)
    """Seconds between two reads of a consent awaiting its approver (a rejection whose redirect was lost)."""
    mandate_watch_interval: float = Field(default=3600.0, ge=1, le=7 * DAY)
    """Seconds between two reads of an authorised VRP mandate's consent (revoked, rejected or expired at the bank),
    also read before a payment when the last read is older."""
    duplicate_window_days: float = Field(default=35.0, ge=0, le=366)
    """Days back a new batch's transfers are compared with other batches' (the duplicate-payroll guard); 0: off."""
    duplicate_overlap: float = Field(default=0.8, ge=0.01, le=1)
    """Share of a new batch's transfers (same account, same amount) another recent batch must hold to hold it."""

    @field_validator("poll_max", "retry_max")
    @classmethod
    def _not_below_first(cls, value: float, info: ValidationInfo) -> float:
        first = info.data.get(str(info.field_name).replace("_max", "_first"))
        if first is not None and value < first:
            raise problem(f"must not be smaller than {str(info.field_name).replace('_max', '_first')}")
        return value

    def poll_delay(self, attempt: int) -> float:
        """Wait before the next read of a pending payment: doubling from `poll_first`, capped at `poll_max`."""
        return doubling(attempt, self.poll_first, self.poll_max)

    def retry_delay(self, attempt: int) -> float:
        """Wait before trying a failed step again: doubling from `retry_first`, capped at `retry_max`."""
        return doubling(attempt, self.retry_first, self.retry_max)
