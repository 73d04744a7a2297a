"""`dispersion submit` without Kafka: the CSV and JSON layouts of docs/submit.md (header matching, delimiters, BOM,
quoting, blank lines, batch columns against command-line options, defaults), the validation report (every bad row
with its line, exit 1) and `--dry-run`. Producing to a real broker is in
tests/integration/cli/test_submit_status_cli.py."""

from __future__ import annotations

import re
import tempfile
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from cli_support import EXPORT, ORIGIN, Run

from processor.cli import submit
from processor.domain.schedule import Calendar
from processor.exports import reading
from processor.exports.checks import check, control_sum
from processor.exports.layout import BatchFields, Export, ExportError, read_json
from processor.exports.profile import our_layout, sniff_delimiter
from processor.exports.profiled import read_profiled

NOW = datetime(2024, 11, 5, 10, 0, tzinfo=UTC)
DOC_EXAMPLE = "".join(EXPORT.splitlines(keepends=True)[:4])  # the header and three rows


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No `$DISPERSION_CONFIG` and no ./dispersion.toml: the command runs without a configuration file."""
    monkeypatch.delenv("DISPERSION_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    code = submit.main(list(argv))
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def dry_run(capsys: pytest.CaptureFixture[str], path: Path, *options: str) -> Run:
    return run(capsys, str(path), "--dry-run", "--quiet", "--integration", "sandbox", *ORIGIN, *options)


def parse(text: str, fields: BatchFields | None = None, *, delimiter: str = ",") -> Export:
    """`text` as a CSV file read the way `submit` reads it without a profile: through the built-in profile of our
    layout."""
    given = fields or BatchFields(
        integration="sandbox", origin_account_number="3001234567", origin_currency="GTQ", batch_id="B-1"
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "export.csv"
        path.write_bytes(text.encode())
        profile = our_layout("csv", delimiter=delimiter)
        return read_profiled(path, profile, given, requested_at=NOW, defaults=BatchFields())


def problems_of(text: str) -> list[str]:
    return [str(problem) for problem in check(parse(text))]


# -- layout ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("a,b;c", ","),
        ("a;b;c,d", ";"),
        ("a\tb\tc;d", "\t"),
        ("account_number", ","),  # no delimiter at all: a comma
        ("a;b\tc,d", ","),  # a tie: the first of `,`, `;`, tab
        ('"a,b";c;d', ";"),
    ],
)
def test_sniff_delimiter_picks_the_most_frequent(header: str, expected: str) -> None:
    assert sniff_delimiter(header) == expected


def test_doc_example_reads_into_the_batch() -> None:
    export = parse(DOC_EXAMPLE)
    batch = export.batch
    assert [t.amount for t in batch.transactions] == [Decimal("8500.00"), Decimal("7250.50"), Decimal("12000.00")]
    assert all(isinstance(t.amount, Decimal) for t in batch.transactions)
    assert [t.employee_reference for t in batch.transactions] == ["E-1001", "E-1002", "E-1003"]
    assert [t.account_type for t in batch.transactions] == ["SAVINGS", "SAVINGS", "MONETARY"]
    assert export.lines == (2, 3, 4)
    assert export.ignored_columns == ()
    assert check(export) == []
    assert control_sum(batch) == Decimal("27750.50")


def test_header_names_match_case_spaces_and_hyphens() -> None:
    text = " Account Number ,AMOUNT,E_mail,Email,Concept,employee-reference,Account-Type,Department\n"
    text += "2001,10.00,x,a@example.com,Pay,E-1,MONETARY,HR\n"
    export = parse(text)
    (transfer,) = export.batch.transactions
    assert (transfer.account_number, transfer.email, transfer.employee_reference) == ("2001", "a@example.com", "E-1")
    assert transfer.account_type == "MONETARY"
    assert export.ignored_columns == ("e_mail", "department")


def test_defaults_for_optional_columns_and_origin() -> None:
    export = parse("account_number,amount,email,concept\n2001,10.00,a@example.com,\n")
    (transfer,) = export.batch.transactions
    assert transfer.account_type == "SAVINGS"
    assert transfer.currency == "GTQ"  # the origin's currency
    assert transfer.employee_reference is None
    assert transfer.concept == ""  # required column, may be empty
    assert export.batch.origin.type == "MONETARY"
    assert export.batch.file_reference == "B-1"
    assert export.batch.source == "dispersion-submit"
    assert check(export) == []


def test_quoted_fields_hold_delimiters_and_line_breaks_and_blank_lines_are_skipped() -> None:
    text = (
        "account_number,amount,email,concept\n"
        "\n"
        '2001,10.00,a@example.com,"Payroll, November"\n'
        "   \n"
        '2002,20.00,b@example.com,"two\nlines"\n'
        "\n"
        "2003,30.00,c@example.com,  padded  \n"
    )
    export = parse(text)
    assert [t.concept for t in export.batch.transactions] == ["Payroll, November", "two\nlines", "padded"]
    assert len(export.batch.transactions) == 3
    assert export.lines is not None
    assert export.lines[0] == 3
    assert export.lines[2] == 8  # the quoted line break counts


def test_blank_lines_above_the_header_are_skipped_and_lines_still_count_them() -> None:
    export = parse("\n  \naccount_number,amount,email,concept\n2001,x,a@example.com,Pay\n")
    assert export.lines == (4,)
    assert [str(problem) for problem in export.problems] == [
        "line 4: amount: expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)"
    ]


def test_missing_and_repeated_required_columns_are_reported_together() -> None:
    with pytest.raises(ExportError) as caught:
        parse("account_number,Amount,amount,concept\n2001,1,1,x\n")
    assert [str(p) for p in caught.value.problems] == [
        "line 1: email: required column is missing (see docs/submit.md for the layout)",
        "line 1: amount: column appears more than once",
    ]


def test_empty_file_is_a_problem() -> None:
    with pytest.raises(ExportError) as caught:
        parse("")
    assert [str(p) for p in caught.value.problems] == ["export: header: the file is empty"]


# -- batch columns ---------------------------------------------------------------------------------------------

BATCH_CSV = """batch_id;origin_account_number;origin_currency;file_reference;account_number;amount;email;concept
NOV-2024-001;3001234567;GTQ;;2001002001;8500.00;ana.lopez@example.com;Payroll November
;3001234567;GTQ;REF-1;2001002002;7250.50;bruno.diaz@example.com;Payroll November
"""


def test_batch_columns_fill_the_batch_and_empty_cells_are_ignored() -> None:
    export = parse(BATCH_CSV, BatchFields(integration="sandbox"), delimiter=";")
    batch = export.batch
    assert (batch.batch_id, batch.file_reference) == ("NOV-2024-001", "REF-1")
    assert (batch.origin.number, batch.origin.currency, batch.origin.type) == ("3001234567", "GTQ", "MONETARY")
    assert check(export) == []


def test_command_line_wins_over_batch_columns() -> None:
    fields = BatchFields(batch_id="CLI-1", integration="sandbox", origin_account_number="999", file_reference="CLI-REF")
    batch = parse(BATCH_CSV, fields, delimiter=";").batch
    assert (batch.batch_id, batch.origin.number, batch.file_reference) == ("CLI-1", "999", "CLI-REF")
    assert batch.origin.currency == "GTQ"  # not given on the command line: the column's


def test_differing_batch_cells_are_refused_with_both_lines() -> None:
    text = BATCH_CSV + "NOV-2024-002;3001234567;GTQ;;2001002003;1.00;c@example.com;Payroll November\n"
    problems = [str(p) for p in check(parse(text, BatchFields(integration="sandbox"), delimiter=";"))]
    assert problems == [
        "line 4: batch_id: 'NOV-2024-002' differs from 'NOV-2024-001' on line 2 (one file, one batch)",
    ]


def test_missing_batch_values_are_all_named() -> None:
    with pytest.raises(ExportError) as caught:
        parse("account_number,amount,email,concept\n2001,1.00,a@example.com,x\n", BatchFields())
    assert [p.field for p in caught.value.problems] == [
        "batch_id",
        "integration",
        "origin_account_number",
        "origin_currency",
    ]


def test_file_reference_defaults_to_the_first_40_characters_of_the_batch_id() -> None:
    long_id = "X" * 30 + "-" + "Y" * 29
    fields = BatchFields(
        batch_id=long_id, integration="sandbox", origin_account_number="3001234567", origin_currency="GTQ"
    )
    assert (
        parse("account_number,amount,email,concept\n2001,1.00,a@example.com,x\n", fields).batch.file_reference
        == (long_id[:40])
    )


# -- validation report -----------------------------------------------------------------------------------------


def test_every_bad_row_is_reported_with_its_line_and_transaction() -> None:
    text = (
        "account_number,amount,email,concept,currency,account_type\n"
        "2001-002,1.505,not-an-email,Pay,,\n"  # line 2, transaction 0: three problems
        "2002,1,500.50,b@example.com,Pay,,\n"  # line 3: 7 fields
        '2003,"1,500.50",c@example.com,Pay,,\n'  # line 4, transaction 1: unreadable amount
        "2004,,d@example.com,Pay,,\n"  # line 5, transaction 2: empty amount
        "2005,-3,e@example.com,Pay,USD,CHECKING\n"  # line 6, transaction 3
        f"2006,10,f@example.com,{'c' * 141},,\n"  # line 7, transaction 4
        "2007,10.0,g@example.com,Pay,,\n"  # line 8, transaction 5
        "2007,10,g@example.com,Pay,,\n"  # line 9, transaction 6: duplicate of 5 (same amount by value)
    )
    assert problems_of(text) == [
        "line 2: destination_account.account_number: malformed_account_number: must be 1-34 ASCII letters or digits"
        " (transaction 0)",
        "line 2: destination_account.email: malformed_email: must be an address like name@example.com (ASCII, at"
        " most 254 characters) (transaction 0)",
        "line 2: amount: too_many_decimals: has more than 2 decimals (transaction 0)",
        "line 3: row: has 7 fields, the header has 6",
        "line 4: amount: expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)",
        "line 5: amount: is empty",
        "line 6: destination_account.account_type: invalid_account_type: 'CHECKING' is not one of MONETARY, SAVINGS"
        " (transaction 3)",
        "line 6: destination_account.currency: currency_mismatch: 'USD' differs from the origin account's 'GTQ'"
        " (transaction 3)",
        "line 6: amount: non_positive_amount: must be greater than zero (transaction 3)",
        "line 7: concept: concept_too_long: 141 characters; at most 140 are allowed (transaction 4)",
        "line 9: transaction: duplicate_transfer: same destination account, amount and concept as transaction 5"
        " (transaction 6)",
    ]


def test_unreadable_amounts_are_not_called_duplicates() -> None:
    """Two different unreadable amounts (both read as 0) to one account with one concept are two unreadable
    amounts, not a duplicate transfer."""
    text = 'account_number,amount,email,concept\n2001,"1,500.00",a@example.com,Pay\n2001,"2,000.00",a@example.com,Pay\n'
    assert problems_of(text) == [
        "line 2: amount: expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)",
        "line 3: amount: expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)",
    ]


def test_unconfigured_integration_is_refused() -> None:
    problems = [str(p) for p in check(parse(DOC_EXAMPLE), integrations={"other"})]
    assert problems == ["export: integration: 'sandbox' is not configured (configured: other)"]


# -- the command, --dry-run ------------------------------------------------------------------------------------


def test_dry_run_of_a_valid_export(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "payroll.csv"
    path.write_text(DOC_EXAMPLE)
    result = dry_run(capsys, path, "--batch-id", "NOV-2024-001")
    assert result.code == 0
    assert result.out == "valid batch NOV-2024-001: 3 transactions, control sum 27750.50 GTQ\n"
    assert result.err == ""


def test_dry_run_default_batch_id_follows_what_the_payroll_pays(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Other bytes and another name with the same transfers (line ends, column order, quoting, a re-export) are one
    batch id; another amount is another."""
    header, *rows = DOC_EXAMPLE.strip().split("\n")
    columns = header.split(",")
    order = list(reversed(range(len(columns))))
    reordered = "\n".join(",".join(f'"{line.split(",")[i]}"' for i in order) for line in [header, *rows]) + "\n"
    files = {
        "nov export.csv": DOC_EXAMPLE,
        "re-export-2026-11-30.csv": DOC_EXAMPLE.replace("\n", "\r\n"),
        "saved again.csv": reordered,
        "changed.csv": DOC_EXAMPLE.replace("8500", "8501"),
    }
    ids = []
    for name, text in files.items():
        path = tmp_path / name
        path.write_bytes(text.encode())
        result = dry_run(capsys, path)
        assert result.code == 0, result.err
        match = re.fullmatch(r"valid batch (\S+): 3 transactions, control sum \S+ GTQ\n", result.out)
        assert match is not None, result.out
        ids.append(match.group(1))
    assert ids[0] == ids[1] == ids[2]
    assert re.fullmatch(r"payroll-[0-9a-f]{16}", ids[0])
    assert ids[3] != ids[0] and ids[3].startswith("payroll-")


def submitted_on(monkeypatch: pytest.MonkeyPatch, instant: datetime) -> None:
    """`submit`'s clock reads `instant` (the default batch id names the month of submission)."""

    class Clock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:
            return instant.astimezone(tz)

    monkeypatch.setattr(reading, "datetime", Clock)


def test_next_months_identical_payroll_gets_another_default_batch_id(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default id names the pay period: the export re-saved on the 30th is the batch of the 2nd; the same rows
    submitted on 1 December are another batch (the duplicate-payroll guard holds it, nothing drops it); with an
    `execute_on`, the day decides, whatever month it is submitted in."""
    path = tmp_path / "planilla.csv"
    path.write_text(DOC_EXAMPLE)
    resaved = tmp_path / "planilla (saved again).csv"
    resaved.write_bytes(DOC_EXAMPLE.replace("\n", "\r\n").encode())

    def default_id(instant: datetime, export: Path, *options: str) -> str:
        submitted_on(monkeypatch, instant)
        result = dry_run(capsys, export, *options)
        match = re.match(r"valid batch (payroll-[0-9a-f]{16}): 3 transactions, control sum \S+ GTQ", result.out)
        assert result.code == 0 and match is not None, (result.out, result.err)
        return match.group(1)

    november = default_id(datetime(2026, 11, 2, 9, 0, tzinfo=UTC), path)
    assert default_id(datetime(2026, 11, 30, 23, 59, tzinfo=UTC), resaved) == november
    december = default_id(datetime(2026, 12, 1, 0, 0, 5, tzinfo=UTC), path)
    assert december != november
    assert default_id(datetime(2026, 12, 31, 12, 0, tzinfo=UTC), resaved) == december
    on_day = ("--execute-on", "2026-12-20")
    scheduled = default_id(datetime(2026, 11, 30, 12, 0, tzinfo=UTC), path, *on_day)
    assert scheduled not in (november, december)
    assert default_id(datetime(2026, 12, 2, 12, 0, tzinfo=UTC), resaved, *on_day) == scheduled


@pytest.mark.parametrize("delimiter", [",", ";", "\t"])
def test_delimiter_is_detected(capsys: pytest.CaptureFixture[str], tmp_path: Path, delimiter: str) -> None:
    path = tmp_path / "export.csv"
    path.write_text(DOC_EXAMPLE.replace(",", delimiter))
    result = dry_run(capsys, path, "--batch-id", "B-1")
    assert (result.code, result.out) == (0, "valid batch B-1: 3 transactions, control sum 27750.50 GTQ\n")


def test_delimiter_option_overrides_detection(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text("account_number|amount|email|concept\n2001|10.00|a@example.com|Pay, November, extra\n")
    detected = dry_run(capsys, path, "--batch-id", "B-1")
    assert detected.code == 1  # ',' detected: no known column
    assert "required column is missing" in detected.err
    result = dry_run(capsys, path, "--batch-id", "B-1", "--delimiter", "|")
    assert (result.code, result.out) == (0, "valid batch B-1: 1 transactions, control sum 10.00 GTQ\n")


@pytest.mark.parametrize("encoding", [None, "utf-8"])
def test_byte_order_mark_is_ignored(capsys: pytest.CaptureFixture[str], tmp_path: Path, encoding: str | None) -> None:
    path = tmp_path / "export.csv"
    path.write_bytes(b"\xef\xbb\xbf" + "account_number;amount;email;concept\n2001;10.00;a@example.com;Año\n".encode())
    options = ("--encoding", encoding) if encoding else ()
    result = dry_run(capsys, path, "--batch-id", "B-1", *options)
    assert (result.code, result.err) == (0, "")


def test_a_file_in_another_encoding_names_the_byte_and_the_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "export.csv"
    path.write_bytes("account_number,amount,email,concept\n2001,1.00,a@example.com,Año\n".encode("cp1252"))
    result = dry_run(capsys, path, "--batch-id", "B-1")
    assert result.code == 1
    assert result.err.splitlines()[0] == (
        "export: file: cannot be read as utf-8-sig: byte 0xf1 (invalid continuation byte); give --encoding"
    )
    assert dry_run(capsys, path, "--batch-id", "B-1", "--encoding", "cp1252").code == 0


def test_unknown_columns_are_noted_on_stderr(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text("account_number,amount,email,concept,Department,cost-center\n2001,1.00,a@example.com,x,HR,7\n")
    result = dry_run(capsys, path, "--batch-id", "B-1")
    assert result.code == 0
    assert result.err == "note: ignored column(s): department, cost_center\n"


def test_invalid_export_exits_1_listing_every_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("account_number,amount,email,concept\n2001 002,1.505,ana.lopez@example.com,x\n2002,1.500,bad,x\n")
    result = dry_run(capsys, path, "--batch-id", "B-1")
    assert result.code == 1
    assert result.out == ""
    assert result.err.splitlines() == [
        "line 2: destination_account.account_number: malformed_account_number: must be 1-34 ASCII letters or digits"
        " (transaction 0)",
        "line 2: amount: too_many_decimals: has more than 2 decimals (transaction 0)",
        "line 3: destination_account.email: malformed_email: must be an address like name@example.com (ASCII, at"
        " most 254 characters) (transaction 1)",  # 1.500 is 1.5 by value: fine
        "dispersion submit: 3 problem(s); nothing was produced",
    ]


def test_json_export_amounts_are_exact_and_options_override(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "batch.data"
    path.write_text(
        """{"batch_id": "J-1", "origin_account": {"account_number": "111", "currency": "GTQ"},
            "transactions": [
              {"destination_account": {"account_number": "2001", "currency": "GTQ", "email": "a@example.com"},
               "amount": 0.1, "concept": "x"},
              {"destination_account": {"account_number": "2002", "currency": "GTQ", "email": "b@example.com"},
               "amount": "0.20", "concept": "x", "employee_reference": "E-2"}]}"""
    )
    result = run(capsys, str(path), "--format", "json", "--dry-run", "--quiet", "--integration", "sandbox")
    assert (result.code, result.out) == (0, "valid batch J-1: 2 transactions, control sum 0.30 GTQ\n")
    fields = BatchFields(origin_account_number="3001234567", integration="sandbox")
    export = read_json(path.read_bytes(), fields, requested_at=NOW, defaults=BatchFields())
    batch = export.batch
    assert [t.amount for t in batch.transactions] == [Decimal("0.1"), Decimal("0.20")]
    assert batch.origin.number == "3001234567"
    assert batch.origin.type == "MONETARY"
    assert [t.account_type for t in batch.transactions] == ["SAVINGS", "SAVINGS"]
    assert (batch.file_reference, batch.requested_at, batch.source) == ("J-1", NOW, "dispersion-submit")


def test_json_without_integration_or_configuration_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "batch.json"
    path.write_text(
        '{"batch_id": "J-1", "origin_account": {"account_number": "1", "currency": "GTQ"}, "transactions": []}'
    )
    result = run(capsys, str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert "export: integration: is required" in result.err.splitlines()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("missing.csv", *ORIGIN), "dispersion submit: cannot read missing.csv"),
        (("export.csv", "--config", "nowhere.toml"), "nowhere.toml: cannot read the configuration file"),
    ],
)
def test_unreadable_file_or_configuration_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    (tmp_path / "export.csv").write_text(DOC_EXAMPLE)
    result = run(capsys, *argv, "--dry-run")
    assert result.code == 2
    assert message in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize("option", [("--encoding", "no-such-codec"), ("--delimiter", ";;")])
def test_bad_encoding_or_delimiter_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: tuple[str, str]
) -> None:
    (tmp_path / "export.csv").write_text(DOC_EXAMPLE)
    with pytest.raises(SystemExit) as exited:
        submit.main(["export.csv", "--dry-run", *ORIGIN, *option])
    assert exited.value.code == 2
    assert f"argument {option[0]}" in capsys.readouterr().err


# -- scheduled batches: --execute-on and the execute_on column ---------------------------------------------------


def _day(offset: int) -> str:
    return (datetime.now(UTC).date() + timedelta(days=offset)).isoformat()


def test_execute_on_column_schedules_the_batch_and_a_bad_date_is_named_with_its_line() -> None:
    rows = DOC_EXAMPLE.splitlines()
    text = "\n".join([rows[0] + ",execute_on", rows[1] + ",2024-11-30", rows[2] + ",", rows[3] + ",2024-11-30"])
    assert parse(text + "\n").batch.execute_on == date(2024, 11, 30)
    bad = "\n".join([rows[0] + ",execute_on", rows[1] + ",30/11/2024", rows[2] + ",", rows[3] + ","])
    assert problems_of(bad + "\n") == [
        "line 2: execute_on: expected a date such as 2026-11-30 (YYYY-MM-DD), got '30/11/2024'"
    ]
    assert parse(DOC_EXAMPLE).batch.execute_on is None


def test_check_refuses_a_past_day_in_the_integrations_zone() -> None:
    fields = BatchFields(
        integration="sandbox",
        origin_account_number="3001234567",
        origin_currency="GTQ",
        batch_id="B-1",
        execute_on="2024-11-05",
    )
    export = parse(DOC_EXAMPLE, fields)
    assert check(export, now=NOW) == []  # 10:00 UTC on the 5th: today
    kiritimati = {"sandbox": Calendar(ZoneInfo("Pacific/Kiritimati"))}  # already the 6th there
    assert [str(p) for p in check(export, now=NOW, calendars=kiritimati)] == [
        "export: execute_on: execute_on 2024-11-05 is in the past (today is 2024-11-06 in Pacific/Kiritimati)"
    ]


def test_dry_run_with_execute_on(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "payroll.csv"
    path.write_text(DOC_EXAMPLE)
    tomorrow = _day(1)
    result = dry_run(capsys, path, "--batch-id", "NOV-2024-001", "--execute-on", tomorrow)
    assert result.code == 0, result.err
    assert (
        result.out == f"valid batch NOV-2024-001: 3 transactions, control sum 27750.50 GTQ, to be paid on {tomorrow}\n"
    )

    past = dry_run(capsys, path, "--batch-id", "NOV-2024-001", "--execute-on", _day(-2))
    assert past.code == 1 and f"execute_on {_day(-2)} is in the past" in past.err

    far = dry_run(capsys, path, "--execute-on", _day(40))
    assert far.code == 1 and "40 days ahead, more than 28 days" in far.err

    with pytest.raises(SystemExit) as usage:
        dry_run(capsys, path, "--execute-on", "2026-02-30")
    assert usage.value.code == 2
    assert "expected a date such as 2026-11-30 (YYYY-MM-DD), not '2026-02-30'" in capsys.readouterr().err


def test_json_export_takes_execute_on_from_the_document_or_the_option(tmp_path: Path) -> None:
    document = b"""{"batch_id": "J-2", "integration": "sandbox", "execute_on": "2024-11-29",
        "origin_account": {"account_number": "111", "currency": "GTQ"},
        "transactions": [{"destination_account": {"account_number": "2001", "currency": "GTQ",
                          "email": "a@example.com"}, "amount": "1.00", "concept": "x"}]}"""
    read = read_json(document, BatchFields(), requested_at=NOW, defaults=BatchFields())
    assert read.batch.execute_on == date(2024, 11, 29)
    given = read_json(document, BatchFields(execute_on="2024-11-30"), requested_at=NOW, defaults=BatchFields())
    assert given.batch.execute_on == date(2024, 11, 30)
