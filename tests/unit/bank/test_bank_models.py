"""Typed results read from the spec's bodies; JSON with exact decimals."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.bank.models import (
    ECHO_STREAM_BYTES,
    DomesticVrp,
    FileConsent,
    FilePaymentReport,
    ModelError,
    TokenResponse,
    VrpConsent,
    _echo_without_file,
    dumps,
    loads,
    loads_echo,
)
from processor.domain.money import holds_float

SENT = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)

CONSENT = b"""{"Data": {"Initiation": {"SupplementaryData": {"data": {"transaction": []}},
 "FileType": "UK.OBIE.PaymentInitiation.4.0", "FileHash": "h=", "FileReference": "R",
 "NumberOfTransactions": "2", "ControlSum": 3500.50},
 "ConsentId": "pay-fi-1", "Status": "AwaitingUpload",
 "CreationDateTime": "2026-11-02T09:00:00.000Z", "StatusUpdateDateTime": "2026-11-02T09:00:00.000Z"},
 "Links": {"Self": "http://bank.test/x"}, "Meta": {}}"""


def test_json_keeps_decimals_exact_and_refuses_floats() -> None:
    parsed = loads(b'{"a": 0.10, "b": 1500.50, "c": 3}')
    assert parsed == {"a": Decimal("0.10"), "b": Decimal("1500.50"), "c": 3}
    assert dumps(parsed) == b'{"a":0.10,"b":1500.50,"c":3}'
    with pytest.raises(TypeError, match="Decimal"):
        dumps({"amount": 0.1})
    with pytest.raises(TypeError):
        dumps({"amount": Decimal("NaN")})
    with pytest.raises(ValueError, match="NaN is not JSON"):
        loads(b'{"a": NaN}')


def test_file_consent_reads_amounts_as_decimal() -> None:
    consent = FileConsent.parse(loads(CONSENT), "iid")
    assert consent.consent_id == "pay-fi-1"
    assert consent.control_sum == Decimal("3500.50")
    assert isinstance(consent.control_sum, Decimal)
    assert consent.number_of_transactions == 2
    assert consent.creation_date_time == datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    assert consent.links_self == "http://bank.test/x"
    # Sent back unchanged in value: A3 must repeat the consent's Initiation exactly.
    assert b'"ControlSum":3500.50' in dumps(consent.initiation)


def test_missing_field_names_its_path() -> None:
    body = loads(CONSENT)
    del body["Data"]["Initiation"]["FileHash"]
    with pytest.raises(ModelError, match=r"Data\.Initiation\.FileHash: missing"):
        FileConsent.parse(body, "iid")
    body = loads(CONSENT)
    body["Data"]["CreationDateTime"] = "yesterday"
    with pytest.raises(ModelError, match="CreationDateTime"):
        FileConsent.parse(body, "iid")


def test_token_response_scope_consent_and_expiry_and_repr() -> None:
    token = TokenResponse.parse(
        {
            "access_token": "AT-secret",
            "token_type": "Bearer",
            "expires_in": 432000,
            "scope": "payments:pay-fi-9 openid",
            "refresh_token": "RT-secret",
            "state": "st",
        },
        SENT,
        "iid",
    )
    assert token.consent_id == "pay-fi-9"
    assert (token.expires_at - SENT).total_seconds() == 432000
    assert "AT-secret" not in repr(token) and "RT-secret" not in repr(token)
    with pytest.raises(ModelError, match="token_type"):
        TokenResponse.parse({"access_token": "a", "token_type": "MAC", "expires_in": 1}, SENT, "")
    cc = TokenResponse.parse(
        {"access_token": "a", "token_type": "bearer", "expires_in": 600, "scope": "payments"}, SENT, ""
    )
    assert cc.consent_id is None and cc.refresh_token is None


def test_vrp_consent_and_domestic_vrp() -> None:
    consent = VrpConsent.parse(
        loads(
            b"""{"Data": {"ConsentId": "vrp-1", "Status": "AwaitingAuthorisation",
            "CreationDateTime": "2026-11-02T09:00:00.000Z", "StatusUpdateDateTime": "2026-11-02T09:00:00.000Z",
            "ControlParameters": {"PSUAuthenticationMethods": ["UK.OBIE.SCA"], "VRPType": ["UK.OBIE.VRPType.Sweeping"],
              "ValidFromDateTime": "2026-11-01T00:00:00+00:00", "ValidToDateTime": "2027-11-01T00:00:00+00:00",
              "MaximumIndividualAmount": {"Amount": "500.00", "Currency": "GBP"},
              "PeriodicLimits": [{"Amount": "1000.00", "Currency": "GBP", "PeriodType": "Month",
                                  "PeriodAlignment": "Calendar"}]},
            "Initiation": {"CreditorAccount": {"SchemeName": "UK.OBIE.SortCodeAccountNumber",
                           "Identification": "08080021325698", "Name": "Pot"}},
            "RemittanceInformation": {"Reference": "R1", "Unstructured": "VRP - CUOTAS - Dispersion"}},
            "Risk": {}, "Links": {"Self": "s"}, "Meta": {}}"""
        ),
        "iid",
    )
    assert consent.maximum_individual_amount.amount == Decimal("500.00")
    assert consent.periodic_limits[0].amount.amount == Decimal("1000.00")
    assert consent.periodic_limits[0].period_type == "Month"
    assert consent.creditor_account.identification == "08080021325698"
    assert consent.remittance_unstructured == "VRP - CUOTAS - Dispersion"
    vrp = DomesticVrp.parse(
        loads(
            b"""{"Data": {"DomesticVRPId": "obvrp-1", "ConsentId": "vrp-1", "Status": "Pending",
            "CreationDateTime": "2026-11-02T09:00:00.000Z", "StatusUpdateDateTime": "2026-11-02T09:00:00.000Z",
            "Charges": [{"ChargeBearer": "BorneByDebtor", "Type": "UK.OBIE.CHAPSOut",
                         "Amount": {"Amount": "0.15", "Currency": "GBP"}}],
            "Instruction": {"InstructionIdentification": "i1", "EndToEndIdentification": "e1",
                            "InstructedAmount": {"Amount": "12.34", "Currency": "GBP"}}}}"""
        ),
        "iid",
    )
    assert vrp.instructed_amount is not None and vrp.instructed_amount.amount == Decimal("12.34")
    assert vrp.charges[0].amount.amount == Decimal("0.15")


def test_report_lines_when_json_and_raw_otherwise() -> None:
    report = FilePaymentReport.parse(
        "fp-1",
        "application/json",
        b'{"Data": {"Status": "InitiationCompleted", "Transactions": [{"Index": 0, "DestinationAccount": "2001",'
        b' "Amount": 1500.50, "Currency": "GTQ", "Status": "Rejected", "ReasonCode": "AC04", "Reason": "closed"}]}}',
        "iid",
    )
    assert report.status == "InitiationCompleted"
    assert report.lines[0].amount == Decimal("1500.50") and report.lines[0].reason_code == "AC04"
    raw = FilePaymentReport.parse("fp-1", "text/csv", b"a,b\n1,2\n", "iid")
    assert raw.lines == () and raw.body == b"a,b\n1,2\n" and raw.data is None


def _echo_answer(transfers: int, concept: str = "Salary") -> bytes:
    rows = ",".join(
        '{"originAccount": {"accountNumber": "3001", "accountType": "MONETARY", "currency": "GTQ"},'
        f' "destinationAccount": {{"accountNumber": "{i}", "accountType": "MONETARY", "currency": "GTQ"}},'
        f' "transferInfo": {{"concept": "{concept}", "transactionAmount": 10.25, "reference": ""}}}}'
        for i in range(transfers)
    )
    return (
        '{"Data": {"ConsentId": "pay-fi-1", "Status": "AwaitingUpload", "CreationDateTime": "2026-11-23T00:00:00Z",'
        ' "StatusUpdateDateTime": "2026-11-23T00:00:00Z", "Initiation": {"SupplementaryData": {"data":'
        ' {"transaction": [' + rows + ']}}, "FileType": "UK.OBIE.PaymentInitiation.3.1", "FileHash": "abc",'
        f' "NumberOfTransactions": "{transfers}", "ControlSum": 30.75, "Extra": [1, 2.50, {{"x": null}}]}}}},'
        ' "Links": {"Self": "http://bank/x"}}'
    ).encode()


@pytest.mark.parametrize("transfers", [3, 6000], ids=["parsed whole", "streamed"])
def test_a_file_echo_is_read_without_its_transfers(transfers: int) -> None:
    body = _echo_answer(transfers)
    assert (len(body) >= ECHO_STREAM_BYTES) == (transfers > 3)
    echo = loads_echo(body)
    expected = loads(body)
    expected["Data"]["Initiation"]["SupplementaryData"] = None
    assert echo == expected
    assert echo["Data"]["Initiation"]["Extra"] == [1, Decimal("2.50"), {"x": None}]
    consent, full = FileConsent.parse(echo, "iid"), FileConsent.parse(loads(body), "iid")
    read = ("consent_id", "status", "file_type", "file_hash", "number_of_transactions", "control_sum", "links_self")
    assert [getattr(consent, name) for name in read] == [getattr(full, name) for name in read]
    assert consent.control_sum == Decimal("30.75") and consent.links_self == "http://bank/x"


@pytest.mark.parametrize("body", [b'{"Data": NaN}', b'{"Data": {"Initiation": {}}', b'{"Data": 1} []', b"\xff"])
def test_an_echo_that_is_not_json_is_refused_either_way(body: bytes) -> None:
    for raw in (body, body + b" " * ECHO_STREAM_BYTES):  # parsed whole, then streamed
        with pytest.raises(ValueError, match=r"JSON|Expecting|Extra data|codec"):
            loads_echo(raw)


@pytest.mark.parametrize(
    ("initiation", "kept"),
    [
        ('{"SupplementaryData": "text", "F": 1}', {"SupplementaryData": None, "F": 1}),
        ('{"SupplementaryData": [1, [2, {"a": 3}]], "B": true}', {"SupplementaryData": None, "B": True}),
        (
            '{"SupplementaryDataX": {"a": 1}, "SupplementaryData": {"a": {"b": [1]}}}',
            {"SupplementaryDataX": {"a": 1}, "SupplementaryData": None},
        ),
    ],
)
def test_only_the_echoed_file_is_dropped(initiation: str, kept: dict[str, Any]) -> None:
    body = ('{"Data": {"Initiation": ' + initiation + '}, "Items": [{"SupplementaryData": 1}]}').encode()
    for raw in (body, body + b" " * ECHO_STREAM_BYTES):
        assert loads_echo(raw) == {"Data": {"Initiation": kept}, "Items": [{"SupplementaryData": 1}]}


def _month_end_echo(control_sum: str, *, initiation_extra: str = "", concept: str = "Salario de noviembre") -> bytes:
    """A small echo whose only fraction outside the file is its ControlSum (as `control_sum` spells it)."""
    rows = ",".join(
        f'{{"destinationAccount": {{"accountNumber": "{i}"}}, "transferInfo": {{"concept": "{concept}",'
        f' "transactionAmount": 10.25}}}}'
        for i in range(3)
    )
    return (
        '{"Data": {"ConsentId": "pay-fi-1", "Status": "AwaitingUpload", "CreationDateTime": "2026-11-23T00:00:00Z",'
        ' "StatusUpdateDateTime": "2026-11-23T00:00:00Z", "Initiation": {"SupplementaryData": {"data":'
        ' {"transaction": [' + rows + ']}}, "FileType": "UK.OBIE.PaymentInitiation.3.1", "FileHash": "abc",'
        f' "NumberOfTransactions": 3, "ControlSum": {control_sum}{initiation_extra}}}}}, "Links": {{"Self": "x"}}}}'
    ).encode()


def _echo_reference(raw: bytes) -> Any:
    body = loads(raw)
    body["Data"]["Initiation"]["SupplementaryData"] = None
    return body


@given(st.decimals(min_value=0, max_value=Decimal("9" * 16 + ".99"), places=2, allow_nan=False))
def test_a_small_echo_read_without_its_file_keeps_its_control_sum_exact(amount: Decimal) -> None:
    raw = _month_end_echo(format(amount, "f"))
    fast = _echo_without_file(raw)
    assert fast is not None  # the file found and skipped
    assert fast == _echo_reference(raw) and loads_echo(raw) == fast
    control = fast["Data"]["Initiation"]["ControlSum"]
    assert type(control) is Decimal and str(control) == format(amount, "f")  # the text, digit for digit


@pytest.mark.parametrize(
    ("control_sum", "extra", "skipped"),
    [
        ("30.75", "", True),
        ("1500.50", "", True),  # the trailing zero kept
        ("-0.10", "", True),
        ("3.075E1", "", True),
        ("1234567890123456.78", "", True),  # more digits than a float holds: the text counts
        ("1500", "", True),  # a whole number is an int either way
        ("123456789012345678901234", "", True),  # past 64 bits: an exact int
        ("30.75", ', "Fee": 0.5', True),  # another fraction outside the file
        ("30.75", ', "ControlSum": 30.70', True),  # a member repeated: the last one counts, as `loads` reads it
        ("30.75", ', "Control\\u0053um": 30.750000000000001', True),  # a name spelt with an escape
        ("30.75", ', "SupplementaryData": {"second": true}', True),  # the file repeated: the last one is skipped
        ("30.75", ', "SupplementaryData": 7', False),  # the last one's text, "7", is also in the ControlSum
        ("30.75", ', "Copy": {"data": {"transaction": []}}', True),  # text like the file's, not the same text
        ("30.75", ', "Memo": "\\ud800"', False),  # a lone surrogate: msgspec refuses it, `loads` reads it
    ],
)
def test_an_echo_is_read_without_its_file_unless_msgspec_cannot_tell(
    control_sum: str, extra: str, skipped: bool
) -> None:
    raw = _month_end_echo(control_sum, initiation_extra=extra)
    assert (_echo_without_file(raw) is not None) == skipped
    expected = _echo_reference(raw)
    echo = loads_echo(raw)
    assert echo == expected
    assert not holds_float(echo)
    control = echo["Data"]["Initiation"]["ControlSum"]
    exact = expected["Data"]["Initiation"]["ControlSum"]
    assert type(control) is type(exact) and str(control) == str(exact)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"Data": {"Initiation": {"FileHash": "h", "ControlSum": 1.5}}}',  # no file to skip
        b'{"Data": {"Initiation": {"SupplementaryData": 1, "Echo": 1}}}',  # the file's text twice in the answer
        b'{"Data": {"Initiation": {"SupplementaryData": {"a": NaN}}}}',  # refused by msgspec: `loads` refuses it
        b'{"Data": "none", "Initiation": {"SupplementaryData": 1}}',  # no Data object
    ],
)
def test_answers_the_skip_leaves_to_the_exact_parser(raw: bytes) -> None:
    assert _echo_without_file(raw) is None
    try:
        expected = loads(raw)
    except ValueError:
        with pytest.raises(ValueError, match="NaN is not JSON"):
            loads_echo(raw)
        return
    echo = loads_echo(raw)
    initiation = expected.get("Data", {}).get("Initiation") if isinstance(expected.get("Data"), dict) else None
    if isinstance(initiation, dict) and "SupplementaryData" in initiation:
        initiation["SupplementaryData"] = None
    assert echo == expected


def _read_with_peak(body: bytes) -> tuple[Any, int]:
    """`loads_echo(body)` and the peak of Python allocations while it read."""
    tracemalloc.start()
    try:
        echo = loads_echo(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return echo, peak


def test_the_echoed_file_is_never_built_as_objects() -> None:
    """orjson built the answer's every object before the file was dropped: 5.7 MiB of allocations at its peak for
    1,000 transfers, 16 times the body (docs/benchmarks.md, seventh pass). Skipped, it is never built (its UTF-8
    is checked a piece at a time)."""
    body = _echo_answer(1_000, concept="Salario Ő")
    assert len(body) < ECHO_STREAM_BYTES  # the smaller answers' size
    _, peak = _read_with_peak(body)
    assert peak < len(body) / 4, (peak, len(body))


def test_a_large_echo_never_exists_whole_as_text() -> None:
    """json.loads decodes the body into a str first: as large as the body, twice as large when a name holds a
    character past U+00FF. The reading stays far under it."""
    body = _echo_answer(12_000, concept="Salario Ő")
    _, peak = _read_with_peak(body)
    assert peak < len(body) / 2, (peak, len(body))  # json.loads: over 2x the body


def test_a_large_echo_msgspec_refuses_is_streamed() -> None:
    """A lone surrogate in a concept: msgspec refuses the answer, json reads it. A large one is then read as a
    stream (never whole as text), with the reading `loads` gives."""
    body = _echo_answer(12_000, concept="Salario \\ud800")
    assert len(body) >= ECHO_STREAM_BYTES and _echo_without_file(body) is None
    echo, peak = _read_with_peak(body)
    assert peak < len(body) / 2, (peak, len(body))
    expected = loads(body)
    expected["Data"]["Initiation"]["SupplementaryData"] = None
    assert echo == expected


_LARGE = b"x" * ECHO_STREAM_BYTES  # makes an answer one of the large ones


def _with_file(file: bytes, *, before: bytes = b"") -> bytes:
    return b"{" + before + b'"Data": {"Initiation": {"SupplementaryData": ' + file + b', "ControlSum": 1.50}}}'


@pytest.mark.parametrize("size", [b"", _LARGE], ids=["small", "large"])
def test_bytes_that_are_not_utf8_inside_the_file_are_refused(size: bytes) -> None:
    """msgspec does not look at the bytes of the member it skips: they are checked apart."""
    raw = _with_file(b'{"name": "Jos\xe9 ' + size + b'"}')
    assert _echo_without_file(raw) is None
    with pytest.raises(ValueError, match=r"utf-8|UTF8"):
        loads_echo(raw)


@pytest.mark.parametrize("size", [b"", _LARGE], ids=["small", "large"])
def test_an_integer_json_refuses_never_reaches_the_stream(size: bytes) -> None:
    """ijson's C parser crashed the process on an integer of 4,301 digits (ijson 3.6, `use_float=False`): a
    large answer with one is refused as `loads` refuses it, whether msgspec reads the answer or not."""
    too_long = b"1" * 4_301
    for raw in (
        _with_file(b'{"p": "' + size + b'"}', before=b'"Fee": ' + too_long + b", "),
        _with_file(b'{"p": "\\ud800' + size + b'"}', before=b'"Fee": ' + too_long + b", "),  # msgspec refuses it
    ):
        with pytest.raises(ValueError, match=r"4300|4,300"):
            loads_echo(raw)


def test_an_integer_json_refuses_inside_the_file_is_never_converted() -> None:
    """The one answer read that `loads` would refuse: the file's number is skipped, not converted."""
    raw = _with_file(b'{"amount": ' + b"1" * 4_301 + b"}")
    assert loads_echo(raw) == {"Data": {"Initiation": {"SupplementaryData": None, "ControlSum": Decimal("1.50")}}}


def test_a_large_echo_nested_deeper_than_the_parsers_recurse_is_streamed() -> None:
    raw = _with_file(b'{"p": "' + _LARGE + b'", "deep": ' + b"[" * 3_000 + b"]" * 3_000 + b"}")
    assert loads_echo(raw) == {"Data": {"Initiation": {"SupplementaryData": None, "ControlSum": Decimal("1.50")}}}


def _set(where: tuple[str, ...], key: str, value: object) -> Any:
    def change(body: dict[str, Any]) -> None:
        for part in where:
            body = body[part]
        body[key] = value

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b.pop("Data"), "Data: missing"),
        (_set((), "Data", []), "Data: must be an object"),
        (_set(("Data", "Initiation"), "FileHash", 5), r"Data\.Initiation\.FileHash: must be a string"),
        (_set(("Data", "Initiation"), "NumberOfTransactions", True), "NumberOfTransactions: must be an integer"),
        (_set(("Data", "Initiation"), "ControlSum", "abc"), "ControlSum: 'abc' is not a decimal amount"),
        (_set(("Data", "Initiation"), "ControlSum", "Infinity"), "ControlSum: must be finite"),
        (_set(("Data",), "CreationDateTime", "2026-11-02T09:00:00"), "CreationDateTime: must carry a UTC offset"),
    ],
)
def test_each_kind_of_mismatch_is_one_model_error_with_its_path(change: Any, message: str) -> None:
    body = loads(CONSENT)
    change(body)
    with pytest.raises(ModelError, match=message):
        FileConsent.parse(body, "iid")


def test_report_lines_take_the_fast_path_or_the_model_with_the_same_result() -> None:
    def line(index: str, amount: str) -> str:
        return f'{{"Index": {index}, "DestinationAccount": "2", "Amount": {amount}, "Currency": "Q", "Status": "A"}}'

    body = '{"Data": {"Transactions": [' + line("0", "10.25") + ", " + line('"1"', '"10.25"') + "]}}"
    report = FilePaymentReport.parse("fp-1", "application/json", body.encode(), "iid")
    # The second line (index and amount as strings) is not plain, so the pydantic model reads it.
    assert [(x.index, x.amount) for x in report.lines] == [(0, Decimal("10.25")), (1, Decimal("10.25"))]
    bad = '{"Data": {"Transactions": [' + line("0", "1") + ', {"Index": 1, "Amount": 1}]}}'
    with pytest.raises(ModelError, match=r"Data\.Transactions\[1\]\.DestinationAccount: missing"):
        FilePaymentReport.parse("fp-1", "application/json", bad.encode(), "iid")
    with pytest.raises(ModelError, match=r"Data\.Transactions: must be a list"):
        FilePaymentReport.parse("fp-1", "application/json", b'{"Data": {"Transactions": {}}}', "iid")


def _report_body(lines: int, status: str = '"InitiationCompleted"', pad: int = 0) -> bytes:
    def line(i: int) -> str:
        status, code = ("Settled", "null") if i % 7 else ("Rejected", '"AC04"')
        return (
            f'{{"Index": {i}, "DestinationAccount": "{2000 + i}", "Amount": {i}.25, "Currency": "GTQ",'
            f' "Status": "{status}", "ReasonCode": {code}, "Reference": "R-1"}}'  # the sandbox adds a Reference
        )

    rows = ", ".join(line(i) for i in range(lines))
    return f'{{"Data": {{"Status": {status}, "Transactions": [{rows}]}}}}{" " * pad}'.encode()


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_a_large_report_is_read_line_by_line_with_the_same_result(kind: type[bytes]) -> None:
    body = _report_body(20_000)
    assert len(body) >= ECHO_STREAM_BYTES
    small = FilePaymentReport.parse("fp-1", "application/json", body[: body.index(b"}, {") + 1] + b"]}}", "iid")
    streamed = FilePaymentReport.parse("fp-1", "application/json", kind(body), "iid")
    whole = loads(body)["Data"]
    assert streamed.status == whole["Status"] == "InitiationCompleted" and small.status == "InitiationCompleted"
    assert [(x.index, x.destination_account, x.amount, x.status, x.reason_code) for x in streamed.lines] == [
        (t["Index"], t["DestinationAccount"], t["Amount"], t["Status"], t.get("ReasonCode"))
        for t in whole["Transactions"]
    ]
    assert streamed.lines[0] == small.lines[0]
    first, second = streamed.lines[1], streamed.lines[2]  # what repeats on every line is one object
    assert first.currency is second.currency and first.status is second.status
    # Neither the parsed tree nor the body is kept beside the lines.
    assert streamed.data is None and small.data is None and streamed.body == small.body == b""


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (_report_body(3, status="7"), r"Data\.Status"),  # the whole parse names what is wrong
        (b'{"Data": {"Transactions": {"a": 1}}}', r"Data\.Transactions: must be a list"),
        (_report_body(2)[:-3] + b"}", "does not parse"),
        (b'{"Data": {"Transactions": [{"Index": 1, "Amount": 1}]}}', r"Transactions\[0\]\.DestinationAccount"),
    ],
)
def test_a_large_report_that_is_not_plain_is_refused_as_when_parsed_whole(body: bytes, match: str) -> None:
    for raw in (body, body + b" " * ECHO_STREAM_BYTES):
        with pytest.raises(ModelError, match=match):
            FilePaymentReport.parse("fp-1", "application/json", raw, "iid")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # Duplicate keys: the last counts, as in any JSON reading of the body.
        (b'{"Data": {"Transactions": [LINE0], "Transactions": [LINE1]}}', [1]),
        (b'{"Data": {"Transactions": [LINE0]}, "Data": {"Transactions": [LINE1, LINE0]}}', [1, 0]),
        # Shapes a path-based stream reader would take for lines: none are.
        (b'{"Data.Transactions": [LINE0]}', []),
        (b'{"Data": {"Status": "x"}, "Other": {"Transactions": [LINE0]}}', []),
        # A `Data`, or a report, with a line's members besides its own is still what it is.
        (
            b'{"Data": {"Index": 5, "DestinationAccount": "X", "Amount": 9.50, "Currency": "Q", "Status": "Done",'
            b' "Transactions": [LINE1]}}',
            [1],
        ),
        (
            b'{"Index": 5, "DestinationAccount": "X", "Amount": 9.50, "Currency": "Q", "Status": "Done",'
            b' "Data": {"Status": "S", "Transactions": [LINE0, LINE1]}}',
            [0, 1],
        ),
        (b'{"Data": {"Transactions": [LINE1, LINE0]}}', [1, 0]),  # LINE1 has a member besides a line's
    ],
    ids=[
        "duplicate Transactions",
        "duplicate Data",
        "dotted member",
        "elsewhere",
        "line-shaped Data",
        "line-shaped report",
        "extra members",
    ],
)
def test_a_report_is_read_as_its_json_says_whatever_its_size(body: bytes, expected: list[int]) -> None:
    def line(index: int) -> bytes:
        return b'{"Index": %d, "DestinationAccount": "2", "Amount": 1.25, "Currency": "Q", "Status": "A"}' % index

    body = body.replace(b"LINE0", line(0)).replace(b"LINE1", line(1).replace(b"}", b', "Reference": "R"}'))
    data = loads(body).get("Data")
    for raw in (body, body + b" " * ECHO_STREAM_BYTES):
        report = FilePaymentReport.parse("fp-1", "application/json", raw, "iid")
        assert [x.index for x in report.lines] == expected
        assert report.status == (data.get("Status") if isinstance(data, dict) else None)
    with pytest.raises(ModelError, match=r"Data\.Transactions: must be a list"):
        FilePaymentReport.parse("fp-1", "application/json", b'{"Data": {"Transactions": {"item": 1}}}', "iid")


def test_a_large_report_without_lines_keeps_what_came() -> None:
    body = b'{"Data": {"Status": null, "Transactions": []}, "Other": [1]}' + b" " * ECHO_STREAM_BYTES
    report = FilePaymentReport.parse("fp-1", "application/json", body, "iid")
    assert report.lines == () and report.data == {"Data": {"Status": None, "Transactions": []}, "Other": [1]}


def test_a_large_report_never_exists_whole_as_objects() -> None:
    """Parsed into dicts, then lines, the report took 5.5 times its bytes at once; each line object made a line as
    it is read, about 3.3 times (its text and the lines)."""
    body = _report_body(20_000)
    tracemalloc.start()
    try:
        report = FilePaymentReport.parse("fp-1", "application/json", body, "iid")
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(report.lines) == 20_000
    assert peak < 4 * len(body), (peak, kept, len(body))
