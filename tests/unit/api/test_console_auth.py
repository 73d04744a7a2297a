"""The console's pure parts: the `[console]` table, passwords, sessions and CSRF tokens, masking of decoded dead
letters, the status filter's mapping; and `dispersion console hash-password` as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from bank_support import integration_table, load

from processor.api.console.auth import ConsoleAuth, ConsoleTable, Person, console_auth, hash_password
from processor.api.console.views import STATUS_STATES, shown_status
from processor.domain.masking import masked_record as masked
from processor.domain.roles import Role
from processor.domain.settings import ConfigError, Secret

PASSWORD = "correct horse battery"
STORED = hash_password(PASSWORD)


def problem(console: dict[str, object]) -> str:
    """What reading a configuration with this `[console]` table says (its problems are found at load)."""
    with pytest.raises(ConfigError) as caught:
        load({"integrations": {"sandbox": integration_table()}, "console": console})
    return str(caught.value)


def test_configuration_is_checked() -> None:
    assert console_auth(ConsoleTable()) is None  # no operator: no console
    assert console_auth(load({"integrations": {"sandbox": integration_table()}}).console) is None
    assert "console.operators.ana: not of the form" in problem({"operators": {"ana": "plain-password"}})
    assert "too weak" in problem({"operators": {"ana": "scrypt:1024:8:1:c2FsdA:aGFzaA"}})
    short = problem({"operators": {"ana": STORED}, "session_key": "short"})
    assert "console.session_key: must be at least 32 characters" in short and "'short'" not in short
    assert "console.colour: unknown key" in problem({"colour": "blue"})
    assert "console.session_hours: must be more than 0 and at most 168, got 0" in problem({"session_hours": 0})
    assert "console.session_hours: must be a number, got '8'" in problem({"session_hours": "8"})
    assert 'console.operators."a b": a name is 1-64' in problem({"operators": {"a b": STORED}})
    boss = problem({"operators": {"ana": {"password": STORED, "role": "boss"}}})
    assert "console.operators.ana.role: must be one of 'viewer', 'operator', 'approver', 'admin', got 'boss'" in boss
    colour = problem({"operators": {"ana": {"password": STORED, "role": "viewer", "colour": 1}}})
    assert "console.operators.ana.colour: unknown key; known keys: password, role" in colour
    assert "console.operators.ana: must be a table, not int" in problem({"operators": {"ana": 5}})


def test_operators_have_roles_and_the_older_form_is_an_operator() -> None:
    stored = STORED
    auth = console_auth(
        ConsoleTable(operators={"ana": stored, "bob": {"password": stored, "role": "approver"}}, session_key="k" * 40)
    )
    assert auth is not None
    assert (auth.operators["ana"].role, auth.operators["bob"].role) == (Role.OPERATOR, Role.APPROVER)
    signed = auth.session(auth.new_session("bob"))
    assert signed is not None and signed.role == Role.APPROVER and signed.actor.name == "bob"
    assert auth.stamp("ana") == auth.stamp("bob") != auth.stamp("nobody") == ""  # same password, same stamp


def test_passwords_sessions_and_csrf_tokens() -> None:
    auth = ConsoleAuth({"ana": Person(password=STORED)}, Secret("k" * 40), session_seconds=60)
    assert auth.check_password("ana", PASSWORD)
    assert not auth.check_password("ana", PASSWORD + "!")
    assert not auth.check_password("bob", PASSWORD)
    value = auth.new_session("ana", now=1000.0)
    operator = auth.session(value, now=1030.0)
    assert operator is not None and operator.name == "ana"
    assert auth.session(value, now=1061.0) is None  # expired
    body, mac = value.rsplit(".", 1)
    assert auth.session(f"{body}x.{mac}", now=1030.0) is None  # tampered
    assert auth.session("garbage", now=1030.0) is None
    assert ConsoleAuth({"ana": Person(password=STORED)}, Secret("j" * 40)).session(value, now=1030.0) is None  # key
    assert ConsoleAuth({"bob": Person(password=STORED)}, Secret("k" * 40)).session(value, now=1030.0) is None  # gone
    token = auth.csrf_token(operator.session_id)
    assert auth.csrf_ok(operator.session_id, token)
    assert not auth.csrf_ok(operator.session_id, None) and not auth.csrf_ok(operator.session_id, "")
    other = auth.session(auth.new_session("ana", now=1000.0), now=1030.0)
    assert other is not None and not auth.csrf_ok(other.session_id, token)  # another session's token


def test_decoded_dead_letters_are_masked_and_statuses_map_to_states() -> None:
    record = {"origin_account": {"account_number": "100200300"}, "transactions": [{"account_number": "2001009902"}]}
    assert masked(record) == {
        "origin_account": {"account_number": "****0300"},
        "transactions": [{"account_number": "****9902"}],
    }
    assert shown_status("AWAITING_AUTHORIZATION") == "AUTHORIZATION_REQUIRED"
    assert STATUS_STATES["AUTHORIZATION_REQUIRED"] == ("AWAITING_AUTHORIZATION",)
    assert STATUS_STATES["COMPLETED"] == ("COMPLETED",)


def test_hash_password_command_prints_a_line_the_configuration_accepts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "processor.cli", "console", "hash-password", "ana"],
        input=PASSWORD + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "[console.operators.ana]" and lines[2] == 'role = "operator"'
    assert lines[1].startswith('password = "scrypt:16384:8:1:') and PASSWORD not in done.stdout
    stored = lines[1].split('"')[1]
    auth = console_auth(ConsoleTable(operators={"ana": {"password": stored, "role": "operator"}}))
    assert auth is not None and auth.check_password("ana", PASSWORD)
    short = subprocess.run(
        [sys.executable, "-m", "processor.cli", "console", "hash-password", "ana"],
        input="short\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert short.returncode == 2 and "at least 12 characters" in short.stderr and short.stdout == ""
