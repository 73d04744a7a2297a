"""The time source of the bank client: the wall clock by default, injectable so tests move time by hand.

Any object with a `now()` returning an aware UTC datetime fits (the sandbox's ManualClock does, structurally,
without the processor importing it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Anything that tells the current UTC time."""

    def now(self) -> datetime:
        """The current time, timezone-aware in UTC."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        """The current wall-clock time in UTC."""
        return datetime.now(UTC)
