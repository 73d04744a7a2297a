"""`dispersion withdraw` and `dispersion confirm-duplicate`: a person's acts on a batch, through the admin API of a
running processor (processor/api/admin_lifecycle.py).

    dispersion withdraw --batch ID --reason TEXT [--config C] [--url URL]
    dispersion confirm-duplicate --batch ID [--config C] [--url URL]

`withdraw` ends a batch whose payment was not yet asked of the bank: its approval link then answers "withdrawn by
NAME at TIME: REASON", its consent is never used, a REJECTED status event says who, when and why, and the batch id
may be submitted again with corrected content (`dispersion submit EXPORT --batch-id ID`), as a new attempt.
`confirm-duplicate` lets a batch held as a possible duplicate payroll go on to the bank.

Exit status: 0 done; 1 refused (unknown batch, already withdrawn, its payment already asked of the bank, not held);
2 usage or configuration (no token, processor not reachable).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from processor.cli.admin_client import AdminClient, AdminRefusalError, add_arguments
from processor.cli.common import CliError
from processor.domain.file_states import resubmit_hint
from processor.domain.text import printable


def parser(command: str) -> argparse.ArgumentParser:
    """Arguments of `dispersion withdraw` or `dispersion confirm-duplicate`."""
    if command == "withdraw":
        p = argparse.ArgumentParser(
            prog="dispersion withdraw",
            description="Withdraw a batch not yet initiated at the bank; its id may then be submitted again.",
        )
        p.add_argument("--batch", required=True, help="the batch to withdraw")
        p.add_argument("--reason", required=True, help="why (shown by its approval link and in its status event)")
    else:
        p = argparse.ArgumentParser(
            prog="dispersion confirm-duplicate",
            description="Confirm that a batch held as a possible duplicate payroll is to be paid.",
        )
        p.add_argument("--batch", required=True, help="the held batch")
    add_arguments(p)
    return p


def _call(command: str, args: argparse.Namespace) -> Any:
    client = AdminClient.from_args(args)
    if command == "withdraw":
        return client.call("POST", f"/batches/{args.batch}/withdraw", body={"reason": args.reason})
    return client.call("POST", f"/batches/{args.batch}/confirm-duplicate", body={})


def run(command: str, argv: list[str]) -> int:
    """Run one of the two commands."""
    args = parser(command).parse_args(argv)
    try:
        answer = _call(command, args)
    except CliError as exc:
        print(f"dispersion {command}: {exc}", file=sys.stderr)
        return 2
    except AdminRefusalError as exc:
        print(f"dispersion {command}: {exc}", file=sys.stderr)
        return 1
    batch_id = printable(str(answer["batch_id"]))
    if command == "withdraw":
        withdrawn = answer["withdrawn"]
        print(
            f"batch {batch_id} withdrawn by {printable(withdrawn['by'])} at {withdrawn['at']}: "
            f"{printable(withdrawn['reason'])}"
        )
        print(f"its approval link now refuses; to pay it with new content: {resubmit_hint(batch_id)}")
        return 0
    by, note = printable(answer["duplicate_confirmed_by"]), printable(answer["duplicate_note"])
    print(f"batch {batch_id} confirmed by {by}: {note}")
    print(f"it goes on to the bank; follow it: dispersion status --batch {batch_id} --until-terminal")
    return 0


def withdraw_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion withdraw`."""
    return parser("withdraw")


def main(argv: list[str]) -> int:
    """`dispersion withdraw`."""
    return run("withdraw", argv)
