"""`dispersion audit`: the audit trail of operator actions since a time, through the admin API.

    dispersion audit --since 2026-11-01T00:00:00Z [--json]

One line per entry, oldest first: time, who (the signed-in operator or the admin token's name), role, action, on
what, and its details (account numbers masked), with where it came from.

Exit status: 0 printed; 1 refused by the processor; 2 usage or configuration.
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
    """Arguments of `dispersion audit`."""
    p = argparse.ArgumentParser(prog="dispersion audit", description="The audit trail of operator actions.")
    p.add_argument("--since", required=True, help="from this time (ISO 8601 with offset), inclusive")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    add_arguments(p)
    return p


def line(entry: dict[str, Any]) -> str:
    """An audit entry as one line of text."""
    detail = dict(entry["detail"])
    via = detail.pop("via", "")
    shown = " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(detail.items()))
    where = " ".join(filter(None, (via, entry.get("address"))))
    text = (
        f"{entry['at']}  {entry['actor']} ({entry['role'] or '-'})  {entry['action']}  {entry['subject'] or '-'}"
        f"  {shown}  [{where}]"
    )
    return printable(text)


def main(argv: list[str]) -> int:
    """`dispersion audit`."""
    args = parser().parse_args(argv)
    try:
        client = AdminClient.from_args(args)
        after = 0
        while True:
            page = client.call("GET", "/audit", params={"since": args.since, "after": after})
            for entry in page["entries"]:
                print(json.dumps(entry, ensure_ascii=False) if args.json else line(entry))
            if page["next_after"] is None:
                return 0
            after = page["next_after"]
    except CliError as exc:
        print(f"dispersion audit: {exc}", file=sys.stderr)
        return 2
    except AdminRefusalError as exc:
        print(f"dispersion audit: {exc}", file=sys.stderr)
        return 1
