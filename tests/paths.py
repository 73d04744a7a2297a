"""Where things are, for tests at any depth of tests/: the repository root and the tests folder."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def child_pythonpath(here: Path) -> str:
    """PYTHONPATH for a child process started by a test in `here`: its folder, the tests' support modules, the
    repository (so the child imports this checkout, not another install)."""
    import os

    return os.pathsep.join([str(here), str(TESTS), str(ROOT)])
