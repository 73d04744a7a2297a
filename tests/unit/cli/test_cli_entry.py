"""The `dispersion` entry point as a process: `--version` names the installed distribution's version, and shell
completion (argcomplete, the protocol `register-python-argcomplete dispersion` uses) completes subcommands, their
options and option values from each subcommand's own parser."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from paths import ROOT


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_version_prints_the_installed_distribution_version() -> None:
    done = _run("--version")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"dispersion {version('dispersion')}\n"
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert done.stdout.split() == ["dispersion", declared]


def test_the_entry_module_is_marked_for_argcomplete() -> None:
    head = (ROOT / "processor" / "cli" / "__init__.py").read_bytes()[:1024]
    assert b"PYTHON_ARGCOMPLETE_OK" in head  # argcomplete's global completion looks for it there


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("dispersion proc", {"processor"}),
        ("dispersion --ver", {"--version"}),
        ("dispersion processor --ro", {"--role"}),
        ("dispersion processor --role ", {"all", "api"}),
        ("dispersion dev kafka --det", {"--detach"}),
        ("dispersion sandbox init --client", {"--client-id"}),
        ("dispersion vrp ", {"mandate", "pay", "status"}),
    ],
)
def test_shell_completion_answers_from_each_subcommands_parser(tmp_path: Path, line: str, expected: set[str]) -> None:
    answer = tmp_path / "completions"
    done = _run(
        env={
            "_ARGCOMPLETE": "1",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        }
    )
    assert done.returncode == 0, done.stderr
    completions = {word.strip() for word in answer.read_text().split("\v") if word.strip()}
    assert expected <= completions, completions
