"""A first run shows the console (issue 20 point 6): `dispersion sandbox init` writes `[console]` and `[admin]`
with fresh secrets that it prints once (the file keeps only their hashes, and the processor's own readers accept
them); the processor names the console's address when it is ready, or says how to turn it on."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from processor.api.console.auth import console_auth
from processor.cli.config import load_config
from processor.cli.service import console_line
from sandbox.init import main as sandbox_init


def test_sandbox_init_writes_console_and_admin_with_secrets_shown_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sandbox_init([str(tmp_path / "dev"), "--redirect-uri", "http://127.0.0.1:8600/callback"]) == 0
    out = capsys.readouterr().out
    console = re.search(r"operator console: (\S+) \(sign in as (\S+), password (\S+)\)", out)
    token = re.search(r"export DISPERSION_ADMIN_TOKEN=(\S+)", out)
    assert console is not None and token is not None, out
    assert console.group(1) == "http://127.0.0.1:8600/console/"
    path = tmp_path / "dev" / "dispersion.toml"
    text = path.read_text()
    assert console.group(3) not in text and token.group(1) not in text  # only hashes are kept

    config = load_config(path, environ={})
    auth = console_auth(config.console)
    assert auth is not None and auth.check_password(console.group(2), console.group(3))
    assert not auth.check_password(console.group(2), "not the password")
    personal = config.admin.by_name[console.group(2)]
    assert personal.sha256 == hashlib.sha256(token.group(1).encode()).hexdigest() and personal.role == "admin"
    assert auth.operators[console.group(2)].role == "admin"
    assert console_line(auth, config.public_url, str(path)) == (
        f"console: http://127.0.0.1:8600/console/ (operators: {console.group(2)})"
    )

    # Run again (--force): new secrets, the old ones no longer work.
    assert sandbox_init([str(tmp_path / "dev"), "--force"]) == 0
    again = load_config(path, environ={})
    renewed = console_auth(again.console)
    assert renewed is not None and not renewed.check_password(console.group(2), console.group(3))


def test_without_operators_the_processor_says_how_to_turn_the_console_on() -> None:
    line = console_line(None, "http://127.0.0.1:8600", "/etc/dispersion.toml")
    assert line == "console: off (no [console] operators in /etc/dispersion.toml; docs/console.md says how to add one)"
