"""The benchmark scripts, imported as modules for the tests of their pure parts."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def benchmark_script() -> Callable[[str], ModuleType]:
    """Imports a script of benchmarks/ by its name."""

    def load(name: str) -> ModuleType:
        sys.path.insert(0, str(BENCHMARKS))  # the scripts import each other by module name, as when run
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(str(BENCHMARKS))

    return load
