"""ERP exports as they come (docs/submit.md, "Bring your ERP's export"): `dispersion submit --profile NAME` over a
Windows-1252 CSV in Spanish with a title row, `1.234,56` and a total row, and over an `.xlsx` built here with
openpyxl (a formatted amount column, account numbers stored as text); bad cells reported with the row, the ERP's
column and the reason, nothing valid unless every row is; `--dry-run --explain`; `dispersion exports check`; the
profile definitions. Producing to Kafka is the same code as the default layout's (test_submit_status_cli.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import tracemalloc
import zipfile
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from cli_support import HEADER, NOMINA, PLANILLA, ROWS, TITLE, Run, spanish_csv, workbook, write_config
from openpyxl import Workbook

from processor.cli import exports as exportscli
from processor.cli import submit
from processor.exports.checks import check
from processor.exports.layout import BatchFields
from processor.exports.mapping import NumberCell, RowMapper
from processor.exports.profile import ProfileError, parse_profile
from processor.exports.profiled import profile_named, read_profiled
from processor.exports.xlsx_rows import xlsx_rows


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DISPERSION_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = write_config(tmp_path / "dispersion.toml", "127.0.0.1:9")
    path.write_text(path.read_text() + PLANILLA + NOMINA)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    code = submit.main(list(argv))
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def check_run(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    code = exportscli.main(["check", *argv])
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


# -- CSV in Spanish --------------------------------------------------------------------------------------------


def test_spanish_windows_1252_export_with_title_and_total_row(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    path = spanish_csv(tmp_path / "planilla-noviembre.csv")
    result = run(capsys, "--config", str(config), "--profile", "planilla", str(path), "--dry-run", "--quiet")
    assert result.code == 0, result.err
    assert re.fullmatch(r"valid batch payroll-[0-9a-f]{16}: 5 transactions, control sum 43226.50 GTQ\n", result.out)


def test_the_batch_read_through_a_profile(config: Path, tmp_path: Path) -> None:
    exports = tomllib.loads(config.read_text())["exports"]
    path = spanish_csv(tmp_path / "p.csv")
    export = read_profiled(
        path,
        profile_named(exports, "planilla", str(config)),
        BatchFields(),
        requested_at=datetime(2024, 11, 30, tzinfo=UTC),
        defaults=BatchFields(batch_id="B-1", integration="sandbox"),
    )
    batch = export.batch
    assert [t.amount for t in batch.transactions] == [
        Decimal("8500.00"),
        Decimal("7250.50"),
        Decimal("12000.00"),
        Decimal("0.01"),
        Decimal("15475.99"),
    ]
    assert batch.transactions[2].account_number == "0012003003"
    assert [t.employee_reference for t in batch.transactions][:2] == ["E-1001", "E-1002"]
    assert batch.transactions[3].concept == "Bonificación"  # decoded as Windows-1252
    assert (batch.origin.number, batch.origin.currency, batch.integration) == ("3001234567", "GTQ", "sandbox")
    assert export.lines == (3, 4, 5, 6, 7)  # rows as a spreadsheet numbers them
    assert check(export) == []


def test_bad_cells_are_reported_by_row_erp_column_and_reason(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    rows = [
        ROWS[0],
        "E-1002;Bruno Díaz;2001002002;7,250.50;bruno.diaz@example.com;Sueldo noviembre",  # English number
        "E-1003;Carla Méndez;0012-003;12.000,00;carla.mendez@example.com;Sueldo noviembre",  # bad account
        "E-1004;Dora Ruiz;2001002004;;dora.ruiz;Bonificación",  # empty amount, bad e-mail
        ROWS[4],
    ]
    path = spanish_csv(tmp_path / "mala.csv", rows, total=";TOTAL;;23.976,00;;")
    result = run(capsys, "--config", str(config), "--profile", "planilla", str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert result.out == ""
    assert result.err.splitlines() == [
        "row 4: Monto: '7,250.50' is written like 1,234.56, but this profile expects numbers like 1.234,56",
        "row 5: No. Cuenta: malformed_account_number: must be 1-34 ASCII letters or digits (transaction 2)",
        "row 6: Monto: is empty",
        "row 6: Correo: malformed_email: must be an address like name@example.com (ASCII, at most 254 characters)"
        " (transaction 3)",
        "dispersion submit: 4 problem(s); nothing was produced",
    ]


def test_a_total_row_that_differs_from_the_sum_is_reported(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    path = spanish_csv(tmp_path / "p.csv", total=";TOTAL;;43.226,51;;")
    result = run(capsys, "--config", str(config), "--profile", "planilla", str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert result.err.splitlines()[0] == (
        "row 8: Monto: the total row says 43226.51 but the 5 rows add up to 43226.50 (difference 0.01)"
    )


def test_rows_after_the_total_row_are_refused_not_dropped(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    path = spanish_csv(tmp_path / "p.csv", ROWS[:4], total=";TOTAL;;27.750,51;;\r\n" + ROWS[4])
    result = run(capsys, "--config", str(config), "--profile", "planilla", str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert "row 8: row: comes after the total row (row 7); only footer rows may follow it" in result.err


def test_a_header_without_the_profiles_column_names_what_it_has(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(f"{TITLE}\r\n{HEADER.replace('Correo', 'E-mail')}\r\n{ROWS[0]}\r\n".encode("cp1252"))
    result = run(capsys, "--config", str(config), "--profile", "planilla", str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert result.err.splitlines()[0] == (
        "row 2: Correo: no such column in the header row; it has 'Código', 'Nombre', 'No. Cuenta', 'Monto',"
        " 'E-mail', 'Concepto'"
    )


def test_a_file_in_another_encoding_is_refused_with_the_byte(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(f"{TITLE}\n{HEADER}\n{ROWS[0]}\n".encode("cp1252").replace(b"\xf3", b"\x81"))
    result = run(capsys, "--config", str(config), "--profile", "planilla", str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert "export: file: cannot be read as cp1252: byte 0x81" in result.err
    assert "Traceback" not in result.err


def test_explain_shows_erp_column_our_field_and_value(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    path = spanish_csv(tmp_path / "planilla.csv")
    result = run(
        capsys, "--config", str(config), "--profile", "planilla", str(path), "--dry-run", "--explain", "--quiet"
    )
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[:3] == [
        "profile planilla: planilla.csv as csv (encoding cp1252, delimiter ';'); numbers written like 1.234,56",
        "skipped row(s) above the header: 1",
        "header: row 2",
    ]
    assert "ignored column(s): Nombre" in lines
    assert "  Monto      -> amount             '8.500,00' -> 8500.00" in lines
    assert "  Código     -> employee_reference 'E-1001' -> E-1001" in lines
    assert "row 6:" not in lines  # the first three rows only
    assert "total row 8: 43226.50 (sum of 5 rows: 43226.50) matches" in lines
    assert lines[-1].startswith("valid batch payroll-")


# -- xlsx ------------------------------------------------------------------------------------------------------


def test_workbook_amounts_are_what_the_cells_show_and_text_accounts_keep_zeros(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    path = workbook(tmp_path / "nomina.xlsx")
    result = run(capsys, "--config", str(config), "--profile", "nomina", str(path), "--dry-run", "--explain", "--quiet")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "  No. Cuenta -> account_number '0012003003' -> 0012003003" in lines
    assert "  Monto      -> amount         0.30000000000000004 (number, format #,##0.00) -> 0.30" in lines
    assert "  Monto      -> amount         1.0049999999999999 (number, format #,##0.00) -> 1.01" in lines
    assert "  Tipo       -> account_type   'MONETARY' -> MONETARY" in lines  # mapped by position (4)
    assert "total row 6: 8501.31 (sum of 3 rows: 8501.31) matches" in lines
    assert "footer row(s) ignored: 7" in lines
    assert lines[-1] == "valid batch NOM-2024-11: 3 transactions, control sum 8501.31 GTQ"
    loud = run(capsys, "--config", str(config), "--profile", "nomina", str(path), "--dry-run")
    assert "read nomina.xlsx: 3 rows" in loud.err.splitlines()  # the real count, not the first throttled update


def test_bad_workbook_cells_name_row_column_and_reason(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    path = workbook(
        tmp_path / "nomina.xlsx",
        extra=["2001002009", "Ivan", "=C3*2", "SAVINGS", "ivan@example.com", "Sueldo", "NOM-2024-12"],
    )
    result = run(capsys, "--config", str(config), "--profile", "nomina", str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert result.err.splitlines()[:2] == [
        "row 6: Monto: the cell holds a formula with no saved result (open the file in the spreadsheet program and"
        " save it again)",
        "row 6: Planilla: 'NOM-2024-12' differs from 'NOM-2024-11' on row 3 (one file, one batch)",
    ]


def test_a_missing_sheet_is_named(capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path) -> None:
    path = workbook(tmp_path / "nomina.xlsx")
    config.write_text(config.read_text().replace('sheet = "Nómina"', 'sheet = "Hoja1"'))
    result = run(capsys, "--config", str(config), "--profile", "nomina", str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert "export: file: nomina.xlsx: no sheet named 'Hoja1' (sheets: 'Nómina')" in result.err


def test_numbers_are_never_read_through_a_float(tmp_path: Path) -> None:
    """The mapper gets the workbook's stored text, not openpyxl's float."""
    rows = dict(xlsx_rows(workbook(tmp_path / "w.xlsx")))
    assert rows[3][2] == NumberCell("0.30000000000000004", "#,##0.00")
    assert rows[3][0] == "0012003003"


# -- the command line ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--profile", "nope"), "no profile 'nope' (configured: nomina, planilla)"),
        (("--profile", "planilla", "--delimiter", ","), "--delimiter cannot be combined with --profile"),
        (("--explain",), "--explain needs --profile NAME"),
    ],
)
def test_profile_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    path = spanish_csv(tmp_path / "p.csv")
    result = run(capsys, "--config", str(config), str(path), "--dry-run", *argv)
    assert result.code == 2
    assert message in result.err


def test_profile_without_configuration_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = spanish_csv(tmp_path / "p.csv")
    result = run(capsys, str(path), "--profile", "planilla", "--dry-run")
    assert (result.code, result.err) == (
        2,
        "dispersion submit: --profile needs a configuration (--config, $DISPERSION_CONFIG or ./dispersion.toml)\n",
    )


def test_exports_check_reads_each_sample_with_its_profile(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    csv_path = spanish_csv(tmp_path / "planilla.csv")
    xlsx_path = workbook(tmp_path / "nomina.xlsx")
    result = check_run(capsys, "--config", str(config), f"planilla={csv_path}", f"nomina={xlsx_path}")
    assert result.code == 0, result.out
    assert result.out.splitlines() == [
        f"nomina: {xlsx_path}: ok: 3 rows, control sum 8501.31 GTQ; total row 6 matches",
        f"planilla: {csv_path}: ok: 5 rows, control sum 43226.50 GTQ; total row 8 matches",
    ]


def test_exports_check_reports_problems_with_exit_1(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    csv_path = spanish_csv(tmp_path / "planilla.csv")
    config.write_text(config.read_text() + '\n[exports.roto]\ndecimal_separator = ";"\n[exports.roto.columns]\n')
    result = check_run(capsys, "--config", str(config), str(csv_path))
    assert result.code == 1
    lines = result.out.splitlines()
    assert lines[0] == f"nomina: {csv_path}: 1 problem(s)"  # a CSV read through the workbook profile
    assert f"planilla: {csv_path}: ok: 5 rows, control sum 43226.50 GTQ; total row 8 matches" in lines
    assert "roto: the profile has 4 problem(s)" in lines
    assert f"  {config}: exports.roto.decimal_separator: must be one of '.', ',', not ';'" in lines
    assert lines[-1] == "exports check: problems in 2 of 3 check(s)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--profile", "nope"), "no profile 'nope'"),
        (("missing.csv",), "cannot read the sample missing.csv"),
        (("--config", "nowhere.toml"), "nowhere.toml: cannot read the configuration file"),
    ],
)
def test_exports_check_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], config: Path, argv: tuple[str, ...], message: str
) -> None:
    options = () if "--config" in argv else ("--config", str(config))
    result = check_run(capsys, *options, *argv)
    assert result.code == 2
    assert message in result.err


# -- profile definitions and the mapper ------------------------------------------------------------------------


def test_profile_problems_are_all_named_by_key() -> None:
    table = {
        "decimal_separator": ",",
        "thousands_separator": ",",
        "encoding": "klingon",
        "skip_row": 1,
        "batch_id": "column",
        "origin_account": "3001234567",
        "header": False,
        "columns": {"account_number": "No. Cuenta", "monto": 4, "origin_account_number": 2},
    }
    with pytest.raises(ProfileError) as refused:
        parse_profile("x", table)
    assert refused.value.problems == [
        "exports.x.skip_row: unknown key (did you mean 'skip_rows'?)",
        "exports.x.columns.account_number: names a column ('No. Cuenta') but header = false: give its position"
        " (1, 2, ...)",
        "exports.x.columns.monto: not one of our fields (did you mean 'amount'?)",
        "exports.x.columns.amount: is required (the ERP column that holds it)",
        "exports.x.columns.email: is required (the ERP column that holds it)",
        "exports.x.thousands_separator: must differ from decimal_separator (',')",
        "exports.x.origin_account: give either origin_account or columns.origin_account_number, not both",
        'exports.x.batch_id: "column" needs columns.batch_id (the ERP column holding it)',
        "exports.x.encoding: unknown encoding 'klingon' (e.g. utf-8, cp1252, latin-1)",
    ]


def test_columns_by_position_without_a_header() -> None:
    profile = parse_profile(
        "sin_encabezado",
        {"header": False, "decimal_separator": ",", "columns": {"account_number": 1, "amount": 2, "email": 3}},
    )
    mapper = RowMapper(profile, fixed_width=True)
    mapper.feed(1, ["2001", "10,50", "a@example.com"])
    mapper.feed(2, ["2002", "1,5,0", "b@example.com"])
    result = mapper.finish()
    assert [row.values for row in result.rows] == [
        ("2001", "10.50", "a@example.com", ""),
        ("2002", "", "b@example.com", ""),
    ]
    assert [(p.row, p.column) for p in result.problems] == [(2, "column 2")]


def test_a_workbook_is_read_streaming(tmp_path: Path) -> None:
    """5,000 rows read in read-only mode hold one row at a time: the peak of Python allocations stays a small
    fraction of what loading the sheet (30,000 cells) would take. benchmarks/exports_xlsx.py measures 100,000."""
    book = Workbook(write_only=True)
    sheet = book.create_sheet("Nómina")
    sheet.append(["No. Cuenta", "Nombre", "Monto", "Correo", "Concepto", "Código"])
    for index in range(5000):
        sheet.append([f"{index:010d}", f"Empleado {index}", index + 0.25, f"e{index}@example.com", "Sueldo", index])
    path = tmp_path / "grande.xlsx"
    book.save(path)
    tracemalloc.start()
    try:
        count = sum(1 for _ in xlsx_rows(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 5001
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_a_damaged_workbook_is_a_clear_problem(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    path = workbook(tmp_path / "nomina.xlsx")
    with zipfile.ZipFile(path) as archive:
        parts = {name: archive.read(name) for name in archive.namelist()}
    parts["xl/worksheets/sheet1.xml"] = parts["xl/worksheets/sheet1.xml"][:-200]  # cut short
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    result = run(capsys, "--config", str(config), "--profile", "nomina", str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert "export: file: nomina.xlsx: the sheet cannot be read (ParseError" in result.err
    assert "Traceback" not in result.err
    (tmp_path / "nomina.xlsx").write_text("No. Cuenta;Monto\n")
    result = run(capsys, "--config", str(config), "--profile", "nomina", str(path), "--dry-run", "--quiet")
    assert result.code == 1
    assert "export: file: nomina.xlsx is read as xlsx but is text (CSV): name it .csv" in result.err


def test_the_dispersion_command_dispatches_exports(config: Path, tmp_path: Path) -> None:
    """`dispersion exports check` as a process (processor/cli.py registers the command)."""
    csv_path = spanish_csv(tmp_path / "planilla.csv")
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", "exports", "check", "--config", str(config), f"planilla={csv_path}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"planilla: {csv_path}: ok: 5 rows, control sum 43226.50 GTQ; total row 8 matches" in done.stdout
    assert "nomina: the profile is valid (no sample given)" in done.stdout


# -- files read by their extension, without a profile ----------------------------------------------------------

OUR_ROWS: list[list[object]] = [
    ["E-1", "2001002001", 8500.5, "ana.lopez@example.com", "Sueldo"],
    ["E-2", "0012003003", 1200, "bruno.diaz@example.com", "Sueldo"],
]
ORIGIN = ("--origin-account", "3001234567", "--origin-currency", "GTQ", "--integration", "sandbox")


def our_workbook(path: Path, *, creator: str = "ERP") -> Path:
    """A workbook in our own layout: our column names in the first row, amounts as numbers."""
    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Employee Reference", "account_number", "Amount", "email", "concept"])
    for row in OUR_ROWS:
        sheet.append(row)
    book.properties.creator = creator  # another save of the same rows: other bytes
    book.save(path)
    return path


def test_a_workbook_without_a_profile_is_read_by_its_extension(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Saved twice (other bytes) it is one batch id; the same rows as CSV are that batch too."""
    first = our_workbook(tmp_path / "planilla-nov-2026.xlsx")
    again = our_workbook(tmp_path / "planilla-nov-2026 (saved again).xlsx", creator="someone else")
    assert first.read_bytes() != again.read_bytes()
    as_csv = tmp_path / "planilla.csv"
    as_csv.write_text(
        "employee_reference,account_number,amount,email,concept\n"
        + "".join(",".join(str(cell) for cell in row) + "\n" for row in OUR_ROWS).replace("8500.5,", "8500.50,")
    )
    ids = []
    for path in (first, again, as_csv):
        result = run(capsys, str(path), *ORIGIN, "--dry-run", "--quiet")
        assert result.code == 0, result.err
        match = re.fullmatch(
            r"valid batch (payroll-[0-9a-f]{16}): 2 transactions, control sum 9700.50 GTQ\n", result.out
        )
        assert match is not None, result.out
        ids.append(match.group(1))
    assert ids[0] == ids[1] == ids[2]


def test_a_workbook_in_our_layout_is_checked_as_our_csv_is(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The same built-in profile: our column names in problems, plain amounts in text cells, other columns noted."""
    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Account Number", "Amount", "email", "concept", "Departamento"])
    sheet.append(["2001002001", 8500.5, "not-an-email", "Sueldo", "RRHH"])
    sheet.append(["2001002002", "1,200.00", "b@example.com", "Sueldo", "RRHH"])
    path = tmp_path / "planilla.xlsx"
    book.save(path)
    result = run(capsys, str(path), *ORIGIN, "--dry-run", "--quiet")
    assert result.code == 1
    assert result.err.splitlines() == [
        "note: ignored column(s): departamento",
        "row 2: destination_account.email: malformed_email: must be an address like name@example.com (ASCII, at"
        " most 254 characters) (transaction 0)",
        "row 3: amount: expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)",
        "dispersion submit: 2 problem(s); nothing was produced",
    ]


def test_a_workbook_without_our_columns_names_what_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = workbook(tmp_path / "nomina.xlsx")  # the ERP's own headers: needs its profile
    result = run(capsys, str(path), *ORIGIN, "--dry-run", "--quiet")
    assert result.code == 1
    assert "row 1: account_number: required column is missing from the header row" in result.err
    assert "row 1: email: required column is missing from the header row" in result.err
    assert "Traceback" not in result.err


def test_a_file_of_one_kind_named_as_another_is_a_clear_problem(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    book = our_workbook(tmp_path / "book.xlsx")
    named_csv = tmp_path / "export.csv"
    named_csv.write_bytes(book.read_bytes())
    result = run(capsys, str(named_csv), *ORIGIN, "--dry-run", "--quiet")
    assert result.code == 1
    assert "export.csv is read as csv but is an .xlsx workbook (a ZIP file): name it .xlsx" in result.err
    assert "codec" not in result.err
    named_json = tmp_path / "export.json"
    named_json.write_bytes(book.read_bytes())
    result = run(capsys, str(named_json), *ORIGIN, "--dry-run", "--quiet")
    assert "export.json is read as json but is an .xlsx workbook (a ZIP file): name it .xlsx" in result.err
    text_xlsx = tmp_path / "export.xlsx"
    text_xlsx.write_text("account_number,amount,email,concept\n2001,1.00,a@example.com,x\n")
    result = run(capsys, str(text_xlsx), *ORIGIN, "--dry-run", "--quiet")
    assert result.code == 1
    assert "export.xlsx is read as xlsx but is text (CSV): name it .csv" in result.err
    old = tmp_path / "old.xlsx"
    old.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 64)
    result = run(capsys, "--config", str(config), "--profile", "nomina", str(old), "--dry-run", "--quiet")
    assert result.code == 1
    assert "old.xlsx is an Excel 97-2003 workbook (.xls), which cannot be read: save it as .xlsx" in result.err


def test_a_wrong_number_format_is_summed_up_not_300_lines(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    rows = "".join(f"E-{n},20010020{n:02d},1.234,56,employee{n}@example.com,Payroll\n" for n in range(60))
    path = tmp_path / "export.csv"
    path.write_text("employee_reference,account_number,amount,email,concept\n" + rows.replace(",56,", "56,"))
    path.write_text(path.read_text().replace("1.23456", '"1.234,56"'))
    result = run(capsys, "--config", str(config), str(path), *ORIGIN, "--dry-run", "--quiet")
    assert result.code == 1
    lines = result.err.splitlines()
    assert len(lines) <= 50 + 4, result.err
    assert "... and 10 more problem(s) like those" in lines
    assert any(line.startswith("amount is refused on 60 of 60 rows: is it the right --profile") for line in lines)
    assert lines[-1] == "dispersion submit: 60 problem(s); nothing was produced"
