"""Shared test configuration: fixture modules for the real services (Kafka, PostgreSQL, sandbox)."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.devtools.processes import listening_socket

_HERE = Path(__file__).parent
_PLUGINS = ("kafka_fixtures", "registry_fixtures", "store_fixtures")
pytest_plugins = [name for name in _PLUGINS if (_HERE / f"{name}.py").exists()]


def require(flag: str) -> bool:
    """Whether CI demands this service (a missing service then fails instead of skipping)."""
    return os.environ.get(flag, "") == "1"


@pytest.fixture
def held_socket() -> Iterator[socket.socket]:
    """A loopback listening socket held for the test: hand it to a server (`--listen-fd`, uvicorn's `sockets`), so
    no other program takes its port between choosing it and serving on it (`processes.port_of(held_socket)`)."""
    with listening_socket() as sock:
        yield sock


@pytest.fixture
def unserved_port() -> Iterator[int]:
    """A loopback port where nothing listens, held (bound, not listening) for the test so that no other program
    starts serving on it meanwhile: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


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
