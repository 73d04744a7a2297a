"""Shared by the command-line tests (`submit`, `status`, `topics`, `exports`): a sample ERP export, the origin
options, a captured run, a configuration file with a `[kafka]` table and one integration, and ERP exports as they
come with their export profiles (a Spanish Windows-1252 CSV, an `.xlsx` workbook)."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bank_support import key_pair
from openpyxl import Workbook

ORIGIN = ("--origin-account", "3001234567", "--origin-currency", "GTQ")
EXPORT = """employee_reference,account_number,account_type,amount,currency,email,concept
E-1001,2001002001,SAVINGS,8500.00,GTQ,ana.lopez@example.com,Payroll November
E-1002,2001002002,SAVINGS,7250.50,GTQ,bruno.diaz@example.com,Payroll November
E-1003,2001002003,MONETARY,12000.00,GTQ,carla.mendez@example.com,Payroll November
E-1004,2001002004,SAVINGS,0.01,GTQ,dora.ruiz@example.com,Payroll November
E-1005,2001002005,SAVINGS,15475.99,GTQ,eva.soto@example.com,Payroll November
"""


@dataclass
class Run:
    """What a command returned and printed."""

    code: int
    out: str
    err: str


def write_config(
    path: Path,
    bootstrap: str,
    topics: Mapping[str, str] | None = None,
    *,
    secret_env: str | None = None,
    kafka: Mapping[str, str] | None = None,
) -> Path:
    """A configuration file with one integration (`sandbox`) and the given `[kafka]` table (`kafka`: more string
    keys of it, e.g. `wire_format`); with `secret_env`, the client secret comes from that environment variable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "signing-key.pem").write_text(key_pair().private_pem)
    mapping = "".join(f'"{logical}" = "{physical}"\n' for logical, physical in (topics or {}).items())
    secret = f'client_secret_env = "{secret_env}"' if secret_env else 'client_secret = "s3cret-value-for-tests"'
    extra = "".join(f'{key} = "{value}"\n' for key, value in (kafka or {}).items())
    path.write_text(
        f"""[processor]
store = "sqlite:///{path.parent}/dispersion.sqlite"

[kafka]
bootstrap_servers = "{bootstrap}"
{extra}
[kafka.topics]
{mapping}
[integrations.sandbox]
issuer = "http://127.0.0.1:8700"
resource_server = "http://127.0.0.1:8700"
client_id = "client-1"
{secret}
redirect_uri = "http://127.0.0.1:8600/callback"
kid = "kid-1"
signing_key_path = "signing-key.pem"
financial_id = "0015800001041RHAAY"
customer_ip = "127.0.0.1"
token_auth_method = "private_key_jwt"
grant_parameter = "grand_type"
assertion_signing = "local"
"""
    )
    return path


PLANILLA = """
[exports.planilla]
encoding = "cp1252"
delimiter = ";"
skip_rows = 1
decimal_separator = ","
thousands_separator = "."
total_label = "TOTAL"
origin_account = "3001234567"
origin_currency = "GTQ"

[exports.planilla.columns]
employee_reference = "Código"
account_number = "No. Cuenta"
amount = "Monto"
email = "Correo"
concept = "Concepto"
"""
NOMINA = """
[exports.nomina]
sheet = "Nómina"
skip_rows = 1
total_label = "Total"
footer_rows = 1
origin_account = "3001234567"
origin_currency = "GTQ"
batch_id = "column"

[exports.nomina.columns]
batch_id = "Planilla"
account_number = "No. Cuenta"
account_type = 4
amount = "Monto"
email = "Correo"
concept = "Concepto"
"""
HEADER = "Código;Nombre;No. Cuenta;Monto;Correo;Concepto"
ROWS = [
    "E-1001;Ana López;2001002001;8.500,00;ana.lopez@example.com;Sueldo noviembre",
    "E-1002;Bruno Díaz;2001002002;7.250,50;bruno.diaz@example.com;Sueldo noviembre",
    "E-1003;Carla Méndez;0012003003;12.000,00;carla.mendez@example.com;Sueldo noviembre",
    "E-1004;Dora Ruiz;2001002004;0,01;dora.ruiz@example.com;Bonificación",
    "E-1005;Eva Soto;2001002005;15.475,99;eva.soto@example.com;Sueldo noviembre",
]
TITLE = "PLANILLA DE SUELDOS - NOVIEMBRE 2024;;;;;"
TOTAL = ";TOTAL;;43.226,50;;"


def spanish_csv(path: Path, rows: list[str] | None = None, total: str = TOTAL) -> Path:
    """A payroll export as a Guatemalan payroll system writes it: title row, Spanish headers, Windows-1252."""
    lines = [TITLE, HEADER, *(ROWS if rows is None else rows), total]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("cp1252"))
    return path


def stored_as(path: Path, values: dict[str, str]) -> None:
    """Rewrite number cells' stored text as a spreadsheet program writes it (17 significant digits:
    `0.30000000000000004`); openpyxl itself writes floats shortened."""
    with zipfile.ZipFile(path) as archive:
        parts = {name: archive.read(name) for name in archive.namelist()}
    sheet = parts["xl/worksheets/sheet1.xml"].decode()
    for coordinate, stored in values.items():
        sheet, count = re.subn(rf'(<c r="{coordinate}"[^>]*><v>)[^<]*(</v>)', rf"\g<1>{stored}\g<2>", sheet)
        assert count == 1, coordinate
    parts["xl/worksheets/sheet1.xml"] = sheet.encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)


def workbook(path: Path, *, total: float = 8501.31, extra: list[object] | None = None) -> Path:
    """A payroll workbook: a title row, the header, amounts formatted `#,##0.00`, account numbers stored as text
    (one with leading zeros), a total row and a footer note."""
    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Nómina"
    sheet.append(["Empresa Ejemplo, S.A. - Nómina de noviembre 2024"])
    sheet.append(["No. Cuenta", "Nombre", "Monto", "Tipo", "Correo", "Concepto", "Planilla"])
    rows: list[list[object]] = [
        ["0012003003", "Carla Méndez", 0.3, "SAVINGS", "carla.mendez@example.com", "Sueldo", "NOM-2024-11"],
        ["2001002001", "Ana López", 8500, "MONETARY", "ana.lopez@example.com", "Sueldo", "NOM-2024-11"],
        ["2001002002", "Bruno Díaz", 1.005, "SAVINGS", "bruno.diaz@example.com", "Bono", "NOM-2024-11"],
    ]
    if extra is not None:
        rows.append(extra)
    for row in rows:
        sheet.append(row)
    sheet.append(["Total", None, total])
    sheet.append(["Generado por SAP el 30/11/2024"])
    for (cell,) in sheet.iter_rows(min_row=3, max_row=sheet.max_row - 1, min_col=3, max_col=3):
        cell.number_format = "#,##0.00"
    for (cell,) in sheet.iter_rows(min_row=3, max_row=sheet.max_row - 2, min_col=1, max_col=1):
        cell.number_format = "@"
    book.save(path)
    # As a spreadsheet program stores 0.1 + 0.2 and 1.005.
    stored_as(path, {"C3": "0.30000000000000004", "C5": "1.0049999999999999"})
    return path
