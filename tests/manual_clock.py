"""A clock the tests move by hand (the sandbox's and the processor's clocks are protocols it fits)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or datetime(2026, 11, 2, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        """Return the stored time."""
        return self.current

    def advance(self, seconds: float) -> None:
        """Move this clock forward."""
        self.current += timedelta(seconds=seconds)
