"""Pure checks of sandbox.filecheck: the consent's Initiation, the upload against it, payment equality."""

from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sandbox_files_support import initiation, oracle_hash, payload, transaction, with_references

from sandbox.filecheck import (
    CheckError,
    FileSummary,
    check_initiation,
    decimal_places,
    first_difference,
    payload_hash,
    verify_upload,
)
from sandbox.jsonutil import loads

CID = "pay-fi-0b5f8a2e-6a53-4a8e-9b61-8f3a2c1d0e4f"
T0 = "Data.Initiation.SupplementaryData.data.transaction[0]"


def test_a_consistent_initiation_passes_and_sums_exactly() -> None:
    summary = check_initiation(initiation(), 100)
    assert summary == FileSummary(3, Decimal("4250.50"), "GTQ", "100200300")


def test_our_hash_equals_the_oracle_hash() -> None:
    file_payload = payload()
    assert payload_hash(file_payload) == oracle_hash(file_payload)


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(init: dict[str, Any]) -> None:
        target: Any = init
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


def _drop(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def apply(init: dict[str, Any]) -> None:
        target: Any = init
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return apply


TX0 = ["SupplementaryData", "data", "transaction", 0]

# Each mutation breaks one rule; the hash is recomputed afterwards unless the test is about the hash, so
# the error is the rule's own, not a hash mismatch.
BAD: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("missing FileType", _drop(["FileType"]), "Data.Initiation.FileType", "is required"),
    ("unknown field", _set(["DebtorAccount"], {"Identification": "1"}), "Data.Initiation.DebtorAccount", "not a field"),
    ("FileType number", _set(["FileType"], 4), "Data.Initiation.FileType", "JSON string"),
    ("FileType other", _set(["FileType"], "UK.OBIE.pain.001.001.08"), "Data.Initiation.FileType", "must be UK.OBIE"),
    ("empty FileReference", _set(["FileReference"], ""), "Data.Initiation.FileReference", "must not be empty"),
    ("long FileReference", _set(["FileReference"], "R" * 41), "Data.Initiation.FileReference", "at most 40"),
    ("FileHash not base64", _set(["FileHash"], "not base64!"), "Data.Initiation.FileHash", "32-byte"),
    ("FileHash 16 bytes", _set(["FileHash"], "AAAAAAAAAAAAAAAAAAAAAA=="), "Data.Initiation.FileHash", "32-byte"),
    ("count as number", _set(["NumberOfTransactions"], 3), "Data.Initiation.NumberOfTransactions", "JSON string"),
    ("count not digits", _set(["NumberOfTransactions"], "3.0"), "Data.Initiation.NumberOfTransactions", "digits"),
    ("count wrong", _set(["NumberOfTransactions"], "4"), "Data.Initiation.NumberOfTransactions", 'must be "3"'),
    ("count padded", _set(["NumberOfTransactions"], "03"), "Data.Initiation.NumberOfTransactions", 'must be "3"'),
    ("sum as string", _set(["ControlSum"], "4250.50"), "Data.Initiation.ControlSum", "JSON number"),
    ("sum as bool", _set(["ControlSum"], True), "Data.Initiation.ControlSum", "JSON number"),
    ("sum off by a cent", _set(["ControlSum"], Decimal("4250.49")), "Data.Initiation.ControlSum", "4250.5"),
    ("payload not object", _set(["SupplementaryData"], []), "Data.Initiation.SupplementaryData", "JSON object"),
    (
        "transactions not array",
        _set(["SupplementaryData", "data", "transaction"], {}),
        "Data.Initiation.SupplementaryData.data.transaction",
        "JSON array",
    ),
    (
        "no transactions",
        _set(["SupplementaryData", "data", "transaction"], []),
        "Data.Initiation.SupplementaryData.data.transaction",
        "at least one",
    ),
    ("missing group", _drop([*TX0, "transferInfo"]), f"{T0}.transferInfo", "is required"),
    ("extra group", _set([*TX0, "beneficiary"], {}), f"{T0}.beneficiary", "not a field"),
    ("missing email", _drop([*TX0, "destinationAccount", "email"]), f"{T0}.destinationAccount.email", "required"),
    (
        "bad email",
        _set([*TX0, "destinationAccount", "email"], "ana.example.com"),
        f"{T0}.destinationAccount.email",
        "e-mail",
    ),
    (
        "account type",
        _set([*TX0, "originAccount", "accountType"], "CHECKING"),
        f"{T0}.originAccount.accountType",
        "MONETARY",
    ),
    (
        "account number",
        _set([*TX0, "originAccount", "accountNumber"], "12 34"),
        f"{T0}.originAccount.accountNumber",
        "letters",
    ),
    (
        "account number int",
        _set([*TX0, "destinationAccount", "accountNumber"], 200100300),
        f"{T0}.destinationAccount.accountNumber",
        "JSON string",
    ),
    ("currency shape", _set([*TX0, "originAccount", "currency"], "gtq"), f"{T0}.originAccount.currency", "ISO 4217"),
    (
        "currency differs",
        _set([*TX0, "destinationAccount", "currency"], "USD"),
        f"{T0}.destinationAccount.currency",
        "origin currency GTQ",
    ),
    ("debit type", _set([*TX0, "transferInfo", "debitType"], "C"), f"{T0}.transferInfo.debitType", "one of D"),
    (
        "execution type",
        _set([*TX0, "transferInfo", "executionType"], "SCHEDULED"),
        f"{T0}.transferInfo.executionType",
        "ONLINE",
    ),
    (
        "transaction type empty",
        _set([*TX0, "transferInfo", "transactionType"], ""),
        f"{T0}.transferInfo.transactionType",
        "empty",
    ),
    ("concept number", _set([*TX0, "transferInfo", "concept"], 5), f"{T0}.transferInfo.concept", "JSON string"),
    ("concept too long", _set([*TX0, "transferInfo", "concept"], "c" * 141), f"{T0}.transferInfo.concept", "140"),
    (
        "amount string",
        _set([*TX0, "transferInfo", "transactionAmount"], "1500.50"),
        f"{T0}.transferInfo.transactionAmount",
        "JSON number",
    ),
    (
        "amount zero",
        _set([*TX0, "transferInfo", "transactionAmount"], 0),
        f"{T0}.transferInfo.transactionAmount",
        "positive",
    ),
    (
        "amount negative",
        _set([*TX0, "transferInfo", "transactionAmount"], Decimal("-1.00")),
        f"{T0}.transferInfo.transactionAmount",
        "positive",
    ),
    (
        "amount 3 decimals",
        _set([*TX0, "transferInfo", "transactionAmount"], Decimal("1.005")),
        f"{T0}.transferInfo.transactionAmount",
        "2 decimals",
    ),
    (
        "amount huge",
        _set([*TX0, "transferInfo", "transactionAmount"], Decimal("1E+400")),
        f"{T0}.transferInfo.transactionAmount",
        "exceed",
    ),
    (
        "reference filled",
        _set([*TX0, "transferInfo", "reference"], CID),
        f"{T0}.transferInfo.reference",
        "empty at consent time",
    ),
    ("reference null", _set([*TX0, "transferInfo", "reference"], None), f"{T0}.transferInfo.reference", "JSON string"),
    (
        "second origin account",
        _set(["SupplementaryData", "data", "transaction", 1, "originAccount", "accountNumber"], "999"),
        "Data.Initiation.SupplementaryData.data.transaction[1].originAccount",
        "same origin account",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "path", "words"), BAD, ids=[b[0] for b in BAD])
def test_each_rule_names_its_field(case: str, mutate: Callable[[dict[str, Any]], None], path: str, words: str) -> None:
    init = initiation()
    mutate(init)
    if isinstance(init.get("SupplementaryData"), dict) and "FileHash" in init and case.split()[0] != "FileHash":
        init["FileHash"] = payload_hash(init["SupplementaryData"])
    with pytest.raises(CheckError) as caught:
        check_initiation(init, 100)
    assert caught.value.path == path
    assert words in caught.value.problem


def test_hash_mismatch_names_the_computed_hash() -> None:
    init = initiation()
    init["FileHash"] = oracle_hash(payload(transaction()))
    with pytest.raises(CheckError) as caught:
        check_initiation(init, 100)
    assert caught.value.path == "Data.Initiation.FileHash"
    assert payload_hash(init["SupplementaryData"]) in caught.value.problem


def test_hash_is_over_values_not_spelling() -> None:
    # The same amounts written 1500.5 / 2000 instead of 1500.50 / 2000.00 hash the same (JCS numbers).
    spelled = loads(
        b'{"data":{"transaction":[{"originAccount":{"accountNumber":"1","accountType":"MONETARY","currency":"GTQ"},'
        b'"destinationAccount":{"accountNumber":"2","accountType":"SAVINGS","currency":"GTQ","email":"a@b.co"},'
        b'"transferInfo":{"transactionType":"THIRD_PROVIDER","debitType":"D","transactionAmount":1500.50,'
        b'"executionType":"ONLINE","concept":"x","reference":""}}]}}'
    )
    respelled = copy.deepcopy(spelled)
    respelled["data"]["transaction"][0]["transferInfo"]["transactionAmount"] = Decimal("1500.5")
    assert payload_hash(spelled) == payload_hash(respelled)
    changed = copy.deepcopy(spelled)
    changed["data"]["transaction"][0]["transferInfo"]["transactionAmount"] = Decimal("1500.51")
    assert payload_hash(changed) != payload_hash(spelled)


def test_too_many_transactions() -> None:
    with pytest.raises(CheckError, match="at most 2 per file"):
        check_initiation(initiation(), 2)


def test_decimal_places() -> None:
    assert [decimal_places(Decimal(t)) for t in ("1500.50", "100.00", "1.005", "7", "1E+3", "0.010")] == [
        1,
        0,
        3,
        0,
        0,
        2,
    ]


# --- the upload -----------------------------------------------------------------------------------------


def test_upload_with_consent_id_references_verifies() -> None:
    init = initiation()
    summary = verify_upload(with_references(init["SupplementaryData"], CID), init, CID, 100)
    assert summary.count == 3
    assert summary.control_sum == Decimal("4250.50")


def test_upload_amount_spelling_does_not_matter() -> None:
    init = initiation()
    upload = with_references(init["SupplementaryData"], CID)
    upload["data"]["transaction"][0]["transferInfo"]["transactionAmount"] = Decimal("1500.5000")
    upload["data"]["transaction"][2]["transferInfo"]["transactionAmount"] = Decimal("750.00")
    assert verify_upload(upload, init, CID, 100).control_sum == Decimal("4250.50")


def _upload_error(mutate: Callable[[dict[str, Any]], None]) -> CheckError:
    init = initiation()
    upload = with_references(init["SupplementaryData"], CID)
    mutate(upload)
    with pytest.raises(CheckError) as caught:
        verify_upload(upload, init, CID, 100)
    return caught.value


def test_upload_reference_must_be_the_consent_id() -> None:
    err = _upload_error(lambda u: u["data"]["transaction"][1]["transferInfo"].update(reference=""))
    assert err.path == "data.transaction[1].transferInfo.reference"
    assert CID in err.problem
    err = _upload_error(lambda u: u["data"]["transaction"][2]["transferInfo"].update(reference="pay-fi-other"))
    assert err.path == "data.transaction[2].transferInfo.reference"


def test_upload_record_difference_names_record_and_field() -> None:
    err = _upload_error(
        lambda u: u["data"]["transaction"][1]["transferInfo"].update(transactionAmount=Decimal("2000.01"))
    )
    assert err.path == "data.transaction[1].transferInfo.transactionAmount"
    assert "2000.01" in err.problem
    assert "2000" in err.problem
    err = _upload_error(lambda u: u["data"]["transaction"][0]["destinationAccount"].update(email="x@example.com"))
    assert err.path == "data.transaction[0].destinationAccount.email"


def test_upload_count_and_order() -> None:
    err = _upload_error(lambda u: u["data"]["transaction"].pop())
    assert err.path == "data.transaction"
    assert "holds 2 records" in err.problem
    err = _upload_error(lambda u: u["data"]["transaction"].append(copy.deepcopy(u["data"]["transaction"][0])))
    assert "holds 4 records" in err.problem
    err = _upload_error(lambda u: u["data"]["transaction"].reverse())
    assert err.path.startswith("data.transaction[0].")


def test_upload_format_errors_are_reported_on_the_upload_paths() -> None:
    err = _upload_error(lambda u: u["data"]["transaction"][0]["transferInfo"].update(transactionAmount="1500.50"))
    assert err.path == "data.transaction[0].transferInfo.transactionAmount"
    err = _upload_error(lambda u: u.update(extra=1))
    assert err.path == "extra"
    with pytest.raises(CheckError) as caught:
        verify_upload({"data": {"transactions": []}}, initiation(), CID, 100)
    assert caught.value.path == "data.transaction"


def test_upload_checks_hash_against_the_consent() -> None:
    # A consent whose FileHash was (impossibly) stored wrong: the recomputed hash catches it.
    init = initiation()
    init["FileHash"] = oracle_hash(payload(transaction()))
    with pytest.raises(CheckError) as caught:
        verify_upload(with_references(init["SupplementaryData"], CID), init, CID, 100)
    assert caught.value.path == "data"
    assert "FileHash" in caught.value.problem


# --- payment Initiation equality ----------------------------------------------------------------------------


def test_first_difference() -> None:
    init = initiation()
    same = copy.deepcopy(init)
    same["ControlSum"] = Decimal("4250.5")  # Decimal-equal
    assert first_difference(same, init, "Data.Initiation") is None
    other = copy.deepcopy(init)
    other["SupplementaryData"]["data"]["transaction"][2]["transferInfo"]["transactionAmount"] = 751
    assert (
        first_difference(other, init, "Data.Initiation")
        == "Data.Initiation.SupplementaryData.data.transaction[2].transferInfo.transactionAmount"
    )
    assert first_difference({**init, "Extra": 1}, init, "D") == "D.Extra"
    missing = dict(init)
    del missing["FileHash"]
    assert first_difference(missing, init, "D") == "D.FileHash"
    assert first_difference({**init, "ControlSum": "4250.50"}, init, "D") == "D.ControlSum"
    assert first_difference({**init, "ControlSum": True}, {**init, "ControlSum": 1}, "D") == "D.ControlSum"
    assert first_difference({**init, "SupplementaryData": {"data": {"transaction": []}}}, init, "D") == (
        "D.SupplementaryData.data.transaction[0]"
    )
    assert first_difference([], {}, "D") == "D"


# --- robustness: any JSON anywhere gives CheckError, never another exception --------------------------------

parsed_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner, max_size=4),
    max_leaves=20,
)
FIELD_PATHS: list[list[Any]] = (
    [
        [name]
        for name in ("SupplementaryData", "FileType", "FileHash", "FileReference", "NumberOfTransactions", "ControlSum")
    ]
    + [
        [*TX0, group, name]
        for group, names in (
            ("originAccount", ("accountNumber", "accountType", "currency")),
            ("destinationAccount", ("accountNumber", "accountType", "currency", "email")),
            (
                "transferInfo",
                ("transactionType", "debitType", "transactionAmount", "executionType", "concept", "reference"),
            ),
        )
        for name in names
    ]
    + [[*TX0, "originAccount"], [*TX0], ["SupplementaryData", "data"], ["SupplementaryData", "data", "transaction"]]
)


def _error_of(call: Callable[[], object]) -> CheckError | None:
    try:
        call()
    except CheckError as exc:
        return exc
    return None


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FIELD_PATHS), parsed_json)
def test_any_value_in_any_field_is_a_check_error_or_valid(path: list[Any], value: Any) -> None:
    init = initiation()
    _set(path, value)(init)
    err = _error_of(lambda: check_initiation(init, 100))
    assert err is None or err.path.startswith("Data.Initiation")
    if path[0] == "SupplementaryData" and len(path) > 1:
        upload = with_references(initiation()["SupplementaryData"], CID)
        _set(path[1:], value)(upload)
        err = _error_of(lambda: verify_upload(upload, initiation(), CID, 100))
        assert err is None or err.path.startswith("data")
    assert first_difference(init, initiation(), "D") is not None or init == initiation()


@settings(max_examples=200, deadline=None)
@given(parsed_json)
def test_any_upload_body_is_a_check_error(body: Any) -> None:
    with pytest.raises(CheckError):
        verify_upload(body, initiation(), CID, 100)
    first_difference(body, initiation(), "D")
