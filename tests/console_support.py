"""What the console's HTTP tests share: operators with a known password and their roles, the CSRF token's pattern."""

from __future__ import annotations

import re

from processor.api.console.auth import ConsoleAuth, ConsoleTable, console_auth, hash_password

PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def operator_auth(password: str = PASSWORD) -> ConsoleAuth:
    """Console authentication with `ana` (an operator, in the older `NAME = "scrypt:..."` form), `bob` (an
    approver) and `vera` (a viewer), all with `password`, and a fixed session key."""
    stored = hash_password(password)
    operators = {
        "ana": stored,
        "bob": {"password": stored, "role": "approver"},
        "vera": {"password": stored, "role": "viewer"},
    }
    auth = console_auth(ConsoleTable(operators=operators, session_key="k" * 40))
    assert auth is not None
    return auth
