"""Hostile workbooks (processor/exports/xlsx_rows.py): a DTD or entity expansion, too many shared strings, too
much once uncompressed, and too many rows are refused with a clear message; `dispersion submit` exits 2 for them
without a traceback, and stops at the first row past the limit instead of reading the whole sheet."""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from openpyxl import Workbook

from processor.exports.errors import ExportLimitError
from processor.exports.xlsx_rows import xlsx_rows

module = importlib.import_module("processor.exports.xlsx_rows")

ORIGIN = ("--origin-account", "3001234567", "--origin-currency", "GTQ", "--integration", "sandbox")
HEADER = ["employee_reference", "account_number", "amount", "email", "concept"]


def book(path: Path, rows: int, *, unique: bool = False) -> Path:
    sheet_book = Workbook()
    sheet = sheet_book.active
    assert sheet is not None
    sheet.append(HEADER)
    for i in range(rows):
        concept = f"Payroll {i}" if unique else "Payroll"
        sheet.append([f"E-{i:05d}", f"2001{i:06d}", "10.00", f"e{i}@example.com", concept])
    sheet_book.save(path)
    return path


def rewritten(source: Path, target: Path, part: str, change: bytes) -> Path:
    """The workbook with one part's XML replaced."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            new.writestr(info, change if info.filename == part else old.read(info))
    return target


def submit(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor.cli", "submit", str(path), *ORIGIN, "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_entity_expansion_is_refused_with_exit_2(tmp_path: Path) -> None:
    laughs = (
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;">]>'
        b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData><row r="1">'
        b'<c r="A1" t="inlineStr"><is><t>&lol2;</t></is></c></row></sheetData></worksheet>'
    )
    path = rewritten(book(tmp_path / "plain.xlsx", 2), tmp_path / "laughs.xlsx", "xl/worksheets/sheet1.xml", laughs)
    done = submit(path)
    assert done.returncode == 2, done.stderr
    assert "declares a DTD or entities" in done.stderr and "Traceback" not in done.stderr


def test_too_many_shared_strings_or_bytes_are_refused_before_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    strings = b"".join(b"<si><t>%d</t></si>" % i for i in range(150))
    shared = b'<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">' + strings + b"</sst>"
    path = book(tmp_path / "plain.xlsx", 40, unique=True)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("xl/sharedStrings.xml", shared)
    monkeypatch.setattr(module, "MAX_SHARED_STRINGS", 100)
    with pytest.raises(ExportLimitError, match=r"150 shared strings; at most 100 are read"):
        list(xlsx_rows(path))
    monkeypatch.setattr(module, "MAX_SHARED_STRINGS", 1_000_000)
    monkeypatch.setattr(module, "MAX_UNCOMPRESSED", 1000)
    with pytest.raises(ExportLimitError, match=r"bytes once uncompressed; at most 1,000 are read"):
        list(xlsx_rows(path))


def test_reading_stops_at_the_first_row_past_the_limit(tmp_path: Path) -> None:
    path = book(tmp_path / "long.xlsx", 50)
    seen: list[int] = []

    def read() -> None:
        for number, _ in xlsx_rows(path, max_rows=10):
            seen.append(number)

    with pytest.raises(ExportLimitError, match=r"more than 10 rows"):
        read()
    assert seen == list(range(1, 11))  # nothing after the 11th row was read
    assert len(list(xlsx_rows(path))) == 51
