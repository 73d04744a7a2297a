"""`dispersion pain002`: a batch's ISO 20022 status report (pain.002) for the ERP, through the admin API.

    dispersion pain002 --batch ID [--version 03|10] [--output FILE] [--config C] [--url URL]

The report names the original message and payment-information ids (a batch read from a pain.001 is
`MsgId/PmtInfId`), the group status (ACCP waiting, ACSC all paid, PART, RJCT) and one TxInfAndSts per transfer
with its OrgnlEndToEndId, ACSC/RJCT and the bank's reason code; a transfer a retry paid names the retry. It is
valid against ISO's schema (docs/operations.md, "ISO 20022 for the ERP and the ledger").

Exit status: 0 written; 1 refused by the processor (an unknown batch); 2 usage.
"""

from __future__ import annotations

import argparse
import sys

from processor.cli.admin_client import AdminClient, AdminRefusalError, add_arguments
from processor.cli.common import CliError


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion pain002`."""
    p = argparse.ArgumentParser(prog="dispersion pain002", description="A batch's pain.002 status report.")
    p.add_argument("--batch", required=True, help="the batch id (a pain.001's batches are MsgId/PmtInfId)")
    p.add_argument("--version", choices=("03", "10"), default="03", help="pain.002.001.03 (default) or .10")
    p.add_argument("--output", "-o", help="write to this file (default: standard output)")
    add_arguments(p)
    return p


def write_document(name: str, document: bytes, output: str | None) -> None:
    """The document to `output`, else to standard output."""
    if output:
        with open(output, "wb") as out:
            out.write(document)
        print(f"dispersion {name}: wrote {len(document):,} bytes to {output}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(document)
        sys.stdout.flush()


def fetch(name: str, args: argparse.Namespace, path: str, params: dict[str, str]) -> int:
    """GET an admin API document and write it (`--output`); the exit status of `pain002` and `camt054`."""
    try:
        document = AdminClient.from_args(args).document(path, params=params)
    except CliError as exc:
        print(f"dispersion {name}: {exc}", file=sys.stderr)
        return 2
    except AdminRefusalError as exc:
        print(f"dispersion {name}: {exc}", file=sys.stderr)
        return 2 if exc.status == 400 else 1
    write_document(name, document, args.output)
    return 0


def main(argv: list[str]) -> int:
    """`dispersion pain002`."""
    args = parser().parse_args(argv)
    return fetch("pain002", args, f"/batches/{args.batch}/pain002", {"version": args.version})
