"""Shared test configuration: fixture modules for the real services (Kafka, PostgreSQL, sandbox)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

_HERE = Path(__file__).parent
_PLUGINS = ("kafka_fixtures", "registry_fixtures", "store_fixtures")
pytest_plugins = [name for name in _PLUGINS if (_HERE / f"{name}.py").exists()]


def require(flag: str) -> bool:
    """Whether CI demands this service (a missing service then fails instead of skipping)."""
    return os.environ.get(flag, "") == "1"


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's Chromium for browser tests; skipped locally when absent, an error in CI."""
    for candidate in ("chromium", "chromium-browser"):
        found = shutil.which(candidate)
        if found:
            return found
    if require("DISPERSION_REQUIRE_BROWSER"):
        pytest.fail("Chromium is required (DISPERSION_REQUIRE_BROWSER=1) but not installed")
    pytest.skip("Chromium not installed (apt-get install chromium)")
