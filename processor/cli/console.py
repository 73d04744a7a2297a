"""`dispersion console hash-password NAME [--role ROLE]`: the operator's table for the configuration
(docs/console.md).

    $ dispersion console hash-password ana --role approver   # asks twice; or pipe the password on stdin
    [console.operators.ana]
    password = "scrypt:16384:8:1:...:..."
    role = "approver"

The password is read from the terminal (not echoed) or, when standard input is not a terminal, from its first
line; only its scrypt hash is printed. Exit status 0, 2 on bad usage or a password shorter than 12 characters.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from processor.api.console.auth import hash_password
from processor.domain.roles import NAME_PATTERN as _NAME
from processor.domain.roles import Role

MIN_LENGTH = 12


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion console`."""
    p = argparse.ArgumentParser(prog="dispersion console", description="Operator console helpers.")
    sub = p.add_subparsers(dest="action", required=True)
    hashing = sub.add_parser("hash-password", help="print an operator's hashed password for [console] operators")
    hashing.add_argument("name", help="the operator's name (letters, digits, ._@-)")
    hashing.add_argument(
        "--role", choices=[role.value for role in Role], default=Role.OPERATOR.value, help="default: operator"
    )
    return p


def main(argv: list[str]) -> int:
    """Run `dispersion console`."""
    args = parser().parse_args(argv)
    if not _NAME.match(args.name):
        print("dispersion console: a name is 1-64 letters, digits or ._@-", file=sys.stderr)
        return 2
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            print("dispersion console: the two passwords differ", file=sys.stderr)
            return 2
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if len(password) < MIN_LENGTH:
        print(f"dispersion console: a password needs at least {MIN_LENGTH} characters", file=sys.stderr)
        return 2
    print(f'[console.operators.{args.name}]\npassword = "{hash_password(password)}"\nrole = "{args.role}"')
    return 0
