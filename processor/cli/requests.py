"""`dispersion requests`: the requests that wait for a second person (a retry with corrected accounts, a batch whose
destination accounts changed), through the admin API.

    dispersion requests list [--all] [--json]          pending requests (--all: decided ones too), oldest first
    dispersion requests approve ID                     approve one (approver or admin; never your own)
    dispersion requests decline ID                     decline one (approver or admin, or withdraw your own)

Who decides is the admin token's name (`[admin.tokens.NAME]`). Account numbers are shown masked.

Exit status: 0 done; 1 refused by the processor (403 your own request or your role, 404 unknown, 409 decided
already); 2 usage or configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from processor.cli.admin_client import AdminClient, AdminRefusalError, add_arguments
from processor.cli.common import CliError
from processor.domain.text import printable


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion requests`."""
    p = argparse.ArgumentParser(prog="dispersion requests", description="Requests that wait for a second person.")
    sub = p.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="pending requests, oldest first")
    listing.add_argument("--all", action="store_true", help="decided requests too")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    add_arguments(listing)
    for action in ("approve", "decline"):
        one = sub.add_parser(action, help=f"{action} one request")
        one.add_argument("id", help="the request's id (from list)")
        add_arguments(one)
    return p


def describe(request: dict[str, Any]) -> list[str]:
    """A request as lines of text (accounts masked, as the API gives them)."""
    head = (
        f"{request['id']}  {request['state']}  {request['kind']}  {request['batch_id']}  asked by"
        f" {request['requested_by']} at {request['requested_at']}"
    )
    if request.get("decided_by"):
        head += f"; {request['state'].lower()} by {request['decided_by']} at {request['decided_at']}"
        head += f" -> {request['outcome']}" if request.get("outcome") else ""
    lines = [head]
    for item in [*request.get("corrections", []), *request.get("changed", [])]:
        lines.append(
            f"  transfer {item['index']}  {item.get('employee_reference') or '-'}  {item['amount']}"
            f" {item.get('currency') or ''}  {item['old_account']} -> {item['new_account']}"
        )
    return [printable(line) for line in lines]


def _list(client: AdminClient, args: argparse.Namespace) -> int:
    after = 0
    while True:
        params = {"after": after, "state": None if args.all else "PENDING"}
        page = client.call("GET", "/requests", params=params)
        for request in page["requests"]:
            print(json.dumps(request, ensure_ascii=False) if args.json else "\n".join(describe(request)))
        if page["next_after"] is None:
            return 0
        after = page["next_after"]


def _decide(client: AdminClient, args: argparse.Namespace) -> int:
    decided = client.call("POST", f"/requests/{args.id}/{args.action}", body={})
    print("\n".join(describe(decided)))
    return 0


def main(argv: list[str]) -> int:
    """`dispersion requests`."""
    args = parser().parse_args(argv)
    try:
        client = AdminClient.from_args(args)
        return (_list if args.action == "list" else _decide)(client, args)
    except CliError as exc:
        print(f"dispersion requests: {exc}", file=sys.stderr)
        return 2
    except AdminRefusalError as exc:
        print(f"dispersion requests: {exc}", file=sys.stderr)
        return 1
