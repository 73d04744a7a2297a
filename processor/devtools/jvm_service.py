"""What every local JVM service of `dispersion dev` shares (Kafka in `kafka_local`, the registry in `registry_local`).

- fetching Maven artifacts once into a cache folder, under a file lock, with a `.complete` marker written last;
- finding `java` and `mvn`, picking a free loopback port;
- `JvmService`: a run directory, one child JVM in its own process group (tied to our life unless detached), a pid
  file, waiting for readiness, SIGTERM then SIGKILL on `stop()`;
- stopping a detached JVM by its pid file, only when its command line proves it is ours.

Only processes started here are ever signalled, and only by their pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self, TypedDict, TypeVar

from processor.devtools.processes import die_with_parent

_log = logging.getLogger(__name__)

T = TypeVar("T")


class JvmServiceError(RuntimeError):
    """A local JVM service could not be fetched, started or stopped."""


@dataclass(frozen=True)
class Artifact:
    """Which version of a service runs and where it is cached; the environment can override both."""

    version_env: str  # names the version to run instead of the pinned one
    pinned: str
    home_env: str  # names the cache folder instead of the default one
    folder: str  # the default cache folder's name before `-<version>`

    def version(self) -> str:
        """The version to run: `$<version_env>` or the project's pinned one."""
        return os.environ.get(self.version_env) or self.pinned

    def home(self, version: str | None = None) -> Path:
        """Where `version` is cached: `$<home_env>` when set, else `~/.cache/dispersion/<folder>-<version>`."""
        override = os.environ.get(self.home_env)
        if override:
            return Path(override).expanduser()
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return base / "dispersion" / f"{self.folder}-{version or self.version()}"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock so two processes (say two test sessions) never download into the same cache at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetch_once(home: Path, ready: Callable[[], T | None], download: Callable[[], None]) -> T:
    """`ready()` when the cache in `home` is complete, else `download()` under the cache's lock first."""
    found = ready()
    if found is not None:
        return found
    with file_lock(home / ".lock"):
        found = ready()  # another process may have finished while we waited for the lock
        if found is None:
            download()
            found = ready()
    if found is None:
        raise JvmServiceError(f"the download into {home} left nothing complete behind")
    return found


def find_maven(explicit: str | None, what: str, error: type[JvmServiceError] = JvmServiceError) -> str:
    """The `mvn` to run: `explicit`, else the one on the PATH."""
    found = explicit or shutil.which("mvn")
    if not found:
        raise error(f"Maven (`mvn`) is needed once to fetch {what}; install it (apt-get install maven)")
    return found


def run_maven(
    command: list[str],
    log_path: Path,
    timeout: float,
    error: type[JvmServiceError] = JvmServiceError,
    cwd: Path | None = None,
) -> int:
    """Run Maven with its output in `log_path`; its exit code."""
    with log_path.open("wb") as log:
        try:
            result = subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False, cwd=cwd
            )
        except subprocess.TimeoutExpired as exc:
            raise error(f"Maven did not finish within {timeout:.0f} s; see {log_path}") from exc
    return result.returncode


def install_staged(staging: Path, target: Path, version: str) -> None:
    """Move a finished download into place and mark it complete (the marker last: a crash leaves no false one)."""
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / ".complete").write_text(version + "\n")


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on `host` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def find_java(explicit: str | None, what: str, error: type[JvmServiceError] = JvmServiceError) -> str:
    """The `java` to run: `explicit`, else `$JAVA_HOME/bin/java`, else the one on the PATH."""
    if explicit:
        return explicit
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise error(f"a Java runtime (17 or later) is needed to run {what}; install openjdk-17-jre")
    return found


def terminate(process: subprocess.Popen[bytes], timeout: float, name: str) -> int | None:
    """SIGTERM a child this module started, SIGKILL it after `timeout`; its exit code."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            _log.warning("%s pid %s ignored SIGTERM for %.0f s; killing it", name, process.pid, timeout)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(10)
    return process.returncode


def process_matches(pid: int, needles: tuple[str, ...]) -> bool:
    """Whether `pid` is a live process whose command line has every one of `needles` as an argument."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if "State:\tZ" in status:  # exited, waiting to be reaped
        return False
    return all(needle.encode() in cmdline for needle in needles)


def stop_by_pid_file(pid_path: Path, needles: tuple[str, ...], timeout: float = 30.0) -> bool:
    """SIGTERM (SIGKILL after `timeout`) the process named by `pid_path` when its command line holds every one of
    `needles` (so a stale pid never hits an unrelated process); False when no such process runs."""
    try:
        pid = int(pid_path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    if not process_matches(pid, needles):
        pid_path.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while process_matches(pid, needles):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.2)
    pid_path.unlink(missing_ok=True)
    return True


class JvmOptions(TypedDict, total=False):
    """The keyword arguments every `JvmService` takes (a subclass adds its own in front)."""

    port: int | None
    version: str | None
    home: Path | None
    heap: str | None
    java: str | None
    host: str
    startup_timeout: float
    say: Callable[[str], None] | None


class JvmService:
    """One local JVM service in a run directory: the child process, its pid file and its life cycle.

    Subclasses name themselves (class attributes), build the command line and say when the service is ready
    (`wait_until_ready`). Without a directory a temporary one is used and removed by `close()`.
    """

    error: ClassVar[type[JvmServiceError]] = JvmServiceError
    name: ClassVar[str] = "jvm"  # in log records and temporary folder names
    title: ClassVar[str] = "the service"  # in messages: "<title> exited with code ..."
    pid_file: ClassVar[str] = "service.pid"
    artifact: ClassVar[Artifact]  # its version and cache folder
    default_heap: ClassVar[str] = "256m"

    def __init__(
        self,
        directory: Path | str | None = None,
        *,
        port: int | None = None,
        version: str | None = None,
        home: Path | None = None,
        heap: str | None = None,
        java: str | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 120.0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self._owns_directory = directory is None
        chosen = Path(directory) if directory else Path(tempfile.mkdtemp(prefix=f"dispersion-{self.name}-"))
        self.directory = chosen.resolve()
        self.version = version or self.artifact.version()
        self.home = home or self.artifact.home(self.version)
        self.heap = heap or self.default_heap
        self.host = host
        self.startup_timeout = startup_timeout
        self._java = java
        self._say = say
        self._requested_port = port
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def console_file(self) -> Path:
        """What the JVM printed on stdout/stderr (start-up failures land here)."""
        return self.directory / "logs" / "console.log"

    @property
    def log_file(self) -> Path:
        """The service's main log (the console unless a subclass logs elsewhere)."""
        return self.console_file

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs."""
        return self._process.pid if self._process and self._process.poll() is None else None

    @property
    def running(self) -> bool:
        """Whether the JVM this object started is alive."""
        return self.pid is not None

    def wait_until_ready(self, timeout: float) -> None:
        """Wait until the service answers; raise `error` after `timeout` seconds."""
        raise NotImplementedError

    def _launch(self, command: list[str], *, detach: bool) -> None:
        """Start `command` as the service's JVM, record its pid and wait until it is ready (stopping it if not)."""
        self.console_file.parent.mkdir(parents=True, exist_ok=True)
        # PR_SET_PDEATHSIG fires when the *thread* that started the child ends, so only tie the JVM to the main
        # thread (one started from a worker thread would otherwise die with that thread).
        tie = not detach and threading.current_thread() is threading.main_thread()
        with self.console_file.open("ab") as console:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,  # its own process group: a Ctrl-C in our terminal does not reach it
                preexec_fn=die_with_parent() if tie else None,  # only calls prctl
            )
        (self.directory / self.pid_file).write_text(f"{self._process.pid}\n")
        self._launched()
        try:
            self.wait_until_ready(self.startup_timeout)
        except BaseException:
            self.stop()
            raise

    def _launched(self) -> None:
        """Called once the JVM runs, before waiting for it (a subclass records what else it needs)."""

    def _check_alive(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            code = self._process.returncode
            self._process = None
            raise self.error(f"{self.title} exited with code {code} during start-up:\n{self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the JVM this object started, SIGKILL it after `timeout`; return its exit code."""
        process = self._process
        if process is None:
            return None
        code = terminate(process, timeout, self.name)
        self._process = None
        (self.directory / self.pid_file).unlink(missing_ok=True)
        return code

    def close(self) -> None:
        """Stop the JVM and remove the run directory when this object created it."""
        self.stop()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the JVM printed."""
        if not self.console_file.is_file():
            return "(no output)"
        return "\n".join(self.console_file.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> Self:
        self.start()
        return self

    def start(self, *, detach: bool = False) -> str:
        """Start the service, wait until it is ready and return its address."""
        raise NotImplementedError

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
