"""Spreadsheet export benchmark: a 100,000-row `.xlsx` payroll read through an export profile, rows/s and peak memory.

The workbook is written first (openpyxl's write-only mode) the way a payroll team's export looks: a title row,
Spanish headers, account numbers stored as text, amounts as numbers formatted `#,##0.00`, a total row. Then it is
read as `dispersion submit --profile nomina FILE --dry-run` reads it, in two phases:

    read        the streaming reader and the row mapper (processor.exports + processor.domain.export_rows)
    submit      the whole dry run: read, build the batch, validate every transaction

Each phase runs twice: once timed (rows/s), once under tracemalloc (peak of Python allocations). The process's
peak RSS (ru_maxrss, the writing of the workbook included) is printed at the end.

    python benchmarks/exports_xlsx.py [--rows 100000] [--keep DIR] [--max-peak-mib 400]

Exit 1 when a phase's peak exceeds `--max-peak-mib` (the modest bound; default 400 MiB for 100,000 rows, of which
the batch itself, 100,000 transactions in memory, is most). Nothing else is asserted.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell

from processor.domain.export_profile import ExportProfile, parse_profile
from processor.submit import BatchFields, check
from processor.submit_profile import map_rows, read_profiled

PROFILE = {
    "skip_rows": 1,
    "total_label": "Total",
    "origin_account": "3001234567",
    "origin_currency": "GTQ",
    "integration": "sandbox",
    "columns": {
        "employee_reference": "Código",
        "account_number": "No. Cuenta",
        "amount": "Monto",
        "email": "Correo",
        "concept": "Concepto",
    },
}


def write_workbook(path: Path, rows: int) -> Decimal:
    """The export; returns its total."""
    book = Workbook(write_only=True)
    sheet = book.create_sheet("Nómina")
    sheet.append(["Empresa Ejemplo, S.A. - Nómina de noviembre"])
    sheet.append(["Código", "Nombre", "No. Cuenta", "Monto", "Correo", "Concepto"])
    total = Decimal(0)
    for index in range(rows):
        cents = 150_000 + (index * 7919) % 2_000_000
        amount = Decimal(cents).scaleb(-2)
        total += amount
        account = WriteOnlyCell(sheet, f"{index:010d}")
        account.number_format = "@"
        money = WriteOnlyCell(sheet, amount)
        money.number_format = "#,##0.00"
        sheet.append(
            [f"E-{index:06d}", f"Empleado {index}", account, money, f"empleado{index}@example.com", "Sueldo noviembre"]
        )
    money = WriteOnlyCell(sheet, total)
    money.number_format = "#,##0.00"
    sheet.append(["Total", None, None, money])
    book.save(path)
    return total


def measure(name: str, rows: int, action: Callable[[], object]) -> float:
    """Run `action` timed, then again under tracemalloc; print both; return the peak in MiB."""
    started = time.perf_counter()
    action()
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    action()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_mib = peak / 2**20
    print(f"{name:<8} {rows / elapsed:>10,.0f} rows/s  {elapsed:6.2f} s  peak {peak_mib:7.1f} MiB (tracemalloc)")
    return peak_mib


def dry_run(path: Path, profile: ExportProfile) -> int:
    """What `submit --profile --dry-run` does with the file; the number of problems found."""
    export = read_profiled(
        path,
        profile,
        BatchFields(),
        requested_at=datetime.now(UTC),
        defaults=BatchFields(batch_id="BENCH-1"),
    )
    return len(check(export, integrations={"sandbox"}))


def main(argv: list[str] | None = None) -> int:
    """Write the workbook, read it, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="write the workbook into this folder and keep it")
    parser.add_argument("--max-peak-mib", type=float, default=400.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"nomina-{args.rows}.xlsx"
        started = time.perf_counter()
        total = write_workbook(path, args.rows)
        print(
            f"workbook {path.name}: {args.rows:,} rows, {path.stat().st_size / 2**20:.1f} MiB,"
            f" total {total}, written in {time.perf_counter() - started:.1f} s"
        )
        profile = parse_profile("nomina", PROFILE)
        mapped = map_rows(path, profile)
        if len(mapped.rows) != args.rows or mapped.problems:
            print(f"read {len(mapped.rows):,} rows, problems: {mapped.problems[:3]}", file=sys.stderr)
            return 1
        peaks = [
            measure("read", args.rows, lambda: map_rows(path, profile)),
            measure("submit", args.rows, lambda: dry_run(path, profile)),
        ]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process peak RSS {rss:.0f} MiB (ru_maxrss, writing the workbook included)")
    if max(peaks) > args.max_peak_mib:
        print(f"peak {max(peaks):.1f} MiB exceeds the bound {args.max_peak_mib:g} MiB", file=sys.stderr)
        return 1
    print(f"within the bound of {args.max_peak_mib:g} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
