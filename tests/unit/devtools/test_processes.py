"""The one process harness: children with their output, waiting for a condition, ports held while chosen."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from processor.devtools.processes import ChildExitedError, eventually, listening_socket, port_of, spawn


def test_eventually_returns_the_first_true_answer() -> None:
    answers = iter([None, 0, "", "found"])
    assert eventually(lambda: next(answers), what="an answer", timeout=5, interval=0) == "found"


def test_eventually_names_what_it_waited_for_when_time_is_up() -> None:
    calls: list[int] = []
    with pytest.raises(TimeoutError, match=r"^no the impossible within 0\.05 s$"):
        eventually(lambda: calls.append(1), what="the impossible", timeout=0.05, interval=0.01)
    assert len(calls) >= 2  # it kept asking until the time was up


def test_a_child_that_exits_ends_the_wait_with_its_output(tmp_path: Path) -> None:
    child = spawn("talker", [sys.executable, "-c", "print('about to leave')"], tmp_path / "talker.log")
    child.process.wait(30)
    with pytest.raises(ChildExitedError, match=r"the talker \(pid \d+\) exited with status 0") as caught:
        eventually(lambda: False, what="never", timeout=30, child=child)
    assert "about to leave" in str(caught.value)
    assert child.output() == "about to leave\n"
    assert child.stop() == 0


def test_stop_ends_a_child_by_its_pid(tmp_path: Path) -> None:
    child = spawn("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "sleeper.log")
    assert child.alive
    assert child.stop(timeout=10) == -15  # SIGTERM
    assert not child.alive


def test_a_held_port_cannot_be_taken_and_a_child_serves_on_it(tmp_path: Path) -> None:
    with listening_socket() as held:
        port = port_of(held)
        with socket.socket() as other, pytest.raises(OSError, match="Address already in use"):
            other.bind(("127.0.0.1", port))
        echo = (
            "import socket, sys; s = socket.socket(fileno=int(sys.argv[1])); c, _ = s.accept(); "
            "c.sendall(b'served'); c.close()"
        )
        child = spawn(
            "server", [sys.executable, "-c", echo, str(held.fileno())], tmp_path / "s.log", pass_fds=(held.fileno(),)
        )
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            assert client.recv(16) == b"served"
        assert child.process.wait(30) == 0
