"""Spreadsheet export benchmark: a 100,000-row `.xlsx` payroll read through an export profile, rows/s and peak memory.

The workbook is written first (openpyxl's write-only mode) the way a payroll team's export looks: a title row,
Spanish headers, account numbers stored as text, amounts as numbers formatted `#,##0.00`, a total row. Then it is
read as `dispersion submit --profile nomina FILE --dry-run` reads it, in two phases:

    read        the streaming reader and the row mapper (processor.exports + processor.exports.mapping)
    submit      the whole dry run: read, build the batch, validate every transaction

Each phase runs twice: once timed in a fresh child process, which reports its rows/s and its peak RSS
(ru_maxrss: the interpreter and the libraries included), and once here under tracemalloc (the peak of the Python
allocations the phase made).

    python benchmarks/exports_xlsx.py [--rows 100000] [--keep DIR] [--max-rss-mib 300]

Exit 1 when a phase's peak RSS exceeds `--max-rss-mib` (the modest bound: most of it is the batch itself, 100,000
transactions in memory, which `submit` needs whatever the file's format). Nothing else is asserted.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
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

from processor.exports.checks import check
from processor.exports.layout import BatchFields
from processor.exports.profile import ExportProfile, parse_profile
from processor.exports.profiled import map_rows, read_profiled

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


def phases(path: Path, profile: ExportProfile) -> dict[str, Callable[[], object]]:
    """The measured phases over one workbook."""
    return {"read": lambda: map_rows(path, profile), "submit": lambda: dry_run(path, profile)}


def timed_child(path: Path, phase: str) -> None:
    """In a fresh process: run one phase once; print its seconds and this process's peak RSS in MiB."""
    action = phases(path, parse_profile("nomina", PROFILE))[phase]
    started = time.perf_counter()
    action()
    elapsed = time.perf_counter() - started
    print(f"{elapsed} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}")


def measure(name: str, rows: int, path: Path, action: Callable[[], object]) -> float:
    """The phase timed in a child process, then here under tracemalloc; print both; return the child's peak RSS."""
    child = subprocess.run(
        [sys.executable, __file__, "--phase", name, "--file", str(path)], capture_output=True, text=True, check=True
    )
    elapsed, rss = (float(word) for word in child.stdout.split())
    tracemalloc.start()
    action()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"{name:<8} {rows / elapsed:>8,.0f} rows/s  {elapsed:6.2f} s  peak RSS {rss:6.1f} MiB"
        f"  Python allocations peak {peak / 2**20:6.1f} MiB (tracemalloc)"
    )
    return rss


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
    parser.add_argument("--max-rss-mib", type=float, default=300.0)
    parser.add_argument("--phase", choices=("read", "submit"), help=argparse.SUPPRESS)  # the timed child
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase is not None:
        timed_child(args.file, args.phase)
        return 0
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
        del mapped
        peaks = [measure(name, args.rows, path, action) for name, action in phases(path, profile).items()]
    if max(peaks) > args.max_rss_mib:
        print(f"peak RSS {max(peaks):.1f} MiB exceeds the bound {args.max_rss_mib:g} MiB", file=sys.stderr)
        return 1
    print(f"peak RSS within the bound of {args.max_rss_mib:g} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
