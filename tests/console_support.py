"""What the console's HTTP tests share: an operator `ana` with a known password, the CSRF token's pattern."""

from __future__ import annotations

import re

from processor.api.console.auth import ConsoleAuth, console_auth, hash_password

PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def operator_auth() -> ConsoleAuth:
    """Console authentication with one operator, `ana` (PASSWORD), and a fixed session key."""
    auth = console_auth({"operators": {"ana": hash_password(PASSWORD)}, "session_key": "k" * 40})
    assert auth is not None
    return auth
