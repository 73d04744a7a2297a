"""Client-side checks of a VRP payment against its mandate, before the bank is called.

The bank stays the authority; this only spares it payments that must fail. Pure: no I/O, no clock.

Periods. `Calendar` alignment uses natural UTC periods: the calendar day, the ISO week (Monday 00:00) and the
calendar month. `Consent` alignment counts from the consent's creation instant: days are 24-hour windows,
weeks 7-day windows, and months step by calendar months from the creation instant, the day of month clamped
to the month's length (created on 31 January: the next period starts on 28/29 February at the same time).
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum


class PeriodType(StrEnum):
    """Length of a periodic limit."""

    DAY = "Day"
    WEEK = "Week"
    MONTH = "Month"


class Alignment(StrEnum):
    """Where periods start."""

    CONSENT = "Consent"
    CALENDAR = "Calendar"


@dataclass(frozen=True)
class PeriodicLimit:
    """At most `amount` in total per period."""

    amount: Decimal
    currency: str
    period: PeriodType
    alignment: Alignment


@dataclass(frozen=True)
class Mandate:
    """The control parameters of an authorised VRP consent."""

    currency: str
    max_individual: Decimal
    periodic_limits: tuple[PeriodicLimit, ...]
    valid_from: datetime
    valid_to: datetime
    created_at: datetime


@dataclass(frozen=True)
class PastPayment:
    """A payment already accepted under the mandate (it counts against the periodic limits)."""

    amount: Decimal
    at: datetime


@dataclass(frozen=True)
class Breach:
    """Why a payment would break the mandate; `field` names the control parameter."""

    field: str
    message: str


def _add_months(moment: datetime, months: int) -> datetime:
    month_index = moment.month - 1 + months
    year = moment.year + month_index // 12
    month = month_index % 12 + 1
    day = min(moment.day, calendar.monthrange(year, month)[1])
    return moment.replace(year=year, month=month, day=day)


def period_window(limit: PeriodicLimit, created_at: datetime, at: datetime) -> tuple[datetime, datetime]:
    """The [start, end) of the period of `limit` that contains `at`."""
    at = at.astimezone(UTC)
    if limit.alignment is Alignment.CALENDAR:
        day = at.replace(hour=0, minute=0, second=0, microsecond=0)
        if limit.period is PeriodType.DAY:
            return day, day + timedelta(days=1)
        if limit.period is PeriodType.WEEK:
            start = day - timedelta(days=day.weekday())
            return start, start + timedelta(days=7)
        start = day.replace(day=1)
        return start, _add_months(start, 1)
    origin = created_at.astimezone(UTC)
    if limit.period is not PeriodType.MONTH:
        length = timedelta(days=1 if limit.period is PeriodType.DAY else 7)
        index = (at - origin) // length
        start = origin + index * length
        return start, start + length
    # Month steps from the creation instant; estimate the index, then correct by at most one step each way.
    index = (at.year - origin.year) * 12 + (at.month - origin.month)
    while _add_months(origin, index) > at:
        index -= 1
    while _add_months(origin, index + 1) <= at:
        index += 1
    return _add_months(origin, index), _add_months(origin, index + 1)


@dataclass(frozen=True)
class PeriodUse:
    """One periodic limit in the period that contains a moment: what the accepted payments used of it, what is
    left, and when the next period starts (`end`)."""

    index: int
    limit: PeriodicLimit
    start: datetime
    end: datetime
    used: Decimal
    left: Decimal


def period_usage(mandate: Mandate, at: datetime, history: list[PastPayment]) -> list[PeriodUse]:
    """The client-side ledger at `at`: each periodic limit's current period with its used and remaining amounts
    (never below zero), counting the payments of `history` made in that period."""
    uses: list[PeriodUse] = []
    for i, limit in enumerate(mandate.periodic_limits):
        start, end = period_window(limit, mandate.created_at, at)
        used = sum((p.amount for p in history if start <= p.at < end), Decimal("0.00"))
        uses.append(PeriodUse(i, limit, start, end, used, max(limit.amount - used, Decimal("0.00"))))
    return uses


def check_payment(
    mandate: Mandate, amount: Decimal, currency: str, at: datetime, history: list[PastPayment]
) -> list[Breach]:
    """Every way a payment of `amount` at `at` would break the mandate (empty when it fits)."""
    breaches: list[Breach] = []
    if amount <= 0 or amount != amount.quantize(Decimal("0.01")):
        breaches.append(Breach("InstructedAmount.Amount", f"amount {amount} must be positive with at most 2 decimals"))
    if currency != mandate.currency:
        breaches.append(
            Breach("InstructedAmount.Currency", f"currency {currency} differs from the mandate's {mandate.currency}")
        )
    if not mandate.valid_from <= at <= mandate.valid_to:
        breaches.append(
            Breach(
                "ControlParameters.ValidFromDateTime"
                if at < mandate.valid_from
                else "ControlParameters.ValidToDateTime",
                f"{at.isoformat()} is outside the mandate's validity",
            )
        )
    if amount > mandate.max_individual:
        breaches.append(
            Breach(
                "ControlParameters.MaximumIndividualAmount",
                f"amount {amount} exceeds the maximum per payment {mandate.max_individual}",
            )
        )
    for use in period_usage(mandate, at, history):
        limit, used = use.limit, use.used
        if used + amount > limit.amount:
            breaches.append(
                Breach(
                    f"ControlParameters.PeriodicLimits[{use.index}]",
                    f"{limit.period.value} limit {limit.amount} ({limit.alignment.value}-aligned) "
                    f"would be exceeded: {used} already used, {amount} requested",
                )
            )
    return breaches
