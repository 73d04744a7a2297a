"""Numbers as ERP exports write them (processor/exports/numbers.py): local separators read exactly per profile,
anything the profile does not settle refused with the reason; spreadsheet numbers read as the decimal the cell
shows through its number format, never through a binary float."""

from __future__ import annotations

from decimal import Decimal

import pytest

from processor.exports.numbers import NumberError, NumberStyle, parse_amount, shown_decimal, shown_text

SPANISH = NumberStyle(decimal=",", thousands=".")
SPACED = NumberStyle(decimal=",", thousands=" ")
ENGLISH = NumberStyle(decimal=".", thousands=",")
PLAIN = NumberStyle()


@pytest.mark.parametrize(
    ("text", "style", "expected"),
    [
        ("1.234,56", SPANISH, "1234.56"),
        ("1.234.567,5", SPANISH, "1234567.5"),
        ("1234,56", SPANISH, "1234.56"),
        ("0,01", SPANISH, "0.01"),
        ("  8.500,00 ", SPANISH, "8500.00"),
        ("1.234", SPANISH, "1234"),  # the profile says '.' groups thousands
        ("1 234,56", SPACED, "1234.56"),
        ("1\u00a0234,56", SPACED, "1234.56"),  # no-break space
        ("1\u202f234\u202f567,89", SPACED, "1234567.89"),  # narrow no-break space
        ("1,234.56", ENGLISH, "1234.56"),
        ("(1,234.56)", ENGLISH, "-1234.56"),
        ("-1,234.56", ENGLISH, "-1234.56"),
        ("1.234,56-", SPANISH, "-1234.56"),  # SAP's trailing minus
        ("1500.50", PLAIN, "1500.50"),
    ],
)
def test_local_formats_are_read_exactly(text: str, style: NumberStyle, expected: str) -> None:
    value = parse_amount(text, style)
    assert isinstance(value, Decimal)
    assert str(value) == expected


@pytest.mark.parametrize(
    ("text", "style", "reason"),
    [
        ("1,234.56", SPANISH, "is written like 1,234.56, but this profile expects numbers like 1.234,56"),
        ("1234.56", SPANISH, "is written like 1,234.56, but this profile expects numbers like 1.234,56"),
        ("12.34", SPANISH, "is written like 1,234.56"),  # '.' grouping two digits: read the other way
        ("1.234.56", SPANISH, "must group the digits in threes"),  # no style reads it
        ("1.23,45", SPANISH, "must group the digits in threes"),
        ("1,5", ENGLISH, "is written like 1.234,56, but this profile expects numbers like 1,234.56"),
        ("1 23", SPACED, "' ' must group the digits in threes"),
        ("1.234,56", PLAIN, "',' is not a separator of this profile"),
        ("1 234.56", PLAIN, "' ' is not a separator of this profile"),
        ("1,234,56", SPANISH, "more than one decimal separator"),
        ("1234,", SPANISH, "no digits after the decimal separator"),
        ("1.234,5", ENGLISH, "is written like 1.234,56"),
        ("1,234.5.6", SPANISH, "a thousands separator after the decimal separator"),
        ("Q 1.234,56", SPANISH, "unexpected character 'Q'"),
        ("--5", PLAIN, "more than one sign"),
        ("(-5)", PLAIN, "more than one sign"),
        ("", PLAIN, "is empty"),
        (".", PLAIN, "no digits"),
    ],
)
def test_anything_the_profile_does_not_settle_is_refused_with_the_reason(
    text: str, style: NumberStyle, reason: str
) -> None:
    with pytest.raises(NumberError) as refused:
        parse_amount(text, style)
    assert reason in str(refused.value)


def test_the_reason_shows_the_profiles_format() -> None:
    with pytest.raises(NumberError) as refused:
        parse_amount("1234.56", SPANISH)
    assert "this profile expects numbers like 1.234,56" in str(refused.value)


PLAIN_EXPECTED = "expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [(" 1500.50 ", "1500.50"), ("10", "10"), ("-3", "-3")],  # a minus is read; validation refuses it with its reason
)
def test_our_layouts_plain_numbers_are_read(text: str, expected: str) -> None:
    """`NumberStyle(plain=True)`, the amounts of our own layout (the built-in profile `our_layout`)."""
    assert format(parse_amount(text, NumberStyle(plain=True)), "f") == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "is empty"),
        ("1,500.50", PLAIN_EXPECTED),
        ("+3", PLAIN_EXPECTED),
        ("(3)", PLAIN_EXPECTED),
        ("3-", PLAIN_EXPECTED),
        (".5", PLAIN_EXPECTED),
        ("5.", PLAIN_EXPECTED),
        (chr(0x661), PLAIN_EXPECTED),  # an Arabic-Indic digit one: ASCII digits only
    ],
)
def test_anything_else_is_refused_in_our_layout(text: str, reason: str) -> None:
    with pytest.raises(NumberError) as refused:
        parse_amount(text, NumberStyle(plain=True))
    assert str(refused.value) == reason


def test_a_style_needs_two_different_known_separators() -> None:
    with pytest.raises(ValueError, match="must differ"):
        NumberStyle(decimal=",", thousands=",")
    with pytest.raises(ValueError, match="decimal separator"):
        NumberStyle(decimal=";")


@pytest.mark.parametrize(
    ("stored", "number_format", "expected"),
    [
        ("0.30000000000000004", "0.00", "0.30"),  # 0.1 + 0.2 as a workbook stores it
        ("0.30000000000000004", "General", "0.3"),
        ("1.0049999999999999", "#,##0.00", "1.01"),  # a spreadsheet shows 1.01 (a float rounds to 1.00)
        ("2.675", "0.00", "2.68"),  # half away from zero, as shown (round(2.675, 2) is 2.67)
        ("8500", "#,##0.00", "8500.00"),
        ("8500.5", '"Q"#,##0.00_);[Red]("Q"#,##0.00)', "8500.50"),
        ("-12.5", "#,##0.00;(#,##0.00)", "-12.50"),
        ("1234.5678", "[$Q-100A]#,##0.00", "1234.57"),
        ("1234.5", "0", "1235"),
        ("1.2345E3", "0.0", "1234.5"),
        ("7", "@", "7"),
    ],
)
def test_spreadsheet_numbers_are_the_decimal_the_cell_shows(stored: str, number_format: str, expected: str) -> None:
    assert str(shown_decimal(stored, number_format)) == expected


@pytest.mark.parametrize(
    ("number_format", "reason"),
    [
        ("0.00%", "percentage"),
        ("0.00E+00", "scientific"),
        ("# ?/?", "fraction"),
        ("dd/mm/yyyy", "date or time"),
        ("#,##0,", "scales the value by thousands"),
        (";;;", "shows no number"),
    ],
)
def test_formats_that_change_or_hide_the_value_are_refused(number_format: str, reason: str) -> None:
    with pytest.raises(NumberError) as refused:
        shown_decimal("1234.5", number_format)
    assert reason in str(refused.value)


def test_stored_text_that_is_no_number_is_refused() -> None:
    with pytest.raises(NumberError, match="not a number"):
        shown_decimal("NaN", "General")


@pytest.mark.parametrize(
    ("stored", "number_format", "expected"),
    [
        ("2001002001", "General", "2001002001"),
        ("12003003", "0000000000", "0012003003"),  # leading zeros shown by the format
        ("2001002001", "#,##0", "2001002001"),  # no grouping in text
        ("1001.5", "0.00", "1001.50"),
    ],
)
def test_numbers_read_as_text_keep_what_the_cell_shows(stored: str, number_format: str, expected: str) -> None:
    assert shown_text(stored, number_format) == expected


def test_an_account_number_beyond_15_digits_stored_as_a_number_is_refused() -> None:
    with pytest.raises(NumberError, match="store this column as text"):
        shown_text("1.2345678901234568E+19", "General")
