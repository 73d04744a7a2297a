"""Validation rules, one by one, and that every bad row is reported with its index, field and reason."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from processor.domain.batch import OriginAccount, PayrollBatch, Transfer
from processor.domain.validation import (
    DEFAULT_LIMITS,
    InvalidBatchError,
    Issue,
    Reason,
    ValidationLimits,
    validate,
    validated,
)

ORIGIN = OriginAccount("0100123456", "MONETARY", "GTQ")


def row(i: int, **changes: object) -> Transfer:
    base = Transfer(
        account_number=f"30000{i:05d}",
        account_type="SAVINGS",
        currency="GTQ",
        email=f"employee.{i}@example.com",
        amount=Decimal("1500.50"),
        concept=f"Payroll November #{i}",
        employee_reference=f"E-{i}",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def batch(rows: list[Transfer], **changes: object) -> PayrollBatch:
    base = PayrollBatch(
        batch_id="b-1",
        integration="bank-gt",
        file_reference="PAYROLL-2024-11",
        origin=ORIGIN,
        transactions=tuple(rows),
        requested_at=datetime(2024, 11, 30, tzinfo=UTC),
        source="test",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def rows(n: int) -> list[Transfer]:
    return [row(i) for i in range(n)]


def only_issue(b: PayrollBatch, limits: ValidationLimits = DEFAULT_LIMITS) -> Issue:
    report = validate(b, limits)
    assert len(report.issues) == 1, report.issues
    return report.issues[0]


def with_row(index: int, **changes: object) -> PayrollBatch:
    data = rows(5)
    data[index] = row(index, **changes)
    return batch(data)


def test_a_valid_batch_has_no_issues_and_a_proof() -> None:
    b = batch(rows(5))
    report = validate(b)
    assert report.ok and report.issues == () and report.summary() == "valid"
    proof = validated(b)
    assert proof.batch is b
    assert proof.control_sum == Decimal("7502.50")
    assert list(proof.amount_texts) == ["1500.5"] * 5


@pytest.mark.parametrize("amount", [Decimal(0), Decimal("0.00"), Decimal("-0.01"), Decimal(-100), Decimal("-0")])
def test_non_positive_amount(amount: Decimal) -> None:
    issue = only_issue(with_row(3, amount=amount))
    assert (issue.index, issue.field, issue.reason) == (3, "amount", Reason.NON_POSITIVE_AMOUNT)


@pytest.mark.parametrize("amount", [Decimal("0.001"), Decimal("10.005"), Decimal("1E-3"), Decimal("2.999")])
def test_more_than_two_decimals(amount: Decimal) -> None:
    issue = only_issue(with_row(1, amount=amount))
    assert (issue.index, issue.field, issue.reason) == (1, "amount", Reason.TOO_MANY_DECIMALS)


@pytest.mark.parametrize(
    ("amount", "text"),
    [(Decimal("1.500"), "1.5"), (Decimal("1E+2"), "100"), (Decimal("7.0000"), "7"), (Decimal("0.10"), "0.1")],
)
def test_decimals_are_counted_by_value(amount: Decimal, text: str) -> None:
    proof = validated(with_row(2, amount=amount))
    assert proof.amount_texts[2] == text


def test_negative_amount_with_too_many_decimals_reports_both() -> None:
    report = validate(with_row(0, amount=Decimal("-1.001")))
    assert report.bad_rows() == {0: {Reason.NON_POSITIVE_AMOUNT, Reason.TOO_MANY_DECIMALS}}


def test_amount_too_large_and_configurable_maximum() -> None:
    issue = only_issue(with_row(4, amount=Decimal("10000000000000.00")))
    assert (issue.index, issue.reason) == (4, Reason.AMOUNT_TOO_LARGE)
    small = ValidationLimits(max_amount=Decimal(1000))
    report = validate(batch(rows(5)), small)
    assert report.bad_rows() == {i: {Reason.AMOUNT_TOO_LARGE} for i in range(5)}
    assert validate(batch([row(0, amount=Decimal(1000))]), small).ok
    with pytest.raises(ValueError, match="max_amount"):
        ValidationLimits(max_amount=Decimal("1E+14"))


@pytest.mark.parametrize("amount", [Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")])
def test_non_finite_amount(amount: Decimal) -> None:
    issue = only_issue(with_row(0, amount=amount))
    assert (issue.index, issue.reason) == (0, Reason.INVALID_AMOUNT)


def test_currency_differing_from_origin() -> None:
    issue = only_issue(with_row(2, currency="USD"))
    assert (issue.index, issue.field, issue.reason) == (2, "destination_account.currency", Reason.CURRENCY_MISMATCH)
    assert "'USD'" in issue.message and "'GTQ'" in issue.message


def test_empty_account_number() -> None:
    issue = only_issue(with_row(0, account_number=""))
    assert (issue.index, issue.field, issue.reason) == (
        0,
        "destination_account.account_number",
        Reason.EMPTY_ACCOUNT_NUMBER,
    )


@pytest.mark.parametrize(
    "number", ["12-34", "12 34", " 1234", "1234\n", "A" * 35, "ÄBC123", "١٢٣", "1234.5", "\u00a012"]
)
def test_malformed_account_number(number: str) -> None:
    issue = only_issue(with_row(1, account_number=number))
    assert (issue.index, issue.reason) == (1, Reason.MALFORMED_ACCOUNT_NUMBER)
    assert number.strip() not in issue.message or not number.strip()  # account numbers are not echoed


@pytest.mark.parametrize("number", ["1", "GT82TRAJ01020000001210029690", "A" * 34, "abcXYZ0123"])
def test_well_formed_account_numbers(number: str) -> None:
    assert validate(with_row(1, account_number=number)).ok


def test_account_number_length_is_configurable() -> None:
    limits = ValidationLimits(max_account_number_length=10)
    assert validate(with_row(0, account_number="A" * 10), limits).ok
    assert only_issue(with_row(0, account_number="A" * 11), limits).reason == Reason.MALFORMED_ACCOUNT_NUMBER


@pytest.mark.parametrize(
    "email",
    [
        "",
        "plain",
        "@example.com",
        "a@",
        "a@example",
        "a@example.c",
        "a@example.c0m",
        "a b@example.com",
        "a..b@example.com",
        ".a@example.com",
        "a.@example.com",
        "a@-example.com",
        "a@example-.com",
        "a@exa_mple.com",
        "a@example..com",
        "a@example.com.",
        "a@@example.com",
        "ñ@example.com",
        'a"b@example.com',
        "a\\b@example.com",
        "a@example.com\n",
        "a\n@example.com",
        "x" * 65 + "@example.com",
        "a@" + "b" * 64 + ".com",
        "a@" + ("b" * 60 + ".") * 5 + "com",  # more than 254 characters in all
    ],
)
def test_malformed_email(email: str) -> None:
    issue = only_issue(with_row(3, email=email))
    assert (issue.index, issue.field, issue.reason) == (3, "destination_account.email", Reason.MALFORMED_EMAIL)


@pytest.mark.parametrize(
    "email",
    [
        "a@b.co",
        "first.last@example.com.gt",
        "x+tag@sub-domain.example.org",
        "o'brien@example.ie",
        "!#$%&'*+/=?^_`{|}~-@example.com",
        "x" * 64 + "@example.com",
        "a@" + "b" * 63 + ".com",
        "a@1-2-3.example.museum",
    ],
)
def test_well_formed_email(email: str) -> None:
    assert validate(with_row(3, email=email)).ok


def test_duplicate_transfer_is_the_later_row_naming_the_first() -> None:
    data = rows(6)
    data[4] = row(1)  # same account, amount and concept as row 1
    data[5] = row(1, amount=Decimal("1500.5000"))  # same value written differently: still a duplicate
    report = validate(batch(data))
    assert report.bad_rows() == {4: {Reason.DUPLICATE_TRANSFER}, 5: {Reason.DUPLICATE_TRANSFER}}
    assert [i.message for i in report.issues] == [
        "same destination account, amount and concept as transaction 1",
        "same destination account, amount and concept as transaction 1",
    ]


def test_same_account_with_another_amount_or_concept_is_not_a_duplicate() -> None:
    data = rows(3)
    data.append(row(0, amount=Decimal("99.99")))
    data.append(row(0, concept="Bonus"))
    data.append(row(0, email="other@example.com", employee_reference="E-x"))  # e-mail is not part of the key
    report = validate(batch(data))
    assert report.bad_rows() == {5: {Reason.DUPLICATE_TRANSFER}}


def test_concept_too_long_and_configurable() -> None:
    issue = only_issue(with_row(2, concept="x" * 141))
    assert (issue.index, issue.field, issue.reason) == (2, "concept", Reason.CONCEPT_TOO_LONG)
    assert validate(with_row(2, concept="é" * 140)).ok  # counted in characters, not bytes
    limits = ValidationLimits(max_concept_length=10)
    report = validate(batch(rows(3)), limits)
    assert report.bad_rows() == {i: {Reason.CONCEPT_TOO_LONG} for i in range(3)}


def test_empty_concept_quotes_and_backslashes_are_allowed() -> None:
    assert validate(with_row(0, concept="")).ok
    assert validate(with_row(0, concept='Nómina "noviembre" \\ 50% ¿sí?')).ok


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("concept", "Payroll \u202e1500 tnuoma", "U+202E at position 9"),  # right-to-left override
        ("concept", "line1\nline2", "U+000A at position 6"),
        ("concept", "bell\x07", "U+0007 at position 5"),
        ("concept", "isolate \u2067x\u2069", "U+2067 at position 9"),
        ("employee_reference", "E-\u200f1", "U+200F at position 3"),
        ("employee_reference", "E-\x9b1", "U+009B at position 3"),
    ],
)
def test_control_and_bidi_characters_are_refused(field: str, value: str, where: str) -> None:
    issue = only_issue(with_row(1, **{field: value}))
    assert (issue.index, issue.field, issue.reason) == (1, field, Reason.INVALID_TEXT)
    assert where in issue.message


@pytest.mark.parametrize(("field", "value"), [("concept", "bad \ud800 text"), ("employee_reference", "E-\udfff")])
def test_lone_surrogates_are_invalid_text(field: str, value: str) -> None:
    issue = only_issue(with_row(1, **{field: value}))
    assert (issue.index, issue.field, issue.reason) == (1, field, Reason.INVALID_TEXT)


def test_destination_account_type_must_be_allowed() -> None:
    issue = only_issue(with_row(0, account_type="CHECKING"))
    assert (issue.index, issue.field, issue.reason) == (
        0,
        "destination_account.account_type",
        Reason.INVALID_ACCOUNT_TYPE,
    )
    assert validate(with_row(0, account_type="MONETARY")).ok
    limits = ValidationLimits(destination_account_types=frozenset({"SAVINGS", "CHECKING"}))
    assert validate(with_row(0, account_type="CHECKING"), limits).ok


def test_empty_batch() -> None:
    issue = only_issue(batch([]))
    assert (issue.index, issue.field, issue.reason) == (None, "transactions", Reason.EMPTY_BATCH)
    with pytest.raises(InvalidBatchError):
        validated(batch([]))


def test_too_many_transactions() -> None:
    limits = ValidationLimits(max_transactions=3)
    issue = only_issue(batch(rows(4)), limits)
    assert (issue.index, issue.reason) == (None, Reason.TOO_MANY_TRANSACTIONS)
    assert issue.message == "4 transactions; at most 3 are allowed"
    assert validate(batch(rows(3)), limits).ok
    assert DEFAULT_LIMITS.max_transactions == 100_000


@pytest.mark.parametrize(
    ("origin", "field"),
    [
        (OriginAccount("", "MONETARY", "GTQ"), "origin_account.account_number"),
        (OriginAccount("01-00", "MONETARY", "GTQ"), "origin_account.account_number"),
        (OriginAccount("0100123456", "SAVINGS", "GTQ"), "origin_account.account_type"),
        (OriginAccount("0100123456", "MONETARY", "gtq"), "origin_account.currency"),
        (OriginAccount("0100123456", "MONETARY", "GTQX"), "origin_account.currency"),
    ],
)
def test_bad_origin_account(origin: OriginAccount, field: str) -> None:
    data = [replace(r, currency=origin.currency) for r in rows(3)]
    issue = only_issue(batch(data, origin=origin))
    assert (issue.index, issue.field, issue.reason) == (None, field, Reason.INVALID_ORIGIN_ACCOUNT)


@pytest.mark.parametrize("reference", ["", "   ", "x" * 41, "ref\ud800"])
def test_bad_file_reference(reference: str) -> None:
    issue = only_issue(batch(rows(2), file_reference=reference))
    assert (issue.index, issue.field, issue.reason) == (None, "file_reference", Reason.INVALID_FILE_REFERENCE)


def test_every_bad_row_is_reported_in_order_with_batch_issues_first() -> None:
    data = rows(12)
    data[1] = row(1, amount=Decimal(-5))
    data[3] = row(3, currency="USD", email="nope")
    data[6] = row(6, account_number="")
    data[9] = row(2)
    data[11] = row(11, concept="y" * 200, amount=Decimal("1.234"))
    report = validate(batch(data, file_reference=""))
    assert [issue.reason for issue in report.issues if issue.index is None] == [Reason.INVALID_FILE_REFERENCE]
    assert report.bad_rows() == {
        1: {Reason.NON_POSITIVE_AMOUNT},
        3: {Reason.CURRENCY_MISMATCH, Reason.MALFORMED_EMAIL},
        6: {Reason.EMPTY_ACCOUNT_NUMBER},
        9: {Reason.DUPLICATE_TRANSFER},
        11: {Reason.CONCEPT_TOO_LONG, Reason.TOO_MANY_DECIMALS},
    }
    assert [i.index for i in report.issues] == [None, 1, 3, 3, 6, 9, 11, 11]
    with pytest.raises(InvalidBatchError) as caught:
        validated(batch(data))
    assert caught.value.report.bad_rows() == report.bad_rows()


def test_summary_is_readable_and_leaks_no_account_numbers_or_emails() -> None:
    data = rows(30)
    for i in range(0, 30, 2):
        data[i] = row(i, email=f"bad{i}", account_number=f"99-{i}")
    report = validate(batch(data))
    summary = report.summary(limit=3)
    assert summary.startswith("15 of 30 transactions invalid: transaction 0 destination_account.account_number: ")
    assert summary.endswith("and 27 more problems")
    for i in range(30):
        assert f"99-{i}" not in summary and f"bad{i}" not in summary and f"employee.{i}@" not in summary
    assert "malformed_account_number" in summary
