"""`submit`'s wait for the verdict: which of the two exit-7 messages the operator reads."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from processor.cli import submit_wait
from processor.cli.admin_client import AdminClient
from processor.cli.common import CliError


def _refused_url() -> str:
    """A loopback URL nobody listens on: the port of a socket bound and closed again, never listened on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_an_unreachable_admin_api_is_named_even_when_the_deadline_passes_right_after_the_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The clock reads "before the deadline" while the refused call is made and "after" at the next look: under load
    # the refusal can take that long, and the operator must still read that the API cannot be reached, not that
    # the processor has no verdict yet.
    readings: Iterator[float] = iter([0.5, 2.0, 2.0, 2.0])
    clock = SimpleNamespace(monotonic=lambda: next(readings), sleep=lambda _seconds: None)
    monkeypatch.setattr(submit_wait, "time", clock)
    client = AdminClient(_refused_url(), "t" * 32, timeout=2.0)
    with pytest.raises(CliError, match="cannot be reached"):
        submit_wait._ask(client, {"topic": "payroll.batches", "partition": 0, "offset": 0}, deadline=1.0)
