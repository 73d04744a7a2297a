"""Child processes and waiting, one way for the demo, the tests and the benchmarks.

    sock = listening_socket()                       # a port held from now on: nobody can take it meanwhile
    argv = [*sandbox_argv, "--listen-fd", str(sock.fileno())]  # `dispersion sandbox` and `processor` take it
    child = spawn("sandbox", argv, log_path, pass_fds=(sock.fileno(),))
    sock.close()                                    # the child holds it now
    eventually(lambda: answers(url), what="the sandbox's answer", timeout=30, child=child)
    ...
    child.stop(timeout=10)                          # SIGTERM to its pid, SIGKILL after the timeout

A child's standard output and error go to one log file (`output()`); `eventually` polls a condition until it holds
and fails with the child's last lines when the child exited first.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

T = TypeVar("T")


class ChildExitedError(RuntimeError):
    """A child process ended while it was expected to run; the message carries the end of its output."""


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive SIGTERM if the process that started it dies (Linux only).

    Without it a test session or benchmark killed with SIGKILL would leave its children running.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    term = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, term, 0, 0, 0)

    return preexec


@dataclass
class Child:
    """A child process with its standard output and error in a log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        """Its process id."""
        return self.process.pid

    @property
    def alive(self) -> bool:
        """Still running."""
        return self.process.poll() is None

    def output(self) -> str:
        """Everything it wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""

    def tail(self, lines: int = 25) -> str:
        """Its last `lines` lines of output."""
        return "\n".join(self.output().splitlines()[-lines:]) or "(no output)"

    def check(self) -> None:
        """Raise `ChildExitedError` (with the end of its output) when it is no longer running."""
        if not self.alive:
            raise ChildExitedError(
                f"the {self.name} (pid {self.pid}) exited with status {self.process.returncode}; "
                f"last lines of {self.log_path}:\n{self.tail()}"
            )

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM to its pid, SIGKILL after `timeout` seconds; its exit status (negative: ended by that signal)."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
        return self.process.wait(10)

    def kill(self) -> int:
        """SIGKILL to its pid (a crash); its exit status."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        return self.process.wait(10)


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    pass_fds: Sequence[int] = (),
    new_session: bool = False,
    append: bool = False,
) -> Child:
    """Start `argv` with standard output and error in `log_path` (appended to with `append`) and no standard input;
    it gets SIGTERM when this process dies. `pass_fds` stay open in the child (a held listening socket);
    `new_session` keeps a terminal's Ctrl-C from reaching it (the starter stops it)."""
    with log_path.open("ab" if append else "wb") as log:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            pass_fds=tuple(pass_fds),
            start_new_session=new_session,
            preexec_fn=die_with_parent(),
        )
    return Child(name, process, log_path)


def _timed_out(what: str, timeout: float, child: Child | None) -> TimeoutError:
    tail = f"; last lines of the {child.name}'s output:\n{child.tail()}" if child is not None else ""
    return TimeoutError(f"no {what} within {timeout:g} s{tail}")


def eventually(
    check: Callable[[], T | None],
    *,
    what: str,
    timeout: float,
    interval: float = 0.05,
    child: Child | None = None,
) -> T:
    """Call `check` until it returns something true and return that; `TimeoutError` naming `what` after `timeout`
    seconds, `ChildExitedError` as soon as `child` (when given) is no longer running."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if child is not None:
            child.check()
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, child)
        time.sleep(interval)


def answers(url: str, *, timeout: float = 2.0) -> bool:
    """Whether an HTTP GET of `url` gets an answer below 500 (a server that is up and not failing)."""
    try:
        return httpx.get(url, timeout=timeout).status_code < 500
    except httpx.HTTPError:
        return False


def listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A TCP socket listening on `port` (by default one the system chooses: `port_of`), held until closed: serve on
    it in this process, or hand it to a child (`pass_fds`, `--listen-fd`). Unlike picking a free port and releasing
    it, nobody can take the port between choosing it and serving on it."""
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on accepted sockets whose protocol says TCP.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: without it split writes of an answer wait out the peer's delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def port_of(sock: socket.socket) -> int:
    """The port a bound socket holds."""
    return int(sock.getsockname()[1])
