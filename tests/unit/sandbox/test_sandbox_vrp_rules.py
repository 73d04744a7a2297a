"""The sandbox's flow B rules, without HTTP: validation, period arithmetic, control-parameter checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sandbox_vrp_support import consent_body, limit, mutate, payment_body, utc

from sandbox.vrp_rules import (
    ConsentRequest,
    ControlParameterBreachError,
    InvalidFieldError,
    PastPayment,
    PaymentRequest,
    add_months,
    check_control_parameters,
    check_matches_consent,
    consent_id_of,
    payment_status,
    period_window,
    validate_consent_request,
    validate_payment_request,
)

# --- add_months -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "months", "expected"),
    [
        (utc(2027, 1, 31, 10, 30), 1, utc(2027, 2, 28, 10, 30)),
        (utc(2028, 1, 31, 10, 30), 1, utc(2028, 2, 29, 10, 30)),  # leap year
        (utc(2027, 1, 31, 10, 30), 2, utc(2027, 3, 31, 10, 30)),  # counted from the anchor, not from Feb 28
        (utc(2027, 3, 31), 1, utc(2027, 4, 30)),
        (utc(2026, 12, 15), 1, utc(2027, 1, 15)),
        (utc(2027, 1, 15), -1, utc(2026, 12, 15)),
        (utc(2028, 2, 29), 12, utc(2029, 2, 28)),
        (utc(2028, 2, 29), 48, utc(2032, 2, 29)),
    ],
)
def test_add_months_clamps_to_the_end_of_the_month(start: datetime, months: int, expected: datetime) -> None:
    assert add_months(start, months) == expected


# --- period windows ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "at", "start", "end"),
    [
        ("Day", utc(2026, 11, 4, 23, 59, 59), utc(2026, 11, 4), utc(2026, 11, 5)),
        ("Day", utc(2026, 11, 5), utc(2026, 11, 5), utc(2026, 11, 6)),
        ("Week", utc(2026, 11, 8, 23, 59), utc(2026, 11, 2), utc(2026, 11, 9)),  # Sunday belongs to Monday's week
        ("Week", utc(2026, 11, 9), utc(2026, 11, 9), utc(2026, 11, 16)),
        ("Week", utc(2027, 1, 1, 12), utc(2026, 12, 28), utc(2027, 1, 4)),  # ISO week across the year end
        ("Month", utc(2028, 2, 29, 23, 59), utc(2028, 2, 1), utc(2028, 3, 1)),
        ("Month", utc(2026, 12, 31, 23, 59), utc(2026, 12, 1), utc(2027, 1, 1)),
    ],
)
def test_calendar_windows(period: Any, at: datetime, start: datetime, end: datetime) -> None:
    assert period_window(period, "Calendar", utc(2026, 6, 17, 13, 45), at) == (start, end)


def test_calendar_windows_use_utc_whatever_the_offset_of_the_instant() -> None:
    from datetime import timezone

    at = datetime(2026, 11, 5, 1, 0, tzinfo=timezone(timedelta(hours=5)))  # 2026-11-04T20:00Z
    assert period_window("Day", "Calendar", utc(2026, 1, 1), at) == (utc(2026, 11, 4), utc(2026, 11, 5))


@pytest.mark.parametrize(
    ("period", "at", "start", "end"),
    [
        ("Day", utc(2026, 11, 3, 10, 29, 59), utc(2026, 11, 2, 10, 30), utc(2026, 11, 3, 10, 30)),
        ("Day", utc(2026, 11, 3, 10, 30), utc(2026, 11, 3, 10, 30), utc(2026, 11, 4, 10, 30)),
        ("Week", utc(2026, 11, 9, 10, 29), utc(2026, 11, 2, 10, 30), utc(2026, 11, 9, 10, 30)),
        ("Week", utc(2026, 11, 20), utc(2026, 11, 16, 10, 30), utc(2026, 11, 23, 10, 30)),
        ("Month", utc(2026, 12, 2, 10, 29), utc(2026, 11, 2, 10, 30), utc(2026, 12, 2, 10, 30)),
        ("Month", utc(2026, 12, 2, 10, 30), utc(2026, 12, 2, 10, 30), utc(2027, 1, 2, 10, 30)),
    ],
)
def test_consent_windows(period: Any, at: datetime, start: datetime, end: datetime) -> None:
    assert period_window(period, "Consent", utc(2026, 11, 2, 10, 30), at) == (start, end)


def test_consent_months_from_the_31st_clamp_and_recover() -> None:
    anchor = utc(2028, 1, 31, 8)
    assert period_window("Month", "Consent", anchor, utc(2028, 2, 29, 7, 59)) == (anchor, utc(2028, 2, 29, 8))
    assert period_window("Month", "Consent", anchor, utc(2028, 2, 29, 8)) == (utc(2028, 2, 29, 8), utc(2028, 3, 31, 8))
    assert period_window("Month", "Consent", anchor, utc(2028, 3, 30)) == (utc(2028, 2, 29, 8), utc(2028, 3, 31, 8))
    assert period_window("Month", "Consent", anchor, utc(2028, 4, 30, 8)) == (utc(2028, 4, 30, 8), utc(2028, 5, 31, 8))


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        period_window("Day", "Calendar", utc(2026, 1, 1), datetime(2026, 1, 2))


instants = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2090, 12, 1), timezones=st.just(UTC))
periods = st.sampled_from(["Day", "Week", "Month"])
alignments = st.sampled_from(["Consent", "Calendar"])


@given(
    anchor=instants,
    offset=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3000)),
    period=periods,
    alignment=alignments,
)
def test_window_contains_the_instant_and_windows_tile(
    anchor: datetime, offset: timedelta, period: Any, alignment: Any
) -> None:
    at = anchor + offset
    start, end = period_window(period, alignment, anchor, at)
    assert start <= at < end
    # The next window starts exactly where this one ends, and a window is its own window's start.
    assert period_window(period, alignment, anchor, end)[0] == end
    assert period_window(period, alignment, anchor, start) == (start, end)
    if period == "Day":
        assert end - start == timedelta(days=1)
    elif period == "Week":
        assert end - start == timedelta(days=7)
    else:
        assert timedelta(days=28) <= end - start <= timedelta(days=31)
    if alignment == "Calendar":
        assert (start.hour, start.minute, start.second, start.microsecond) == (0, 0, 0, 0)
        if period == "Week":
            assert start.weekday() == 0
        if period == "Month":
            assert start.day == 1
    else:
        # Consent windows sit on the anchor's grid: the anchor's time of day, n whole steps from the anchor.
        if period in ("Day", "Week"):
            assert (start - anchor) % (end - start) == timedelta(0)
        else:
            n = (start.year - anchor.year) * 12 + start.month - anchor.month
            assert start == add_months(anchor, n)
            assert end == add_months(anchor, n + 1)


@given(anchor=instants, months=st.integers(min_value=0, max_value=600))
def test_add_months_keeps_time_and_never_overshoots_the_month(anchor: datetime, months: int) -> None:
    moved = add_months(anchor, months)
    assert moved.time() == anchor.time()
    assert (moved.year * 12 + moved.month) - (anchor.year * 12 + anchor.month) == months
    assert moved.day == anchor.day or (moved.day < anchor.day and (moved + timedelta(days=1)).day == 1)


# --- control parameters -----------------------------------------------------------------------------------------


def controls(*limits: dict[str, str], maximum: str = "100.00") -> dict[str, Any]:
    body = consent_body(*limits, maximum=maximum, valid_from="2026-11-01T00:00:00Z", valid_to="2026-12-01T00:00:00Z")
    return dict(body["Data"]["ControlParameters"])


CREATED = utc(2026, 11, 2, 9)


def check(ctrl: dict[str, Any], at: datetime, amount: str, earlier: list[PastPayment], currency: str = "GBP") -> None:
    check_control_parameters(ctrl, CREATED, at, Decimal(amount), currency, earlier)


def breach(ctrl: dict[str, Any], at: datetime, amount: str, earlier: list[PastPayment], **kw: Any) -> str:
    with pytest.raises(ControlParameterBreachError) as info:
        check(ctrl, at, amount, earlier, **kw)
    return info.value.path


def test_maximum_individual_amount_boundary() -> None:
    ctrl = controls(maximum="100.00")
    check(ctrl, CREATED, "100.00", [])
    assert breach(ctrl, CREATED, "100.01", []) == "Data.ControlParameters.MaximumIndividualAmount.Amount"


def test_currency_must_be_the_consents() -> None:
    assert breach(controls(), CREATED, "1.00", [], currency="EUR") == (
        "Data.ControlParameters.MaximumIndividualAmount.Currency"
    )


def test_validity_window_is_inclusive() -> None:
    ctrl = controls()
    check(ctrl, utc(2026, 11, 1), "1.00", [])
    check(ctrl, utc(2026, 12, 1), "1.00", [])
    before = utc(2026, 11, 1) - timedelta(milliseconds=1)
    after = utc(2026, 12, 1) + timedelta(milliseconds=1)
    assert breach(ctrl, before, "1.00", []) == "Data.ControlParameters.ValidFromDateTime"
    assert breach(ctrl, after, "1.00", []) == "Data.ControlParameters.ValidToDateTime"


def test_periodic_limit_counts_only_payments_in_the_current_window() -> None:
    ctrl = controls(limit("1000.00", "Month", "Calendar"), limit("150.00", "Day", "Calendar"), maximum="500.00")
    at = utc(2026, 11, 3, 12)
    earlier = [PastPayment(utc(2026, 11, 2, 23, 59), Decimal("100.00")), PastPayment(utc(2026, 11, 3), Decimal("50"))]
    check(ctrl, at, "100.00", earlier)  # yesterday's 100 does not count against today's limit
    with pytest.raises(ControlParameterBreachError) as info:
        check(ctrl, at, "100.01", earlier)
    assert info.value.path == "Data.ControlParameters.PeriodicLimits[1]"
    assert "50" in info.value.message
    assert "150.01" in info.value.message
    assert "150.00 GBP" in info.value.message


def test_first_limit_breached_is_reported() -> None:
    ctrl = controls(limit("10.00", "Week", "Consent"), limit("5.00", "Day", "Consent"))
    assert breach(ctrl, CREATED, "20.00", []) == "Data.ControlParameters.PeriodicLimits[0]"


@given(
    amounts=st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=30),
    cap=st.integers(min_value=1, max_value=50000),
)
def test_accepting_greedily_never_exceeds_the_limit(amounts: list[int], cap: int) -> None:
    ctrl = controls(limit(f"{Decimal(cap) / 100:.2f}", "Day", "Consent"), maximum="999999.99")
    accepted: list[PastPayment] = []
    for cents in amounts:
        amount = f"{Decimal(cents) / 100:.2f}"
        used = sum((p.amount for p in accepted), Decimal(0))
        try:
            check(ctrl, CREATED, amount, accepted)
        except ControlParameterBreachError:
            assert used + Decimal(amount) > Decimal(cap) / 100
        else:
            accepted.append(PastPayment(CREATED, Decimal(amount)))
    assert sum((p.amount for p in accepted), Decimal(0)) <= Decimal(cap) / 100


# --- consent request validation ---------------------------------------------------------------------------------

CP = "Data.ControlParameters"


@pytest.mark.parametrize(
    ("path", "value", "error_path"),
    [
        ("Risk", ..., "Risk"),
        ("Risk", [], "Risk"),
        ("Data", "x", "Data"),
        ("Data.Extra", 1, "Data.Extra"),
        (f"{CP}.PSUAuthenticationMethods", [], f"{CP}.PSUAuthenticationMethods"),
        (f"{CP}.PSUAuthenticationMethods", ["UK.OBIE.SCANotRequired"], f"{CP}.PSUAuthenticationMethods"),
        (f"{CP}.PSUAuthenticationMethods", ["UK.OBIE.SCA", "Other"], f"{CP}.PSUAuthenticationMethods[1]"),
        (f"{CP}.PSUAuthenticationMethods", "UK.OBIE.SCA", f"{CP}.PSUAuthenticationMethods"),
        (f"{CP}.VRPType", ["UK.OBIE.VRPType.Commercial"], f"{CP}.VRPType"),
        (f"{CP}.VRPType", ["UK.OBIE.VRPType.Sweeping"] * 2, f"{CP}.VRPType"),
        (f"{CP}.ValidFromDateTime", "2026-01-01T00:00:00", f"{CP}.ValidFromDateTime"),  # no offset
        (f"{CP}.ValidFromDateTime", "2026-01-01", f"{CP}.ValidFromDateTime"),
        (f"{CP}.ValidFromDateTime", "2026-02-30T00:00:00Z", f"{CP}.ValidFromDateTime"),
        (f"{CP}.ValidToDateTime", "2026-01-01T00:00:00+00:00", f"{CP}.ValidToDateTime"),  # equal to from
        (f"{CP}.ValidToDateTime", 1767225600, f"{CP}.ValidToDateTime"),
        (f"{CP}.MaximumIndividualAmount.Amount", Decimal("10.50"), f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Amount", 10, f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Amount", "10.001", f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Amount", "0.00", f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Amount", "-1.00", f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Amount", "1e3", f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Amount", " 10.00", f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Amount", "10.00\n", f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Amount", "\u0661\u0660", f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Amount", "12345678901234", f"{CP}.MaximumIndividualAmount.Amount"),
        (f"{CP}.MaximumIndividualAmount.Currency", "gbp", f"{CP}.MaximumIndividualAmount.Currency"),
        (f"{CP}.MaximumIndividualAmount.Currency", ..., f"{CP}.MaximumIndividualAmount.Currency"),
        (f"{CP}.MaximumIndividualAmount", None, f"{CP}.MaximumIndividualAmount"),
        (f"{CP}.PeriodicLimits", {}, f"{CP}.PeriodicLimits"),
        (f"{CP}.PeriodicLimits[0].Currency", "EUR", f"{CP}.PeriodicLimits[0].Currency"),
        (f"{CP}.PeriodicLimits[0].PeriodType", "Year", f"{CP}.PeriodicLimits[0].PeriodType"),
        (f"{CP}.PeriodicLimits[0].PeriodAlignment", "Rolling", f"{CP}.PeriodicLimits[0].PeriodAlignment"),
        (f"{CP}.PeriodicLimits[0].Amount", "abc", f"{CP}.PeriodicLimits[0].Amount"),
        (f"{CP}.PeriodicLimits[0]", "x", f"{CP}.PeriodicLimits[0]"),
        (f"{CP}.Typo", "x", f"{CP}.Typo"),
        ("Data.Initiation.CreditorAccount.SchemeName", "UK.OBIE.IBAN", "Data.Initiation.CreditorAccount.SchemeName"),
        (
            "Data.Initiation.CreditorAccount.Identification",
            "4040011234567",
            "Data.Initiation.CreditorAccount.Identification",
        ),
        (
            "Data.Initiation.CreditorAccount.Identification",
            "40-40-01 12345678",
            "Data.Initiation.CreditorAccount.Identification",
        ),
        ("Data.Initiation.CreditorAccount.Name", "  ", "Data.Initiation.CreditorAccount.Name"),
        ("Data.Initiation.CreditorAccount.Name", "x" * 351, "Data.Initiation.CreditorAccount.Name"),
        ("Data.Initiation.DebtorAccount", {}, "Data.Initiation.DebtorAccount"),
        ("Data.RemittanceInformation.Reference", "R" * 36, "Data.RemittanceInformation.Reference"),
        ("Data.RemittanceInformation.Unstructured", ..., "Data.RemittanceInformation.Unstructured"),
        ("Data.RemittanceInformation", ..., "Data.RemittanceInformation"),
    ],
)
def test_consent_validation_names_the_field(path: str, value: Any, error_path: str) -> None:
    with pytest.raises(InvalidFieldError) as info:
        validate_consent_request(mutate(consent_body(), path, value))
    assert info.value.path == error_path


def test_duplicate_period_limit_is_refused() -> None:
    body = consent_body(limit("10.00", "Day", "Consent"), limit("20.00", "Day", "Consent"))
    with pytest.raises(InvalidFieldError) as info:
        validate_consent_request(body)
    assert info.value.path == f"{CP}.PeriodicLimits[1]"


def test_valid_consent_is_returned_as_sent() -> None:
    body = consent_body(
        limit("10.00", "Day", "Consent"),
        limit("20", "Week", "Calendar"),
        valid_from="2026-01-01T00:00:00.5-05:00",
        valid_to="2027-01-01T00:00Z",
    )
    body = mutate(body, f"{CP}.PSUAuthenticationMethods", ["UK.OBIE.SCANotRequired", "UK.OBIE.SCA"])
    valid = validate_consent_request(body)
    assert valid.data == body["Data"]
    assert valid.risk == {}
    no_limits = validate_consent_request(mutate(body, f"{CP}.PeriodicLimits", []))
    assert no_limits.data["ControlParameters"]["PeriodicLimits"] == []


# --- payment request validation ---------------------------------------------------------------------------------

IN = "Data.Instruction"


@pytest.mark.parametrize(
    ("path", "value", "error_path"),
    [
        ("Data.ConsentId", ..., "Data.ConsentId"),
        ("Data.ConsentId", 5, "Data.ConsentId"),
        ("Data.PSUAuthenticationMethod", "UK.OBIE.SCANotRequired", "Data.PSUAuthenticationMethod"),
        ("Data.VRPType", ["UK.OBIE.VRPType.Sweeping"], "Data.VRPType"),
        ("Data.Initiation", ..., "Data.Initiation"),
        ("Data.Initiation.CreditorAccount.Name", "", "Data.Initiation.CreditorAccount.Name"),
        (f"{IN}.InstructionIdentification", "I" * 36, f"{IN}.InstructionIdentification"),
        (f"{IN}.EndToEndIdentification", ..., f"{IN}.EndToEndIdentification"),
        (f"{IN}.InstructedAmount.Amount", 10.5, f"{IN}.InstructedAmount.Amount"),
        (f"{IN}.InstructedAmount.Amount", "0", f"{IN}.InstructedAmount.Amount"),
        (f"{IN}.InstructedAmount.Currency", "GB", f"{IN}.InstructedAmount.Currency"),
        (f"{IN}.CreditorAccount.Identification", "x", f"{IN}.CreditorAccount.Identification"),
        (f"{IN}.RemittanceInformation.Unstructured", "U" * 141, f"{IN}.RemittanceInformation.Unstructured"),
        (f"{IN}.RemittanceInformation.Other", "x", f"{IN}.RemittanceInformation.Other"),
        (f"{IN}.Extra", "x", f"{IN}.Extra"),
        ("Extra", {}, "Extra"),
    ],
)
def test_payment_validation_names_the_field(path: str, value: Any, error_path: str) -> None:
    with pytest.raises(InvalidFieldError) as info:
        validate_payment_request(mutate(payment_body("vrp-1", "10.00"), path, value))
    assert info.value.path == error_path


def test_valid_payment_request_parses_amount_exactly() -> None:
    body = payment_body("vrp-1", "10.10")
    del body["Data"]["Instruction"]["RemittanceInformation"]
    payment = validate_payment_request(body)
    assert (payment.consent_id, payment.amount, payment.currency) == ("vrp-1", Decimal("10.10"), "GBP")
    assert consent_id_of(body) == "vrp-1"
    with pytest.raises(InvalidFieldError):
        consent_id_of({"Data": []})


def test_payment_must_match_the_consent() -> None:
    consent = consent_body()["Data"]
    check_matches_consent(consent, validate_payment_request(payment_body("vrp-1", "1.00")))
    other = mutate(payment_body("vrp-1", "1.00"), "Data.Initiation.CreditorAccount.Name", "Someone Else")
    with pytest.raises(InvalidFieldError) as info:
        check_matches_consent(consent, validate_payment_request(other))
    assert info.value.path == "Data.Initiation"
    other = mutate(payment_body("vrp-1", "1.00"), f"{IN}.CreditorAccount.Identification", "40400187654321")
    with pytest.raises(InvalidFieldError) as info:
        check_matches_consent(consent, validate_payment_request(other))
    assert info.value.path == f"{IN}.CreditorAccount"


def test_payment_status_moves_after_the_delay() -> None:
    created = utc(2026, 11, 2, 9)
    assert payment_status(created, created + timedelta(seconds=0.999), 1.0) == ("Pending", created)
    settled = created + timedelta(seconds=1)
    assert payment_status(created, settled, 1.0) == ("AcceptedSettlementCompleted", settled)
    assert payment_status(created, created, 0.0) == ("AcceptedSettlementCompleted", created)


# --- robustness: arbitrary JSON never escapes as anything but InvalidFieldError ----------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def leaf_paths(value: Any, prefix: str = "") -> list[str]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in [f"{prefix}{k}", *leaf_paths(v, f"{prefix}{k}.")]]
    if isinstance(value, list):
        base = prefix.rstrip(".")
        return [p for i, v in enumerate(value) for p in [f"{base}[{i}]", *leaf_paths(v, f"{base}[{i}].")]]
    return []


CONSENT_PATHS = leaf_paths(consent_body(limit("10.00", "Day", "Consent")))
PAYMENT_PATHS = leaf_paths(payment_body("vrp-1", "1.00"))


def outcome(fn: Any, *args: Any) -> Any:
    """The function's result, or the rule exception it raised (anything else propagates and fails the test)."""
    try:
        return fn(*args)
    except (InvalidFieldError, ControlParameterBreachError) as exc:
        return exc


@given(path=st.sampled_from(CONSENT_PATHS), value=json_values | st.just(...))
def test_any_mutation_of_a_consent_body_is_accepted_or_named(path: str, value: Any) -> None:
    valid = outcome(validate_consent_request, mutate(consent_body(limit("10.00", "Day", "Consent")), path, value))
    if isinstance(valid, InvalidFieldError):
        assert valid.path
        return
    # Whatever passed validation can be checked against without crashing.
    ctrl = valid.data["ControlParameters"]
    result = outcome(check_control_parameters, ctrl, CREATED, CREATED, Decimal("1.00"), "GBP", [])
    assert result is None or result.path.startswith("Data.ControlParameters")


@given(path=st.sampled_from(PAYMENT_PATHS), value=json_values | st.just(...))
def test_any_mutation_of_a_payment_body_is_accepted_or_named(path: str, value: Any) -> None:
    payment = outcome(validate_payment_request, mutate(payment_body("vrp-1", "1.00"), path, value))
    if isinstance(payment, InvalidFieldError):
        assert payment.path
        return
    result = outcome(check_matches_consent, consent_body()["Data"], payment)
    assert result is None or result.path in ("Data.Initiation", "Data.Instruction.CreditorAccount")


@given(body=st.dictionaries(st.sampled_from(["Data", "Risk", "x"]), json_values, max_size=3))
def test_arbitrary_json_bodies_are_named(body: dict[str, Any]) -> None:
    for validate in (validate_consent_request, validate_payment_request, consent_id_of):
        assert isinstance(outcome(validate, body), InvalidFieldError | ConsentRequest | PaymentRequest | str)
