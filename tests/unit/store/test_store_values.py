"""Pure parts of the store: URLs, placeholders, timestamps, money, JSON documents, idempotency keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.domain.time import iso_ms, utc_ms
from processor.store.crypto import new_secret_token
from processor.store.db import ConfigurationError, parse_url, qmark_to_pyformat, redact_url, to_datetime, to_decimal
from processor.store.schema import MIGRATIONS, TYPES
from processor.store.side_effects import MAX_IDEMPOTENCY_KEY, Operation, new_idempotency_key
from processor.store.values import dump_json, json_text, load_json, money, read_money


@pytest.mark.parametrize(
    ("url", "location"),
    [
        ("sqlite://:memory:", ":memory:"),
        ("sqlite://", ":memory:"),
        ("sqlite:///:memory:", ":memory:"),
        ("sqlite:///dispersion.sqlite", "dispersion.sqlite"),
        ("sqlite:///data/flows.db", "data/flows.db"),
        ("sqlite:////var/lib/dispersion/flows.db", "/var/lib/dispersion/flows.db"),
    ],
)
def test_sqlite_urls_follow_the_sqlalchemy_reading(url: str, location: str) -> None:
    target = parse_url(url)
    assert (target.dialect, target.location) == ("sqlite", location)


def test_postgres_urls_pass_through_and_hide_the_password() -> None:
    target = parse_url("postgres://user:s3cret@db:5432/x", schema="tenant_1")
    assert target.dialect == "postgresql"
    assert target.schema == "tenant_1"
    assert "s3cret" not in repr(target)
    assert redact_url("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"


@pytest.mark.parametrize("url", ["mysql://x", "sqlite:relative.db", "sqlite://host/x.db", "sqlite:///"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_url(url)


def test_schema_names_are_checked_before_reaching_sql() -> None:
    with pytest.raises(ConfigurationError):
        parse_url("postgresql://h/db", schema="x; DROP TABLE flows")
    with pytest.raises(ConfigurationError):
        parse_url("sqlite://:memory:", schema="public")


def test_placeholders_are_rewritten_outside_literals_only() -> None:
    sql = "SELECT '?', \"a?\", x FROM t WHERE a = ? AND b LIKE 'x%' AND c = ? -- why?\n AND d % 2 = ?"
    assert qmark_to_pyformat(sql) == (
        "SELECT '?', \"a?\", x FROM t WHERE a = %s AND b LIKE 'x%' AND c = %s -- why?\n AND d %% 2 = %s"
    )
    assert qmark_to_pyformat("SELECT 'it''s ?' , ?") == "SELECT 'it''s ?' , %s"


def test_timestamps_are_utc_milliseconds_and_sort_as_text() -> None:
    moment = datetime(2026, 11, 2, 10, 30, 0, 123_987, tzinfo=timezone(timedelta(hours=1)))
    assert utc_ms(moment) == datetime(2026, 11, 2, 9, 30, 0, 123_000, tzinfo=UTC)
    assert iso_ms(moment) == "2026-11-02T09:30:00.123Z"
    assert to_datetime("2026-11-02T09:30:00.123Z") == utc_ms(moment)
    with pytest.raises(ValueError, match="timezone"):
        utc_ms(datetime(2026, 1, 1))
    truncated = utc_ms(moment)
    assert utc_ms(truncated) is truncated  # already UTC milliseconds: no new object per store parameter
    assert utc_ms(truncated.replace(microsecond=123_400)) == truncated


@given(st.lists(st.datetimes(timezones=st.just(UTC)), min_size=2, max_size=2))
def test_text_order_of_stored_timestamps_is_time_order(pair: list[datetime]) -> None:
    first, second = (utc_ms(p) for p in pair)
    if first.year >= 1000 and second.year >= 1000:
        assert (iso_ms(first) < iso_ms(second)) == (first < second)


def test_money_is_exact_with_at_most_two_decimals() -> None:
    assert money(Decimal("12.3")) == Decimal("12.30")
    assert str(money(Decimal("1E+2"))) == "100.00"
    assert money(Decimal("9999999999999999.99")) == Decimal("9999999999999999.99")
    for bad in (Decimal("0.001"), Decimal("NaN"), Decimal("Infinity"), Decimal("10000000000000000")):
        with pytest.raises(ValueError, match=r"decimals|finite|fit"):
            money(bad)
    with pytest.raises(TypeError):
        money(12.5)  # type: ignore[arg-type]
    assert read_money("7.1") == Decimal("7.10")
    assert to_decimal(Decimal("3.00")) == Decimal("3.00")
    with pytest.raises(TypeError):
        to_decimal(1.5)


@given(st.decimals(min_value=Decimal("-1e15"), max_value=Decimal("1e15"), places=2))
def test_money_round_trips_through_its_stored_text(amount: Decimal) -> None:
    stored = format(money(amount), "f")
    assert read_money(stored) == amount


def test_json_documents_keep_amounts_exact_and_refuse_floats() -> None:
    text = dump_json({"amount": Decimal("10.10"), "when": datetime(2026, 1, 2, tzinfo=UTC), "n": 3})
    assert load_json(text) == {"amount": "10.10", "when": "2026-01-02T00:00:00.000Z", "n": 3}
    assert load_json('{"a": 1.10}') == {"a": Decimal("1.10")}
    with pytest.raises(TypeError, match="float"):
        dump_json({"rows": [{"amount": 1.1}]})
    assert json_text('{"kept": "verbatim"}') == '{"kept": "verbatim"}'
    with pytest.raises(ValueError, match="not JSON"):
        json_text("not json")


@pytest.mark.parametrize("operation", list(Operation))
def test_idempotency_keys_fit_the_bank_limit_and_differ(operation: Operation) -> None:
    keys = {new_idempotency_key(operation) for _ in range(200)}
    assert len(keys) == 200
    assert all(1 <= len(k) <= MAX_IDEMPOTENCY_KEY for k in keys)


def test_secret_tokens_carry_at_least_128_bits() -> None:
    token = new_secret_token()
    assert len(token) >= 43  # 32 bytes in url-safe base64
    assert token != new_secret_token()


def test_migrations_render_for_both_engines() -> None:
    for migration in MIGRATIONS:
        for dialect in TYPES:
            rendered = migration.render(dialect)
            assert all("{" not in s for s in rendered)
    sqlite_ddl = " ".join(MIGRATIONS[0].render("sqlite"))
    pg_ddl = " ".join(MIGRATIONS[0].render("postgresql"))
    assert "NUMERIC(18,2)" in pg_ddl and "NUMERIC" not in sqlite_ddl
    assert "TIMESTAMPTZ(3)" in pg_ddl
