"""The processor's client-side VRP limit checks (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from processor.domain.vrp_limits import (
    Alignment,
    Mandate,
    PastPayment,
    PeriodicLimit,
    PeriodType,
    check_payment,
    period_usage,
    period_window,
)

T0 = datetime(2026, 1, 31, 10, 30, tzinfo=UTC)


def mandate(*limits: PeriodicLimit, max_individual: str = "100.00") -> Mandate:
    return Mandate(
        "GBP", Decimal(max_individual), limits, datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC), T0
    )


def limit(amount: str, period: PeriodType, alignment: Alignment) -> PeriodicLimit:
    return PeriodicLimit(Decimal(amount), "GBP", period, alignment)


def test_individual_limit_boundary() -> None:
    m = mandate()
    assert check_payment(m, Decimal("100.00"), "GBP", T0, []) == []
    [breach] = check_payment(m, Decimal("100.01"), "GBP", T0, [])
    assert breach.field == "ControlParameters.MaximumIndividualAmount"


def test_currency_validity_and_precision() -> None:
    m = mandate()
    fields = {b.field for b in check_payment(m, Decimal("1.001"), "EUR", datetime(2028, 1, 1, tzinfo=UTC), [])}
    assert fields == {"InstructedAmount.Amount", "InstructedAmount.Currency", "ControlParameters.ValidToDateTime"}
    [early] = check_payment(m, Decimal("1"), "GBP", datetime(2025, 12, 31, tzinfo=UTC), [])
    assert early.field == "ControlParameters.ValidFromDateTime"


def test_calendar_day_limit_resets_at_midnight() -> None:
    m = mandate(limit("150.00", PeriodType.DAY, Alignment.CALENDAR))
    history = [PastPayment(Decimal("100.00"), T0)]
    assert check_payment(m, Decimal("50.00"), "GBP", T0 + timedelta(hours=1), history) == []
    [b] = check_payment(m, Decimal("50.01"), "GBP", T0 + timedelta(hours=1), history)
    assert b.field == "ControlParameters.PeriodicLimits[0]"
    next_day = datetime(2026, 2, 1, 0, 0, tzinfo=UTC)
    assert check_payment(m, Decimal("100.00"), "GBP", next_day, history) == []


def test_consent_aligned_day_is_24h_from_creation() -> None:
    m = mandate(limit("100.00", PeriodType.DAY, Alignment.CONSENT))
    history = [PastPayment(Decimal("100.00"), T0 + timedelta(hours=20))]
    # Past calendar midnight but still inside the first 24 h window from creation.
    assert check_payment(m, Decimal("0.01"), "GBP", T0 + timedelta(hours=23, minutes=59), history)
    assert check_payment(m, Decimal("100.00"), "GBP", T0 + timedelta(hours=24), history) == []


def test_calendar_week_starts_monday() -> None:
    lim = limit("1", PeriodType.WEEK, Alignment.CALENDAR)
    start, end = period_window(lim, T0, datetime(2026, 11, 22, 15, tzinfo=UTC))  # a Sunday
    assert start == datetime(2026, 11, 16, tzinfo=UTC)
    assert end == datetime(2026, 11, 23, tzinfo=UTC)


def test_consent_month_clamps_to_short_months() -> None:
    lim = limit("1", PeriodType.MONTH, Alignment.CONSENT)
    start, end = period_window(lim, T0, datetime(2026, 2, 15, tzinfo=UTC))
    assert start == T0
    assert end == datetime(2026, 2, 28, 10, 30, tzinfo=UTC)
    start, end = period_window(lim, T0, datetime(2026, 3, 1, tzinfo=UTC))
    assert start == datetime(2026, 2, 28, 10, 30, tzinfo=UTC)
    assert end == datetime(2026, 3, 31, 10, 30, tzinfo=UTC)


def test_calendar_month_in_leap_year() -> None:
    lim = limit("1", PeriodType.MONTH, Alignment.CALENDAR)
    start, end = period_window(lim, T0, datetime(2028, 2, 29, 23, 59, tzinfo=UTC))
    assert (start, end) == (datetime(2028, 2, 1, tzinfo=UTC), datetime(2028, 3, 1, tzinfo=UTC))


moments = st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2030, 12, 31)).map(
    lambda d: d.replace(tzinfo=UTC)
)


@given(moments, st.sampled_from(list(PeriodType)), st.sampled_from(list(Alignment)))
def test_window_contains_the_moment_and_tiles(at: datetime, period: PeriodType, alignment: Alignment) -> None:
    lim = limit("1", period, alignment)
    start, end = period_window(lim, T0, at)
    assert start <= at < end
    # The next period starts exactly where this one ends: windows tile time without gaps or overlaps.
    assert period_window(lim, T0, end)[0] == end
    assert period_window(lim, T0, start)[0] == start


def test_the_ledger_says_used_left_and_the_next_period_of_each_limit() -> None:
    month = limit("1000.00", PeriodType.MONTH, Alignment.CONSENT)  # anchored at T0, 31 January 10:30
    day = limit("300.00", PeriodType.DAY, Alignment.CALENDAR)
    m = mandate(month, day, max_individual="500.00")
    at = datetime(2026, 2, 10, 12, 0, tzinfo=UTC)
    history = [
        PastPayment(Decimal("250.00"), datetime(2026, 2, 10, 9, 0, tzinfo=UTC)),
        PastPayment(Decimal("100.05"), datetime(2026, 2, 10, 11, 0, tzinfo=UTC)),
        PastPayment(Decimal("400.00"), datetime(2026, 1, 31, 10, 29, tzinfo=UTC)),  # before the month's window
    ]
    monthly, daily = period_usage(m, at, history)
    assert (monthly.used, monthly.left) == (Decimal("350.05"), Decimal("649.95"))
    assert (monthly.start, monthly.end) == (T0, datetime(2026, 2, 28, 10, 30, tzinfo=UTC))  # clamped to 28 February
    assert (daily.used, daily.left) == (Decimal("350.05"), Decimal("0.00"))  # over: left is never negative
    assert daily.end == datetime(2026, 2, 11, tzinfo=UTC)
    # The ledger and the check agree: what is left fits, a cent more does not.
    assert check_payment(mandate(month, max_individual="1000.00"), monthly.left, "GBP", at, history) == []
    wider = mandate(month, max_individual="1000.00")
    assert [b.field for b in check_payment(wider, monthly.left + Decimal("0.01"), "GBP", at, history)] == [
        "ControlParameters.PeriodicLimits[0]"
    ]
