"""Clocks: the protocol, and the system clock (shifted by the admin clock endpoint)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Anything that tells the current UTC time."""

    def now(self) -> datetime:
        """Return the current time, timezone-aware in UTC."""
        ...


class SystemClock:
    """The wall clock, optionally shifted by an offset (used by the admin clock endpoint)."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def now(self) -> datetime:
        """Return the wall-clock time plus the offset."""
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        """Move this clock forward."""
        self.offset += timedelta(seconds=seconds)


def iso_ms(moment: datetime) -> str:
    """Format a UTC instant as ISO 8601 with milliseconds and a Z suffix."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def epoch(moment: datetime) -> float:
    """Seconds since the epoch."""
    return moment.timestamp()
