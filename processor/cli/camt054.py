"""`dispersion camt054`: ISO 20022 debit notifications (camt.054) for the ledger, through the admin API.

    dispersion camt054 --since T --until T [--version 02|08] [--output FILE] [--accounts clear|masked]

The batches are those `dispersion report` lists for the same window (ended in [since, until)): one notification
per origin account and currency, one entry per batch that paid anything (batch booking), one transaction detail
per paid transfer (EndToEndId, amount, creditor account masked by default or `--accounts clear`). Its totals are
the report's `amount_completed`. Valid against ISO's schema (docs/operations.md, "ISO 20022 for the ERP and the
ledger").

Exit status: 0 written; 1 refused by the processor; 2 usage.
"""

from __future__ import annotations

import argparse

from processor.cli.admin_client import add_arguments
from processor.cli.pain002 import fetch


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion camt054`."""
    p = argparse.ArgumentParser(prog="dispersion camt054", description="camt.054 debit notifications.")
    p.add_argument("--since", required=True, help="from this time (ISO 8601 with offset), inclusive")
    p.add_argument("--until", required=True, help="to this time, exclusive")
    p.add_argument("--version", choices=("02", "08"), default="08", help="camt.054.001.08 (default) or .02")
    p.add_argument("--output", "-o", help="write to this file (default: standard output)")
    p.add_argument(
        "--accounts", choices=("clear", "masked"), default="masked", help="creditor accounts (default masked)"
    )
    add_arguments(p)
    return p


def main(argv: list[str]) -> int:
    """`dispersion camt054`."""
    args = parser().parse_args(argv)
    params = {"since": args.since, "until": args.until, "version": args.version, "accounts": args.accounts}
    return fetch("camt054", args, "/camt054", params)
