"""`dispersion report`: the reconciliation report for accounting, one line per transfer of every batch that ended
(COMPLETED or FAILED) in a time window, with totals per batch and currency (through the admin API).

    dispersion report --since 2026-11-01 [--until 2026-12-01] [--format csv|json] [--output F] [--vrp]

CSV: a header line, then one line per transfer (batch_id, index, employee_reference, amount, currency, status,
reason_code, reason_text, consent_id, file_payment_id, completed_at); the totals go to standard error (and into
the JSON form as `totals`), then the grand totals of the payrolls submitted in the window per currency (an
original batch with its retries, each transfer counted once by its final outcome: paid, failed, outstanding, in
progress, scheduled, not paid) and the net outstanding (`grand_totals` in JSON). Amounts have two decimals;
times are UTC with milliseconds; `--since 2026-11-01` is that day's midnight UTC. A text cell a spreadsheet
would run as a formula (it starts with `=`, `+`, `-`, `@`, a tab or a carriage return) is written with a leading
`'` (OWASP's rule against CSV injection); the JSON form keeps the text as it is.

VRP payments created in the window are kept apart from the file payments: in JSON under `vrp` (`payments`, one per
payment: mandate_id, instruction_id, amount, currency, state, bank_status, reason, domestic_vrp_id, created_at; and
`totals` per mandate and currency), in CSV with `--vrp` (those lines instead of the transfers); their totals go to
standard error after the batches' (`vrp total M GBP: ...`).

Exit status: 0 written; 1 refused by the processor; 2 usage.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import IO, Any

from processor.cli.admin_client import AdminClient, AdminRefusalError, add_arguments
from processor.cli.common import CliError
from processor.domain.text import counted, csv_cell, printable
from processor.engine.reporting import REPORT_COLUMNS
from processor.engine.vrp_views import VRP_REPORT_COLUMNS


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion report`."""
    p = argparse.ArgumentParser(prog="dispersion report", description="Per-transfer reconciliation report.")
    p.add_argument("--since", required=True, help="from this day (2026-11-01, midnight UTC) or time, inclusive")
    p.add_argument("--until", help="to this day or time, exclusive (default: now)")
    p.add_argument("--format", choices=("csv", "json"), default="csv")
    p.add_argument("--output", "-o", help="write to this file (default: standard output)")
    p.add_argument("--vrp", action="store_true", help="CSV: the VRP payments of the window instead of the transfers")
    add_arguments(p)
    return p


def write(document: dict[str, Any], fmt: str, out: IO[str], *, vrp: bool = False) -> None:
    """The report in CSV (lines only: the transfers, or with `vrp` the VRP payments) or JSON (everything)."""
    if fmt == "json":
        json.dump(document, out, ensure_ascii=False, indent=1)
        out.write("\n")
        return
    columns, lines = (VRP_REPORT_COLUMNS, _vrp(document)["payments"]) if vrp else (REPORT_COLUMNS, document["lines"])
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for line in lines:
        writer.writerow(["" if line[column] is None else csv_cell(line[column]) for column in columns])


def _vrp(document: dict[str, Any]) -> dict[str, Any]:
    """The VRP part (empty from a processor that predates it)."""
    part = document.get("vrp")
    return part if isinstance(part, dict) else {"payments": [], "totals": []}


def main(argv: list[str]) -> int:
    """`dispersion report`."""
    args = parser().parse_args(argv)
    try:
        client = AdminClient.from_args(args)
        window = {"since": args.since, **({"until": args.until} if args.until else {})}
        document = client.call("GET", "/report", params=window)
    except CliError as exc:
        print(f"dispersion report: {exc}", file=sys.stderr)
        return 2
    except AdminRefusalError as exc:
        print(f"dispersion report: {exc}", file=sys.stderr)
        return 2 if exc.status == 400 else 1
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="") as out:
            write(document, args.format, out, vrp=args.vrp)
    else:
        write(document, args.format, sys.stdout, vrp=args.vrp)
    for total in document["totals"]:
        print(
            f"total {total['batch_id']} {total['currency']}: {counted(total['transfers'], 'transfer')}, "
            f"{total['transfers_completed']} paid {total['amount_completed']}, "
            f"{total['transfers_failed']} failed {total['amount_failed']}",
            file=sys.stderr,
        )
    for line in grand_total_lines(document.get("grand_totals") or []):
        print(line, file=sys.stderr)
    for review in document.get("reviews") or []:
        who = f"{review['state'].lower()} by {review['reviewed_by']}" if review.get("reviewed_by") else "flagged only"
        for item in review["transfers"]:
            moved = f"{item['old_account']} -> {item['new_account']}"
            changed = f"transfer {item['index']} ({item['employee_reference']}) {moved}"
            print(printable(f"changed account {review['batch_id']}: {changed}, {who}"), file=sys.stderr)
    for total in _vrp(document)["totals"]:
        states = ", ".join(
            f"{n['payments']} {state}" + ("" if n["amount"] is None else f" {n['amount']}")
            for state, n in total["by_state"].items()
        )
        head = f"vrp total {total['mandate_id']} {total['currency']}"
        print(f"{head}: {counted(total['payments'], 'payment')} ({states})", file=sys.stderr)
    return 0


def grand_total_lines(totals: list[dict[str, Any]]) -> list[str]:
    """The payrolls submitted in the window, per currency, each transfer counted once (and its net outstanding)."""
    lines: list[str] = []
    for total in totals:
        parts = []
        for name, label in _BUCKETS:
            bucket = total[name]
            parts.append(f"{label} {bucket['transfers']} {bucket['amount']}")
        lines.append(
            f"grand total {total['currency']} ({counted(total['batches'], 'batch', 'batches')}): {', '.join(parts)}"
        )
        lines.append(f"net outstanding {total['currency']}: {total['outstanding']['amount']}")
    return lines


_BUCKETS = (
    ("paid", "paid"),
    ("failed", "failed"),
    ("outstanding", "outstanding"),
    ("in_progress", "in progress"),
    ("scheduled", "scheduled"),
    ("not_paid", "not paid"),
)
