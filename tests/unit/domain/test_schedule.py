"""The calendar of scheduled batches (pure): days counted in the integration's time zone, the start of a day in
UTC, whether a payment is due, and why a day cannot be scheduled."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from processor.domain.batch import batch_from_dict, iso_day
from processor.domain.schedule import Calendar
from producers.avro_json import Coercion, CoercionError, convert

GUATEMALA = Calendar(ZoneInfo("America/Guatemala"))  # UTC-6, no daylight saving
MADRID = Calendar(ZoneInfo("Europe/Madrid"))


def test_the_day_starts_at_midnight_in_the_integrations_zone() -> None:
    assert GUATEMALA.start_of(date(2026, 11, 3)) == datetime(2026, 11, 3, 6, 0, tzinfo=UTC)
    assert MADRID.start_of(date(2026, 7, 1)) == datetime(2026, 6, 30, 22, 0, tzinfo=UTC)  # summer time, UTC+2
    assert MADRID.start_of(date(2026, 12, 1)) == datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
    assert Calendar().start_of(date(2026, 11, 3)) == datetime(2026, 11, 3, tzinfo=UTC)


def test_a_midnight_skipped_by_daylight_saving_starts_the_day_when_the_clocks_jump() -> None:
    # Chile moved its clocks from 00:00 to 01:00 on 2026-09-06 (UTC-4 to UTC-3): the day starts at 04:00 UTC.
    santiago = Calendar(ZoneInfo("America/Santiago"))
    start = santiago.start_of(date(2026, 9, 6))
    assert start == datetime(2026, 9, 6, 4, 0, tzinfo=UTC)
    assert santiago.today(start) == date(2026, 9, 6)
    assert santiago.today(start - timedelta(milliseconds=1)) == date(2026, 9, 5)


def test_due_only_from_the_start_of_the_day() -> None:
    start = GUATEMALA.start_of(date(2026, 11, 3))
    assert not GUATEMALA.due(date(2026, 11, 3), start - timedelta(milliseconds=1))
    assert GUATEMALA.due(date(2026, 11, 3), start)
    assert GUATEMALA.due(date(2026, 11, 3), start + timedelta(days=3))  # late (a restart, an outage): at once
    assert GUATEMALA.due(None, start)
    assert GUATEMALA.not_before(date(2026, 11, 3), start - timedelta(hours=5)) == start
    assert GUATEMALA.not_before(date(2026, 11, 3), start + timedelta(hours=5)) == start + timedelta(hours=5)


def test_problems_past_today_and_too_far_ahead() -> None:
    now = datetime(2026, 11, 3, 3, 0, tzinfo=UTC)  # 21:00 on the 2nd in Guatemala
    assert GUATEMALA.problem(date(2026, 11, 2), now) is None  # today there
    assert GUATEMALA.problem(date(2026, 11, 1), now) == (
        "execute_on 2026-11-01 is in the past (today is 2026-11-02 in America/Guatemala)"
    )
    assert (
        Calendar().problem(date(2026, 11, 2), now)
        == "execute_on 2026-11-02 is in the past (today is 2026-11-03 in UTC)"
    )
    assert GUATEMALA.problem(date(2026, 11, 30), now) is None  # 28 days ahead
    far = GUATEMALA.problem(date(2026, 12, 1), now) or ""
    assert "29 days ahead, more than 28 days" in far
    assert "; " not in far  # the processor joins an INVALID batch's problems with "; ", and `submit` splits them
    assert Calendar(max_days_ahead=0).problem(date(2026, 11, 4), now) is not None
    assert GUATEMALA.problem(None, now) is None


def test_execute_on_is_read_as_an_iso_day_or_refused_with_its_path() -> None:
    assert iso_day("2026-11-30") == date(2026, 11, 30)
    assert iso_day("2026-02-30") is None and iso_day("30/11/2026") is None and iso_day("2026-11-30T00:00") is None
    document = {
        "batch_id": "B-1",
        "integration": "sandbox",
        "file_reference": "F",
        "origin_account": {"account_number": "1", "currency": "GTQ"},
        "transactions": [],
        "requested_at": "2026-11-02T08:00:00.000Z",
        "source": "test",
    }
    assert batch_from_dict(document).execute_on is None
    assert batch_from_dict({**document, "execute_on": date(2026, 11, 30)}).execute_on == date(2026, 11, 30)
    with pytest.raises(ValueError, match=r"execute_on: expected a date such as 2024-11-30 \(YYYY-MM-DD\) or null"):
        batch_from_dict({**document, "execute_on": "tomorrow"})


def test_the_relay_writes_an_outbox_date_as_an_avro_date() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "d", "type": ["null", {"type": "int", "logicalType": "date"}]}],
    }
    assert convert(schema, {"d": "2026-11-03"}, Coercion(), "$") == {"d": date(2026, 11, 3)}
    assert convert(schema, {"d": None}, Coercion(), "$") == {"d": None}
    with pytest.raises(CoercionError, match="not an ISO 8601 date"):
        convert(schema, {"d": "2026-13-03"}, Coercion(), "$")
