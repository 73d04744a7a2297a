"""Property tests (hypothesis) of the file payload.

- the control sum is exact: it equals the Decimal sum, never a float-rounded one;
- the file hash is stable under key order, whitespace, string escapes and amount spelling of the input JSON;
- validation reports exactly the rows made bad, with the right reasons;
- the canonical bytes equal the `rfc8785` package's output;
- the column-at-once checks of validation agree with plain per-row oracles written here.
"""

from __future__ import annotations

import json
import string
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal, localcontext
from typing import Any

import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from text_strategies import SAFE_CHARACTERS

from processor.domain.batch import OriginAccount, PayrollBatch, Transfer, batch_from_json
from processor.domain.canonical import number_text
from processor.domain.payload import prepare_file_payload, upload_file_json
from processor.domain.validation import Reason, ValidationLimits, validate, validated

ORIGIN = OriginAccount("0100123456", "MONETARY", "GTQ")
CENT = Decimal("0.01")
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_batch(transfers: list[Transfer]) -> PayrollBatch:
    return PayrollBatch(
        batch_id="prop",
        integration="bank-gt",
        file_reference="PROP-1",
        origin=ORIGIN,
        transactions=tuple(transfers),
        requested_at=datetime(2024, 11, 30, tzinfo=UTC),
        source="hypothesis",
    )


def good_row(i: int, amount: Decimal = Decimal("10.00"), concept: str = "") -> Transfer:
    return Transfer(f"ACC{i:06d}", "SAVINGS", "GTQ", f"e{i}@example.com", amount, f"#{i} {concept}"[:140])


def floats_for_oracle(value: Any) -> Any:
    """rfc8785 takes floats; convert a Decimal only after checking the double prints back the same decimal."""
    if isinstance(value, Decimal):
        assert Decimal(repr(float(value))) == value
        return float(value)
    if isinstance(value, dict):
        return {k: floats_for_oracle(v) for k, v in value.items()}
    if isinstance(value, list):
        return [floats_for_oracle(v) for v in value]
    return value


cents = st.integers(min_value=1, max_value=999_999_999_999_99)
small_amounts = st.one_of(
    st.sampled_from([Decimal("0.01"), Decimal("0.1"), Decimal("0.10"), Decimal("0.2"), Decimal("0.3")]),
    cents.map(lambda c: Decimal(c) / 100),
)


# --- control sum ---------------------------------------------------------------------------------------------


@PROPERTY
@given(st.lists(small_amounts, min_size=1, max_size=200))
def test_control_sum_is_the_exact_decimal_sum(amounts: list[Decimal]) -> None:
    payload = prepare_file_payload(make_batch([good_row(i, a) for i, a in enumerate(amounts)]))
    with localcontext() as ctx:
        ctx.prec = 200
        exact = sum(amounts, Decimal(0))
    in_cents = sum(int(a * 100) for a in amounts)
    assert payload.control_sum == exact == Decimal(in_cents) / 100
    assert payload.number_of_transactions == str(len(amounts))
    assert json.loads(b"".join(payload.initiation_parts()), parse_float=Decimal)["ControlSum"] == exact


def test_control_sum_of_many_cents_and_tenths_is_not_float_rounded() -> None:
    tenths = [Decimal("0.1")] * 1000 + [Decimal("0.01")] * 3000
    payload = prepare_file_payload(make_batch([good_row(i, a) for i, a in enumerate(tenths)]))
    assert payload.control_sum == Decimal("130.00")
    assert str(payload.control_sum) == "130.00"
    assert sum(float(a) for a in tenths) != 130.0  # what a float sum would have produced
    assert b'"ControlSum":130' in b"".join(payload.initiation_parts())


# --- hash stability under the input's JSON spelling ----------------------------------------------------------

concepts = st.text(SAFE_CHARACTERS, max_size=60)
emails = st.from_regex(
    r"[a-z0-9]{1,10}(\.[a-z0-9+_-]{1,5})?@[a-z0-9]{1,10}(-[a-z0-9]{1,5})?\.(com|gt|org)", fullmatch=True
)


@st.composite
def batch_dicts(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(min_value=1, max_value=15))
    rows = []
    for i in range(count):
        destination: dict[str, Any] = {
            "account_number": f"{draw(st.from_regex(r'[A-Za-z0-9]{1,20}', fullmatch=True))}X{i}",
            "currency": "GTQ",
            "email": draw(emails),
        }
        if draw(st.booleans()):
            destination["account_type"] = draw(st.sampled_from(["SAVINGS", "MONETARY"]))
        row: dict[str, Any] = {
            "destination_account": destination,
            "amount": Decimal(draw(cents)) / 100,
            "concept": f"{i} {draw(concepts)}",
        }
        if draw(st.booleans()):
            row["employee_reference"] = draw(st.none() | st.text(SAFE_CHARACTERS, max_size=10))
        rows.append(row)
    return {
        "batch_id": "b-1",
        "integration": "bank-gt",
        "file_reference": "REF-1",
        "origin_account": {"account_number": "0100123456", "account_type": "MONETARY", "currency": "GTQ"},
        "transactions": rows,
        "requested_at": "2024-11-30T12:00:00.000Z",
        "source": "erp",
    }


@st.composite
def json_spellings(draw: st.DrawFn, value: Any) -> str:
    """`value` written as JSON with shuffled keys, random whitespace, escapes and amount spellings."""
    space = st.text(alphabet=" \t\n\r", max_size=3)

    def write(item: Any) -> str:
        if isinstance(item, dict):
            keys = draw(st.permutations(list(item)))
            parts = [f"{draw(space)}{write(k)}{draw(space)}:{draw(space)}{write(item[k])}{draw(space)}" for k in keys]
            return "{" + ",".join(parts) + draw(space) + "}"
        if isinstance(item, list):
            return "[" + ",".join(draw(space) + write(v) + draw(space) for v in item) + "]"
        if isinstance(item, Decimal):
            text = format(item, "f")
            style = draw(st.integers(0, 3))
            if style == 1:
                text += ("" if "." in text else ".") + "0" * draw(st.integers(1, 4))
            elif style == 2:
                text = json.dumps(text)  # as a decimal string
            elif style == 3 and item == item.to_integral_value():
                text = format(item.to_integral_value(), "f")
            return text
        return json.dumps(item, ensure_ascii=draw(st.booleans()))

    return write(value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_file_hash_is_stable_under_json_spelling(data: st.DataObject) -> None:
    value = data.draw(batch_dicts())
    first = data.draw(json_spellings(value))
    second = data.draw(json_spellings(value))
    a = prepare_file_payload(batch_from_json(first))
    b = prepare_file_payload(batch_from_json(second.encode()))
    assert a.file_hash == b.file_hash
    assert a.canonical == b.canonical
    assert a.control_sum == b.control_sum
    # And it is the hash of the canonical bytes the oracle produces.
    assert a.canonical == rfc8785.dumps(floats_for_oracle(a.to_dict()))


# --- validation finds every bad row --------------------------------------------------------------------------

BAD_KINDS: dict[str, tuple[Reason, Any]] = {
    "zero": (Reason.NON_POSITIVE_AMOUNT, lambda r, d: replace(r, amount=Decimal("0.00"))),
    "negative": (Reason.NON_POSITIVE_AMOUNT, lambda r, d: replace(r, amount=-r.amount)),
    "decimals": (Reason.TOO_MANY_DECIMALS, lambda r, d: replace(r, amount=r.amount + Decimal("0.001"))),
    "large": (Reason.AMOUNT_TOO_LARGE, lambda r, d: replace(r, amount=Decimal("10000000000000"))),
    "currency": (Reason.CURRENCY_MISMATCH, lambda r, d: replace(r, currency=d(st.sampled_from(["USD", "gtq", ""])))),
    "empty_account": (Reason.EMPTY_ACCOUNT_NUMBER, lambda r, d: replace(r, account_number="")),
    "bad_account": (
        Reason.MALFORMED_ACCOUNT_NUMBER,
        lambda r, d: replace(r, account_number=r.account_number + d(st.sampled_from(["-", " ", "\n", "é", "Z" * 30]))),
    ),
    "type": (Reason.INVALID_ACCOUNT_TYPE, lambda r, d: replace(r, account_type="CHECKING")),
    "email": (
        Reason.MALFORMED_EMAIL,
        lambda r, d: replace(
            r, email=d(st.sampled_from(["", "x", "a@b", "a@@b.com", "a b@c.com", "a@b.c", ".a@b.co"]))
        ),
    ),
    "concept": (Reason.CONCEPT_TOO_LONG, lambda r, d: replace(r, concept=r.concept + "x" * 140)),
    "surrogate": (Reason.INVALID_TEXT, lambda r, d: replace(r, concept=r.concept + "\ud800")),
    "bidi": (Reason.INVALID_TEXT, lambda r, d: replace(r, concept=r.concept + "\u202e")),
}


@PROPERTY
@given(st.data())
def test_validation_reports_exactly_the_bad_rows(data: st.DataObject) -> None:
    count = data.draw(st.integers(min_value=1, max_value=60), label="count")
    rows = [good_row(i, Decimal(data.draw(cents)) / 100, data.draw(concepts)) for i in range(count)]
    bad = data.draw(st.sets(st.integers(0, count - 1), max_size=count), label="bad rows")
    expected: dict[int, set[Reason]] = {}
    for index in sorted(bad):
        kinds = [*BAD_KINDS, "duplicate"] if index > 0 else list(BAD_KINDS)
        kind = data.draw(st.sampled_from(kinds), label=f"kind of {index}")
        if kind == "duplicate":
            sources = [i for i in range(index) if i not in bad]
            if not sources:
                kind = "zero"
            else:
                rows[index] = rows[data.draw(st.sampled_from(sources), label="copy of")]
                expected[index] = {Reason.DUPLICATE_TRANSFER}
                continue
        reason, mutate = BAD_KINDS[kind]
        rows[index] = mutate(rows[index], data.draw)
        expected[index] = {reason}
    report = validate(make_batch(rows))
    assert report.bad_rows() == expected
    assert all(issue.index is not None for issue in report.issues)  # no batch-level problem
    assert report.ok == (not bad)


# --- JCS equals the rfc8785 package for generated payloads ---------------------------------------------------


@PROPERTY
@given(
    st.lists(
        st.tuples(
            emails,
            st.sampled_from(["SAVINGS", "MONETARY"]),
            small_amounts,
            st.text(SAFE_CHARACTERS, max_size=130),
        ),
        min_size=1,
        max_size=25,
    ),
    st.text(SAFE_CHARACTERS, min_size=1, max_size=60).filter(lambda s: "\ud800" not in s),
)
def test_canonical_payload_equals_rfc8785(rows: list[tuple[str, str, Decimal, str]], consent_id: str) -> None:
    transfers = [
        Transfer(f"A{i}", kind, "GTQ", email, amount, concept) for i, (email, kind, amount, concept) in enumerate(rows)
    ]
    batch = make_batch(transfers)
    payload = prepare_file_payload(batch)
    assert payload.canonical == rfc8785.dumps(floats_for_oracle(payload.to_dict()))
    upload = rfc8785.dumps(floats_for_oracle(payload.to_dict(consent_id)))
    assert payload.upload_json(consent_id) == upload
    assert upload_file_json(validated(batch), consent_id) == upload  # A2 of a batch whose payload is not at hand


# --- column-at-once checks agree with plain per-row oracles --------------------------------------------------

ATEXT = set(string.ascii_letters + string.digits + "!#$%&'*+/=?^_`{|}~-")
LDH = set(string.ascii_letters + string.digits + "-")


def email_oracle(email: str) -> bool:
    """The documented e-mail rule, written plainly without regular expressions."""
    if len(email) > 254 or email.count("@") != 1:
        return False
    local, domain = email.split("@")
    if not 1 <= len(local) <= 64 or any(not atom or not set(atom) <= ATEXT for atom in local.split(".")):
        return False
    labels = domain.split(".")
    if len(labels) < 2:
        return False
    *names, top = labels
    for label in names:
        if not 1 <= len(label) <= 63 or not set(label) <= LDH or label[0] == "-" or label[-1] == "-":
            return False
    return 2 <= len(top) <= 63 and top.isascii() and top.isalpha()


def account_oracle(number: str) -> bool:
    return 1 <= len(number) <= 34 and number.isascii() and number.isalnum()


def amount_oracle(amount: Decimal, limits: ValidationLimits) -> bool:
    if not amount.is_finite() or amount <= 0 or amount > limits.max_amount:
        return False
    with localcontext() as ctx:
        ctx.prec = 200
        return amount == amount.quantize(CENT)


tricky_emails = st.one_of(
    emails,
    st.emails(),
    st.text(alphabet='ab1.@-_+é \n"', max_size=20),
    st.builds(
        lambda e, pos, ch: e[:pos] + ch + e[pos:],
        emails,
        st.integers(0, 40),
        st.sampled_from([".", "@", "-", " ", "\n", "..", "é", "a" * 64, "-.", ".-"]),
    ),
)


@PROPERTY
@given(st.lists(tricky_emails, min_size=1, max_size=12))
def test_email_checks_agree_with_the_plain_rule(addresses: list[str]) -> None:
    report = validate(make_batch([replace(good_row(i), email=e) for i, e in enumerate(addresses)]))
    expected = {i for i, e in enumerate(addresses) if not email_oracle(e)}
    assert {i.index for i in report.issues if i.reason == Reason.MALFORMED_EMAIL} == expected


@PROPERTY
@given(st.lists(st.text(alphabet=string.ascii_letters + string.digits + " -é\n", max_size=40), min_size=1, max_size=12))
def test_account_checks_agree_with_the_plain_rule(numbers: list[str]) -> None:
    rows = [replace(good_row(i), account_number=n, concept=f"c{i}") for i, n in enumerate(numbers)]
    report = validate(make_batch(rows))
    bad = {i.index for i in report.issues if i.reason in {Reason.EMPTY_ACCOUNT_NUMBER, Reason.MALFORMED_ACCOUNT_NUMBER}}
    assert bad == {i for i, n in enumerate(numbers) if not account_oracle(n)}


amount_values = st.one_of(
    small_amounts,
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-1000, max_value=1000),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.builds(lambda c, zeros: Decimal(c) / 100 * Decimal(f"1.{'0' * zeros}"), cents, st.integers(0, 5)),
    st.sampled_from([Decimal("1E+2"), Decimal("1E-7"), Decimal("0E-5"), Decimal("9999999999999.99")]),
)


@PROPERTY
@given(st.lists(amount_values, min_size=1, max_size=12), st.sampled_from([None, Decimal(1000), Decimal("0.5")]))
def test_amount_checks_agree_with_the_plain_rule(amounts: list[Decimal], maximum: Decimal | None) -> None:
    limits = ValidationLimits() if maximum is None else ValidationLimits(max_amount=maximum)
    rows = [good_row(i, a) for i, a in enumerate(amounts)]
    report = validate(make_batch(rows), limits)
    amount_reasons = {
        Reason.INVALID_AMOUNT,
        Reason.NON_POSITIVE_AMOUNT,
        Reason.TOO_MANY_DECIMALS,
        Reason.AMOUNT_TOO_LARGE,
    }
    bad = {i.index for i in report.issues if i.reason in amount_reasons}
    assert bad == {i for i, a in enumerate(amounts) if not amount_oracle(a, limits)}
    if not bad:
        proof = validated(make_batch(rows), limits)
        assert list(proof.amount_texts) == [number_text(a) for a in amounts]
