"""Business validation of a payroll batch: pure, and it reports every bad row, not only the first.

Batch rules (issue `index` is None):
- `empty_batch`: no transactions.
- `too_many_transactions`: more than `ValidationLimits.max_transactions` (default 100,000).
- `invalid_origin_account`: origin number not 1-34 ASCII letters/digits, type not in `origin_account_types`
  (default `MONETARY`), currency not three upper-case letters (ISO 4217 shape).
- `invalid_file_reference`: empty, longer than `max_file_reference_length` (default 40, Open Banking's
  Max40Text), not valid Unicode, or holding a control or bidi character (the bank shows it to the approver).

Row rules (issue `index` is the transaction's position, from 0):
- `invalid_amount`: NaN or infinite (only possible for batches built in code; parsing refuses them).
- `non_positive_amount`: amount <= 0.
- `too_many_decimals`: the value is not a whole number of cents (by value: 1.500 is fine, 1.005 is not).
- `amount_too_large`: above `max_amount` (default 9,999,999,999,999.99: 15 significant digits, so every valid
  amount is an exact JSON number for the file hash).
- `currency_mismatch`: destination currency differs from the origin account's.
- `empty_account_number` / `malformed_account_number`: destination number must be 1-34 ASCII letters or digits
  (the IBAN alphabet and maximum length; no spaces or separators).
- `invalid_account_type`: destination type not in `destination_account_types` (default SAVINGS, MONETARY).
- `malformed_email`: not `local@domain`: local part 1-64 characters of the RFC 5322 dot-atom set, domain of
  LDH labels (1-63 characters, no leading/trailing hyphen) ending in a 2-63 letter top-level label, whole
  address at most 254 characters, ASCII only.
- `concept_too_long`: concept longer than `max_concept_length` (default 140, Open Banking's Max140Text) in
  Unicode code points. An empty concept is allowed.
- `invalid_text`: concept or employee reference holds a lone surrogate (not valid Unicode, cannot be sent), or
  a control or bidirectional formatting character (`domain/text.py`: they would make the bank's consent page show
  text other than what was sent).
- `duplicate_transfer`: same destination account number (exact text), same amount (by value: 100 equals
  100.00) and same concept (exact text) as an earlier row; the later rows are reported, naming the first.

Speed: each rule is first checked on a whole column at C speed (one regular expression over the joined column,
`set`, `max`); only a column that fails is walked row by row to name the bad rows, so a valid batch costs a few
passes over its columns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal, Inexact, localcontext
from enum import StrEnum
from functools import lru_cache
from operator import attrgetter
from typing import Final

from processor.domain.batch import PayrollBatch
from processor.domain.canonical import CanonicalizationError, number_text
from processor.domain.text import any_unsafe, unsafe_character

__all__ = [
    "DEFAULT_LIMITS",
    "InvalidBatchError",
    "Issue",
    "Reason",
    "ValidatedBatch",
    "ValidationLimits",
    "ValidationReport",
    "validate",
    "validated",
]

# Amounts below this have at most 15 significant digits with 2 decimals, so they are exact JSON numbers.
_AMOUNT_CEILING: Final = Decimal("9999999999999.99")


class Reason(StrEnum):
    """Why a batch or a row is invalid (stable codes, used in status events and dead letters)."""

    EMPTY_BATCH = "empty_batch"
    TOO_MANY_TRANSACTIONS = "too_many_transactions"
    INVALID_ORIGIN_ACCOUNT = "invalid_origin_account"
    INVALID_FILE_REFERENCE = "invalid_file_reference"
    INVALID_AMOUNT = "invalid_amount"
    NON_POSITIVE_AMOUNT = "non_positive_amount"
    TOO_MANY_DECIMALS = "too_many_decimals"
    AMOUNT_TOO_LARGE = "amount_too_large"
    CURRENCY_MISMATCH = "currency_mismatch"
    EMPTY_ACCOUNT_NUMBER = "empty_account_number"
    MALFORMED_ACCOUNT_NUMBER = "malformed_account_number"
    INVALID_ACCOUNT_TYPE = "invalid_account_type"
    MALFORMED_EMAIL = "malformed_email"
    CONCEPT_TOO_LONG = "concept_too_long"
    INVALID_TEXT = "invalid_text"
    DUPLICATE_TRANSFER = "duplicate_transfer"


@dataclass(frozen=True, slots=True)
class ValidationLimits:
    """Configurable limits of the rules above."""

    max_transactions: int = 100_000
    max_concept_length: int = 140
    max_email_length: int = 254
    max_account_number_length: int = 34
    max_file_reference_length: int = 40
    max_amount: Decimal = _AMOUNT_CEILING
    origin_account_types: frozenset[str] = frozenset({"MONETARY"})
    destination_account_types: frozenset[str] = frozenset({"SAVINGS", "MONETARY"})

    def __post_init__(self) -> None:
        if not (Decimal(0) < self.max_amount <= _AMOUNT_CEILING):
            raise ValueError(f"max_amount must be positive and at most {_AMOUNT_CEILING} (15 significant digits)")
        if self.max_transactions < 1 or self.max_account_number_length < 1 or self.max_email_length < 6:
            raise ValueError("limits must be positive")


DEFAULT_LIMITS: Final = ValidationLimits()


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem: `index` is the transaction's position (None for the batch itself), `field` its input path."""

    index: int | None
    field: str
    reason: Reason
    message: str

    def __str__(self) -> str:
        where = "batch" if self.index is None else f"transaction {self.index}"
        return f"{where} {self.field}: {self.reason.value} ({self.message})"


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """Every problem found in one batch, sorted by row (batch problems first)."""

    issues: tuple[Issue, ...]
    transaction_count: int

    @property
    def ok(self) -> bool:
        """True when the batch has no problem."""
        return not self.issues

    def bad_rows(self) -> dict[int, set[Reason]]:
        """Index of every bad transaction -> the reasons found for it."""
        rows: dict[int, set[Reason]] = {}
        for issue in self.issues:
            if issue.index is not None:
                rows.setdefault(issue.index, set()).add(issue.reason)
        return rows

    def summary(self, limit: int = 10) -> str:
        """A one-line, human-readable account (no account numbers, e-mails or amounts), for events and logs."""
        if self.ok:
            return "valid"
        bad = len(self.bad_rows())
        head = f"{bad} of {self.transaction_count} transactions invalid" if bad else "batch invalid"
        shown = "; ".join(str(issue) for issue in self.issues[:limit])
        more = f"; and {len(self.issues) - limit} more problems" if len(self.issues) > limit else ""
        return f"{head}: {shown}{more}"


class InvalidBatchError(ValueError):
    """Raised by `validated` when the batch has problems; `report` lists all of them."""

    def __init__(self, report: ValidationReport) -> None:
        self.report = report
        super().__init__(report.summary())


@dataclass(frozen=True, slots=True, eq=False)
class ValidatedBatch:
    """A batch that passed validation, with the columns the payload builder reuses.

    Only `validated` creates it. Guarantees: every account number matches `[A-Za-z0-9]{1,34}`, every e-mail the
    ASCII pattern above (no character needing a JSON escape), every currency equals the origin's, no text holds
    a lone surrogate, and `amount_texts[i]` is the exact JCS number text of transaction i's amount.
    """

    batch: PayrollBatch
    limits: ValidationLimits
    control_sum: Decimal
    # Columns, one item per transaction (read-only by convention; lists to avoid copying 100,000 references).
    account_numbers: Sequence[str] = field(repr=False)
    account_types: Sequence[str] = field(repr=False)
    emails: Sequence[str] = field(repr=False)
    concepts: Sequence[str] = field(repr=False)
    amount_texts: Sequence[str] = field(repr=False)
    concepts_utf8: bytes = field(repr=False)
    """The concepts joined by newlines, as UTF-8."""


# --- patterns ------------------------------------------------------------------------------------------------

_ATOM: Final = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]++"
_LABEL: Final = r"[A-Za-z0-9]++(?:-++[A-Za-z0-9]++)*+"  # letters/digits, inner hyphens only
_EMAIL_SHAPE: Final = rf"{_ATOM}(?:\.{_ATOM})*+@(?:{_LABEL}\.)++[A-Za-z]{{2,63}}+"
# Possessive quantifiers throughout: every pattern here matches in linear time, without backtracking.
# The exact e-mail rule adds the local-part (1-64) and label (1-63) lengths as lookaheads; an address of at most
# 64 characters meets both, so the column check (used only then) can leave them out.
_EMAIL: Final = re.compile(
    rf"(?=[^@]{{1,64}}+@){_ATOM}(?:\.{_ATOM})*+@(?:(?=[A-Za-z0-9-]{{1,63}}+\.){_LABEL}\.)++[A-Za-z]{{2,63}}+"
)
_EMAIL_COLUMN_MAX: Final = 64
# A positive amount of at most 13 integer digits and 2 decimals, written without exponent or sign.
_AMOUNT: Final = r"(?:[1-9][0-9]{0,12}+(?:\.[0-9]{1,2}+)?+|0\.(?:[1-9][0-9]?+|0[1-9]))"
_CURRENCY: Final = re.compile(r"[A-Z]{3}")


def _column(item: str) -> re.Pattern[str]:
    """A pattern matching newline-joined items that each match `item`."""
    return re.compile(rf"(?:{item}\n)*+{item}")


def _all_match(column: re.Pattern[str], items: Sequence[str]) -> bool:
    """Whether every item matches; the newline count guards against an item that itself holds a newline."""
    if not items:
        return True
    joined = "\n".join(items)
    return joined.count("\n") == len(items) - 1 and column.fullmatch(joined) is not None


_EMAIL_COLUMN: Final = _column(_EMAIL_SHAPE)
_AMOUNT_COLUMN: Final = _column(_AMOUNT)


@lru_cache(maxsize=8)
def _account_patterns(max_length: int) -> tuple[re.Pattern[str], re.Pattern[str]]:
    item = rf"[A-Za-z0-9]{{1,{max_length}}}+"
    return re.compile(item), _column(item)


def _is_text(joined: str) -> bool:
    """Whether the text is valid Unicode (no lone surrogate); cheap for ASCII."""
    if joined.isascii():
        return True
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_get_number = attrgetter("account_number")
_get_type = attrgetter("account_type")
_get_currency = attrgetter("currency")
_get_email = attrgetter("email")
_get_amount = attrgetter("amount")
_get_concept = attrgetter("concept")
_get_reference = attrgetter("employee_reference")


# --- the checks ----------------------------------------------------------------------------------------------


def _decimal_places(value: Decimal) -> int:
    """Digits after the point in the value's shortest form (1.500 -> 1, 1E+2 -> 0); exact at any precision."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite values only
    trailing = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    if trailing == len(digits):  # zero
        return 0
    return max(0, -(exponent + trailing))


def _amount_text(value: Decimal) -> str:
    """The JCS text of an amount, or a stable stand-in when it has none (only for invalid amounts)."""
    try:
        return number_text(value)
    except CanonicalizationError:
        return str(value)


def _check_batch(batch: PayrollBatch, limits: ValidationLimits, count: int, issues: list[Issue]) -> None:
    if count == 0:
        issues.append(Issue(None, "transactions", Reason.EMPTY_BATCH, "the batch has no transactions"))
    if count > limits.max_transactions:
        issues.append(
            Issue(
                None,
                "transactions",
                Reason.TOO_MANY_TRANSACTIONS,
                f"{count} transactions; at most {limits.max_transactions} are allowed",
            )
        )
    origin = batch.origin
    if _account_patterns(limits.max_account_number_length)[0].fullmatch(origin.number) is None:
        issues.append(
            Issue(
                None,
                "origin_account.account_number",
                Reason.INVALID_ORIGIN_ACCOUNT,
                f"must be 1-{limits.max_account_number_length} ASCII letters or digits",
            )
        )
    if origin.type not in limits.origin_account_types:
        allowed = ", ".join(sorted(limits.origin_account_types))
        issues.append(
            Issue(
                None,
                "origin_account.account_type",
                Reason.INVALID_ORIGIN_ACCOUNT,
                f"{origin.type!r} is not one of {allowed}",
            )
        )
    if _CURRENCY.fullmatch(origin.currency) is None:
        issues.append(
            Issue(
                None,
                "origin_account.currency",
                Reason.INVALID_ORIGIN_ACCOUNT,
                "must be an ISO 4217 code (three upper-case letters)",
            )
        )
    reference = batch.file_reference
    if (
        not reference.strip()
        or len(reference) > limits.max_file_reference_length
        or not _is_text(reference)
        or unsafe_character(reference) is not None
    ):
        issues.append(
            Issue(
                None,
                "file_reference",
                Reason.INVALID_FILE_REFERENCE,
                f"must be 1-{limits.max_file_reference_length} characters of valid Unicode, without control or bidi"
                " characters",
            )
        )


def _check_accounts(numbers: list[str], limits: ValidationLimits, issues: list[Issue]) -> None:
    item, column = _account_patterns(limits.max_account_number_length)
    if _all_match(column, numbers):
        return
    match = item.fullmatch
    for index, number in enumerate(numbers):
        if not number:
            issues.append(Issue(index, "destination_account.account_number", Reason.EMPTY_ACCOUNT_NUMBER, "is empty"))
        elif match(number) is None:
            issues.append(
                Issue(
                    index,
                    "destination_account.account_number",
                    Reason.MALFORMED_ACCOUNT_NUMBER,
                    f"must be 1-{limits.max_account_number_length} ASCII letters or digits",
                )
            )


def _check_types(types: list[str], limits: ValidationLimits, issues: list[Issue]) -> None:
    allowed = limits.destination_account_types
    if set(types) <= allowed:
        return
    names = ", ".join(sorted(allowed))
    for index, account_type in enumerate(types):
        if account_type not in allowed:
            issues.append(
                Issue(
                    index,
                    "destination_account.account_type",
                    Reason.INVALID_ACCOUNT_TYPE,
                    f"{account_type!r} is not one of {names}",
                )
            )


def _check_currencies(currencies: list[str], origin_currency: str, issues: list[Issue]) -> None:
    distinct = set(currencies)
    if not distinct or distinct == {origin_currency}:
        return
    for index, currency in enumerate(currencies):
        if currency != origin_currency:
            issues.append(
                Issue(
                    index,
                    "destination_account.currency",
                    Reason.CURRENCY_MISMATCH,
                    f"{currency!r} differs from the origin account's {origin_currency!r}",
                )
            )


def _check_emails(emails: list[str], limits: ValidationLimits, issues: list[Issue]) -> None:
    longest = max(map(len, emails), default=0)
    if longest <= min(limits.max_email_length, _EMAIL_COLUMN_MAX) and _all_match(_EMAIL_COLUMN, emails):
        return
    match = _EMAIL.fullmatch
    for index, email in enumerate(emails):
        if len(email) > limits.max_email_length or match(email) is None:
            issues.append(
                Issue(
                    index,
                    "destination_account.email",
                    Reason.MALFORMED_EMAIL,
                    f"must be an address like name@example.com (ASCII, at most {limits.max_email_length} characters)",
                )
            )


def _check_texts(
    concepts: list[str], references: list[str | None], limits: ValidationLimits, issues: list[Issue]
) -> bytes:
    """Check lengths and Unicode validity; return the concepts joined by newlines as UTF-8 (b"" when invalid)."""
    if max(map(len, concepts), default=0) > limits.max_concept_length:
        for index, concept in enumerate(concepts):
            if len(concept) > limits.max_concept_length:
                issues.append(
                    Issue(
                        index,
                        "concept",
                        Reason.CONCEPT_TOO_LONG,
                        f"{len(concept)} characters; at most {limits.max_concept_length} are allowed",
                    )
                )
    try:
        encoded = "\n".join(concepts).encode("utf-8")  # refuses lone surrogates
    except UnicodeEncodeError:
        encoded = b""
        _report_invalid_text("concept", concepts, issues)
    if not _is_text("".join(filter(None, references))):
        _report_invalid_text("employee_reference", references, issues)
    for name, column in (("concept", concepts), ("employee_reference", references)):
        if any_unsafe("".join(filter(None, column))):
            for index, text in enumerate(column):
                where = unsafe_character(text) if text else None
                if where is not None:
                    issues.append(
                        Issue(index, name, Reason.INVALID_TEXT, f"holds a control or bidi character ({where})")
                    )
    return encoded


def _report_invalid_text(name: str, column: Sequence[str | None], issues: list[Issue]) -> None:
    for index, text in enumerate(column):
        if text and not _is_text(text):
            issues.append(Issue(index, name, Reason.INVALID_TEXT, "holds a lone surrogate (not valid Unicode)"))


def _check_amounts(amounts: list[Decimal], limits: ValidationLimits, issues: list[Issue]) -> list[str]:
    """Check every amount; return each amount's JCS text (the normalised decimal)."""
    written = list(map(str, amounts))
    if _all_match(_AMOUNT_COLUMN, written) and (
        limits.max_amount == _AMOUNT_CEILING or max(amounts) <= limits.max_amount
    ):
        # Every text is digits with at most 2 decimals: the JCS text is it without trailing fractional zeros.
        return [text.rstrip("0").rstrip(".") if "." in text else text for text in written]
    texts: list[str] = []
    for index, amount in enumerate(amounts):
        if not amount.is_finite():
            issues.append(Issue(index, "amount", Reason.INVALID_AMOUNT, "must be a finite number"))
            texts.append(str(amount))
            continue
        if amount <= 0:
            issues.append(Issue(index, "amount", Reason.NON_POSITIVE_AMOUNT, "must be greater than zero"))
        if _decimal_places(amount) > 2:
            issues.append(Issue(index, "amount", Reason.TOO_MANY_DECIMALS, "has more than 2 decimals"))
        if amount > limits.max_amount:
            issues.append(Issue(index, "amount", Reason.AMOUNT_TOO_LARGE, f"exceeds the maximum {limits.max_amount}"))
        texts.append(_amount_text(amount))
    return texts


def _check_duplicates(numbers: list[str], amount_texts: list[str], concepts: list[str], issues: list[Issue]) -> None:
    # The amount's canonical text identifies its value (100 and 100.00 share the text "100").
    if len(set(numbers)) == len(numbers):
        return  # the usual payroll: one transfer per account, so no key can repeat
    keys = list(zip(numbers, amount_texts, concepts, strict=True))
    if len(set(keys)) == len(keys):
        return
    first: dict[tuple[str, str, str], int] = {}
    for index, key in enumerate(keys):
        earlier = first.setdefault(key, index)
        if earlier != index:
            issues.append(
                Issue(
                    index,
                    "transaction",
                    Reason.DUPLICATE_TRANSFER,
                    f"same destination account, amount and concept as transaction {earlier}",
                )
            )


def _control_sum(amounts: list[Decimal]) -> Decimal:
    """The exact sum; the context is wide enough never to round, and rounding would raise (Inexact trapped)."""
    with localcontext() as ctx:
        ctx.prec = 100
        ctx.traps[Inexact] = True
        return sum(amounts, Decimal(0))


def _run(batch: PayrollBatch, limits: ValidationLimits) -> tuple[list[Issue], ValidatedBatch | None]:
    rows = batch.transactions
    issues: list[Issue] = []
    _check_batch(batch, limits, len(rows), issues)
    numbers = list(map(_get_number, rows))
    types = list(map(_get_type, rows))
    emails = list(map(_get_email, rows))
    amounts = list(map(_get_amount, rows))
    concepts = list(map(_get_concept, rows))
    _check_accounts(numbers, limits, issues)
    _check_types(types, limits, issues)
    _check_currencies(list(map(_get_currency, rows)), batch.origin.currency, issues)
    _check_emails(emails, limits, issues)
    concepts_utf8 = _check_texts(concepts, list(map(_get_reference, rows)), limits, issues)
    amount_texts = _check_amounts(amounts, limits, issues)
    _check_duplicates(numbers, amount_texts, concepts, issues)
    if issues:
        issues.sort(key=lambda issue: -1 if issue.index is None else issue.index)  # stable: rule order per row
        return issues, None
    return issues, ValidatedBatch(
        batch=batch,
        limits=limits,
        control_sum=_control_sum(amounts),
        account_numbers=numbers,
        account_types=types,
        emails=emails,
        concepts=concepts,
        amount_texts=amount_texts,
        concepts_utf8=concepts_utf8,
    )


def validate(batch: PayrollBatch, limits: ValidationLimits = DEFAULT_LIMITS) -> ValidationReport:
    """Check every rule on every row; the report lists all problems (empty when the batch is valid)."""
    issues, _ = _run(batch, limits)
    return ValidationReport(tuple(issues), len(batch.transactions))


def validated(batch: PayrollBatch, limits: ValidationLimits = DEFAULT_LIMITS) -> ValidatedBatch:
    """Validate and return the proof of validity for the payload builder; raises `InvalidBatchError`."""
    issues, result = _run(batch, limits)
    if result is None:
        raise InvalidBatchError(ValidationReport(tuple(issues), len(batch.transactions)))
    return result
