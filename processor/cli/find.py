"""`dispersion find`: "EMP-0018 was not paid": an employee's transfers by employee reference, the last digits of
the account or the amount, each with its final outcome across its payroll's retries (through the admin API).

    dispersion find --employee EMP-0018 | --account 4321 | --amount 1500.50  [--limit N] [--format text|json]

One line per transfer, newest batch first: batch, transfer number, employee, masked account, amount and currency,
the outcome (`paid` or `paid by ID.retry-2`, `outstanding: <the bank's reason>`, `in progress`, `not paid`) and
the payday of a scheduled batch. Given options must all match.

Exit status: 0 found; 1 nothing found; 2 usage or configuration (no token, processor not reachable).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from processor.cli.admin_client import AdminClient, AdminRefusalError, add_arguments
from processor.cli.common import CliError


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion find`."""
    p = argparse.ArgumentParser(prog="dispersion find", description="Find an employee's transfers and outcomes.")
    p.add_argument("--employee", help="the employee reference (exact, any case)")
    p.add_argument("--account", help="the last digits of the destination account (at least 4)")
    p.add_argument("--amount", help="the amount (1500.50)")
    p.add_argument("--limit", type=int, default=50, help="at most this many transfers (default 50)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    add_arguments(p)
    return p


def line(found: dict[str, Any]) -> str:
    """One transfer as a line of text."""
    outcome = {"PAID": "paid", "OUTSTANDING": "outstanding", "IN_PROGRESS": "in progress", "NOT_PAID": "not paid"}
    text = outcome.get(str(found.get("outcome")), str(found.get("outcome") or "unknown"))
    if found.get("outcome") in ("PAID", "IN_PROGRESS") and found.get("by") not in (None, found["batch_id"]):
        text += f" {'by' if found['outcome'] == 'PAID' else 'in'} {found['by']}"
    if found.get("outcome") == "OUTSTANDING" and found.get("reason"):
        text += f": {found['reason']}"
    payday = f"  payday {found['execute_on']}" if found.get("execute_on") else ""
    return (
        f"{found['batch_id']}  #{found['index']}  {found.get('employee_reference') or '-'}  {found['account']}"
        f"  {found['amount']} {found['currency']}  {text}{payday}"
    )


def main(argv: list[str]) -> int:
    """`dispersion find`."""
    p = parser()
    args = p.parse_args(argv)
    params = {k: v for k, v in (("employee", args.employee), ("account", args.account), ("amount", args.amount)) if v}
    if not params:
        p.error("give --employee, --account or --amount")
    if not 1 <= args.limit <= 500:
        p.error("--limit must be from 1 to 500")
    try:
        client = AdminClient.from_args(args)
        answer = client.call("GET", "/find", params={**params, "limit": str(args.limit)})
    except CliError as exc:
        print(f"dispersion find: {exc}", file=sys.stderr)
        return 2
    except AdminRefusalError as exc:
        print(f"dispersion find: {exc}", file=sys.stderr)
        return 2 if exc.status == 400 else 1
    transfers = answer["transfers"]
    if args.format == "json":
        json.dump(answer, sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
    else:
        for found in transfers:
            print(line(found))
        if not transfers:
            print("no transfer matches", file=sys.stderr)
    return 0 if transfers else 1
