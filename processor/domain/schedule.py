"""Scheduled initiation, pure: on which day a batch's file payment may be made, in its integration's time zone.

A batch may name an `execute_on` day. The consent and the approval happen at once; the file payment (A3) is
created on that day, never earlier (docs/engine.md, "Scheduled batches"). Days are counted in the integration's
configured time zone (`[integrations.NAME] timezone`, an IANA name, UTC by default):

    calendar = Calendar(ZoneInfo("America/Guatemala"), max_days_ahead=28)
    calendar.today(now)                     # the integration's date at the instant `now`
    calendar.start_of(date(2026, 11, 30))   # the first instant of that day there, in UTC
    calendar.due(date(2026, 11, 30), now)   # may the payment be created at `now`?
    calendar.problem(date(2026, 11, 30), now)   # why a batch cannot be scheduled for that day (None: it can)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, tzinfo
from typing import Final

# How far ahead a batch may be scheduled, in days after the day it arrives: the approver's token must still be
# renewable on the day (the sandbox's refresh token lasts 30 days from the approval; docs/engine.md).
DEFAULT_MAX_DAYS_AHEAD: Final = 28


@dataclass(frozen=True)
class Calendar:
    """An integration's calendar: its time zone, and how many days ahead a batch may be scheduled."""

    zone: tzinfo = UTC
    max_days_ahead: int = DEFAULT_MAX_DAYS_AHEAD

    def today(self, now: datetime) -> date:
        """The date in the integration's time zone at the (aware) instant `now`."""
        return now.astimezone(self.zone).date()

    def start_of(self, day: date) -> datetime:
        """The first instant of `day` in the integration's time zone, in UTC. A midnight skipped by a daylight-
        saving change is read with the offset before it, which is the instant the day starts."""
        return datetime.combine(day, time(0), tzinfo=self.zone).astimezone(UTC)

    def due(self, execute_on: date | None, now: datetime) -> bool:
        """Whether a payment scheduled for `execute_on` may be created at `now` (always, when not scheduled)."""
        return execute_on is None or self.today(now) >= execute_on

    def not_before(self, execute_on: date | None, now: datetime) -> datetime:
        """When a payment scheduled for `execute_on` is due: the start of that day, or `now` when it already is."""
        if execute_on is None or self.due(execute_on, now):
            return now
        return self.start_of(execute_on)

    def problem(self, execute_on: date | None, now: datetime) -> str | None:
        """Why a batch arriving at `now` cannot be scheduled for `execute_on`: a day already past in the
        integration's time zone, or more than `max_days_ahead` days ahead. None when it can (today included)."""
        if execute_on is None:
            return None
        today = self.today(now)
        if execute_on < today:
            return f"execute_on {execute_on.isoformat()} is in the past (today is {today.isoformat()} in {self.zone})"
        ahead = (execute_on - today).days
        if ahead > self.max_days_ahead:
            return (
                f"execute_on {execute_on.isoformat()} is {ahead} days ahead, more than {self.max_days_ahead} days "
                "(the approval's token must still be renewable on the day)"
            )
        return None
