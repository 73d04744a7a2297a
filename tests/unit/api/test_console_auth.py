"""The console's pure parts: the `[console]` table, passwords, sessions and CSRF tokens, masking of decoded dead
letters, the status filter's mapping; and `dispersion console hash-password` as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from processor.api.console.auth import ConsoleAuth, Person, console_auth, hash_password
from processor.api.console.views import STATUS_STATES, shown_status
from processor.domain.masking import masked_record as masked
from processor.domain.roles import Role
from processor.domain.settings import ConfigError, Secret

PASSWORD = "correct horse battery"


def test_configuration_is_checked() -> None:
    assert console_auth({}) is None  # no operator: no console
    with pytest.raises(ConfigError, match=r"console\.operators\.ana: not of the form"):
        console_auth({"operators": {"ana": "plain-password"}})
    with pytest.raises(ConfigError, match="too weak"):
        console_auth({"operators": {"ana": "scrypt:1024:8:1:c2FsdA:aGFzaA"}})
    with pytest.raises(ConfigError, match="session_key: must be a string of at least 32"):
        console_auth({"operators": {"ana": hash_password(PASSWORD)}, "session_key": "short"})
    with pytest.raises(ConfigError, match=r"console\.colour: unknown key"):
        console_auth({"colour": "blue"})
    with pytest.raises(ConfigError, match="session_hours"):
        console_auth({"operators": {"ana": hash_password(PASSWORD)}, "session_hours": 0})
    with pytest.raises(ConfigError, match=r"console\.operators\.a b: a name"):
        console_auth({"operators": {"a b": hash_password(PASSWORD)}})
    with pytest.raises(ConfigError, match=r"console\.operators\.ana\.role: must be one of viewer, operator"):
        console_auth({"operators": {"ana": {"password": hash_password(PASSWORD), "role": "boss"}}})
    with pytest.raises(ConfigError, match=r"console\.operators\.ana\.colour: unknown key"):
        console_auth({"operators": {"ana": {"password": hash_password(PASSWORD), "role": "viewer", "colour": 1}}})


def test_operators_have_roles_and_the_older_form_is_an_operator() -> None:
    stored = hash_password(PASSWORD)
    auth = console_auth(
        {"operators": {"ana": stored, "bob": {"password": stored, "role": "approver"}}, "session_key": "k" * 40}
    )
    assert auth is not None
    assert (auth.operators["ana"].role, auth.operators["bob"].role) == (Role.OPERATOR, Role.APPROVER)
    signed = auth.session(auth.new_session("bob"))
    assert signed is not None and signed.role == Role.APPROVER and signed.actor.name == "bob"
    assert auth.stamp("ana") == auth.stamp("bob") != auth.stamp("nobody") == ""  # same password, same stamp


def test_passwords_sessions_and_csrf_tokens() -> None:
    auth = ConsoleAuth({"ana": Person(hash_password(PASSWORD))}, Secret("k" * 40), session_seconds=60)
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
    assert ConsoleAuth({"ana": Person("x")}, Secret("j" * 40)).session(value, now=1030.0) is None  # another key
    assert ConsoleAuth({"bob": Person("x")}, Secret("k" * 40)).session(value, now=1030.0) is None  # operator removed
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
    auth = console_auth({"operators": {"ana": {"password": stored, "role": "operator"}}})
    assert auth is not None and auth.check_password("ana", PASSWORD)
    short = subprocess.run(
        [sys.executable, "-m", "processor.cli", "console", "hash-password", "ana"],
        input="short\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert short.returncode == 2 and "at least 12 characters" in short.stderr and short.stdout == ""
