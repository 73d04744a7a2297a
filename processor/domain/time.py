"""Time: the clock every part reads (the wall clock by default, injectable so tests move time by hand), and
our timestamp form (UTC, milliseconds).

Any object with a `now()` returning an aware UTC datetime fits (the tests' ManualClock does, structurally,
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


def utc_ms(moment: datetime) -> datetime:
    """The instant in UTC, truncated to whole milliseconds; a naive datetime is refused."""
    if moment.tzinfo is UTC and not moment.microsecond % 1000:
        return moment  # already so (the usual case: a store parameter of our own clock's making, once truncated)
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("timestamps must be timezone-aware")
    moment = moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def iso_ms(moment: datetime) -> str:
    """ISO 8601 UTC with milliseconds and `Z`, e.g. `2026-11-02T09:00:00.000Z`."""
    moment = utc_ms(moment)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


EARLIEST, LATEST = datetime(1900, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC)


def within_range(moment: datetime) -> datetime:
    """`moment` in UTC when it lies between 1900 and 9000 (a query's time bound), else ValueError: the extremes
    (`0001-01-01T00:00:00+01:00`, `9999-12-31`) overflow once converted or a day is added to them."""
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range (years 1900 to 8999)") from None
    if not EARLIEST <= utc < LATEST:
        raise ValueError("is out of range (years 1900 to 8999)")
    return utc
