"""A real schema registry on loopback: Apicurio Registry 3.0.9 from Maven Central, in-memory storage.

Used by `dispersion dev registry`, the test fixtures and `dispersion demo --registry`, so they all start the same
registry the same way (like `processor.devtools.kafka_local` for the broker). Two parts:

- `fetch_registry` runs Maven once (`dependency:copy` of `io.apicurio:apicurio-registry-app:3.0.9`, classifier
  `all`, type `tar.gz`) into a cache folder (`~/.cache/dispersion/apicurio-registry-<version>`, or
  `$DISPERSION_REGISTRY_HOME`) and unpacks it there. Later runs reuse it.
- `LocalRegistry` runs `java -jar apicurio-registry-app-<version>-runner.jar` (Java 17) as a child process in its
  own process group, on a free port of 127.0.0.1, and waits until it is ready. Its Confluent-compatible API is
  `url` (`http://127.0.0.1:PORT/apis/ccompat/v7`). Storage is in memory: a restart starts empty.

Only processes started here are ever signalled, and only by their pid.
"""

from __future__ import annotations

import shutil
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from processor.devtools.jvm_service import (
    Artifact,
    JvmService,
    JvmServiceError,
    fetch_once,
    find_java,
    find_maven,
    free_port,
    install_staged,
    run_maven,
    stop_by_pid_file,
)

DEFAULT_REGISTRY_VERSION = "3.0.9"  # 3.3.x needs Java 21
ARTIFACT = "io.apicurio:apicurio-registry-app"
CCOMPAT_PATH = "/apis/ccompat/v7"
DEFAULT_HEAP = "384m"
# maven-dependency-plugin 3.x reads the artifact's POM, whose parent (io.apicurio:apicurio-registry:3.0.9) is not on
# Maven Central, and gives up; 2.8 (Maven 3's default binding) copies the file without reading it.
COPY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:2.8:copy"
PID_FILE = "registry.pid"
URL_FILE = "registry.url"
# A property on the command line that names the run directory: how `stop` recognises its own JVM by pid.
DIR_PROPERTY = "dispersion.registry.dir"


class RegistryLocalError(JvmServiceError):
    """The local registry could not be fetched, started or stopped."""


REGISTRY = Artifact(
    "DISPERSION_REGISTRY_VERSION", DEFAULT_REGISTRY_VERSION, "DISPERSION_REGISTRY_HOME", "apicurio-registry"
)
registry_version = REGISTRY.version  # the version to run: $DISPERSION_REGISTRY_VERSION or the pinned one
cache_home = REGISTRY.home  # where a version is cached ($DISPERSION_REGISTRY_HOME overrides it)


def runner_jar(home: Path) -> Path | None:
    """The unpacked runner jar of a complete download (the marker is written last), or None."""
    app = home / "app"
    if not (app / ".complete").is_file():
        return None
    found = sorted(app.rglob("*-runner.jar"))
    return found[0] if found else None


def fetch_registry(
    version: str | None = None,
    home: Path | None = None,
    *,
    mvn: str | None = None,
    timeout: float = 900.0,
    say: Callable[[str], None] | None = None,
) -> Path:
    """Make sure the registry is downloaded and unpacked; return its runner jar.

    The first call runs Maven (about 110 MB); later calls return at once. A failed or interrupted download leaves
    nothing behind that looks complete.
    """
    version = version or registry_version()
    cache = home or cache_home(version)

    def download() -> None:
        mvn_path = find_maven(mvn, "Apicurio Registry", RegistryLocalError)
        download = cache / "download"
        shutil.rmtree(download, ignore_errors=True)
        if say:
            say(f"fetching Apicurio Registry {version} with Maven into {cache} (first run only)")
        log_path = cache / "maven.log"
        command = [
            mvn_path,
            "-B",
            COPY_PLUGIN,
            f"-Dartifact={ARTIFACT}:{version}:tar.gz:all",
            f"-DoutputDirectory={download}",
        ]
        code = run_maven(command, log_path, timeout, RegistryLocalError, cwd=cache)
        archives = sorted(download.glob("*.tar.gz"))
        if code != 0 or not archives:
            raise RegistryLocalError(f"Maven could not fetch {ARTIFACT}:{version} (exit {code}); see {log_path}")
        staging = cache / "app.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        with tarfile.open(archives[0]) as archive:
            archive.extractall(staging, filter="data")  # no absolute paths, links or devices out of the archive
        if not any(staging.rglob("*-runner.jar")):
            raise RegistryLocalError(f"{archives[0]} holds no *-runner.jar")
        install_staged(staging, cache / "app", version)
        shutil.rmtree(download, ignore_errors=True)  # the unpacked tree is what runs

    return fetch_once(cache, lambda: runner_jar(cache), download)


class LocalRegistry(JvmService):
    """One local Apicurio Registry in a run directory (logs, pid); its data lives in memory only.

    `start()` fetches it if needed and waits until it answers; `stop()` sends SIGTERM to the pid it started
    (SIGKILL after a timeout). Without a directory a temporary one is used and removed by `close()`.
    """

    error = RegistryLocalError
    name = "registry"
    title = "the registry"
    pid_file = PID_FILE

    default_heap = DEFAULT_HEAP
    port: int | None = None  # chosen by `start()`

    artifact = REGISTRY

    @property
    def console_file(self) -> Path:
        """What the registry printed (Quarkus logs to the console)."""
        return self.directory / "logs" / "registry.log"

    @property
    def base_url(self) -> str:
        """`http://host:port` of the running registry."""
        if self.port is None:
            raise RegistryLocalError("the registry has not been started")
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API, for `[kafka] schema_registry_url`."""
        return self.base_url + CCOMPAT_PATH

    def fetch(self) -> Path:
        """Fetch the registry now (normally done by `start`)."""
        return fetch_registry(self.version, self.home, say=self._say)

    def command(self, jar: Path, port: int) -> list[str]:
        """The JVM command line: in-memory storage, loopback only, a small heap and few threads."""
        return [
            find_java(self._java, "Apicurio Registry", RegistryLocalError),
            f"-Xmx{self.heap}",
            "-Xms64m",
            # Serial GC and a quick JIT: no background threads competing for the few cores of a dev machine or CI.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-D{DIR_PROPERTY}={self.directory}",
            f"-Dquarkus.http.port={port}",
            f"-Dquarkus.http.host={self.host}",
            "-Dapicurio.storage.kind=sql",
            "-Dapicurio.storage.sql.kind=h2",
            "-Dapicurio.datasource.url=jdbc:h2:mem:dispersion_registry",
            "-Dapicurio.datasource.jdbc.initial-size=2",
            "-Dapicurio.datasource.jdbc.min-size=2",
            "-jar",
            str(jar),
        ]

    def start(self, *, detach: bool = False) -> str:
        """Start the registry, wait until it is ready, return its Confluent-compatible URL.

        With `detach` the registry is not tied to this process's life (for `dispersion dev registry --detach`).
        """
        if self.running:
            return self.url
        jar = self.fetch()
        for attempt in range(3):
            port = self._requested_port or free_port(self.host)
            try:
                self.port = port
                self._launch(self.command(jar, port), detach=detach)
                return self.url
            except RegistryLocalError as exc:
                # A port picked free a moment ago may be taken by now (another session starting something).
                taken = "Port already bound" in str(exc) or "Address already in use" in str(exc)
                if self._requested_port or not taken or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _launched(self) -> None:
        (self.directory / URL_FILE).write_text(self.url + "\n")

    def wait_until_ready(self, timeout: float) -> None:
        """Wait until the readiness check is UP and the Confluent-compatible API answers."""
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as http:
            while True:
                self._check_alive()
                if time.monotonic() > deadline:
                    raise RegistryLocalError(
                        f"the registry did not get ready within {timeout:.0f} s:\n{self.log_tail()}"
                    )
                try:
                    if (
                        http.get(self.base_url + "/health/ready").status_code == 200
                        and http.get(self.url + "/subjects").status_code == 200
                    ):
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                time.sleep(0.25)


def stop_detached(directory: Path, timeout: float = 30.0) -> bool:
    """Stop a registry that `dispersion dev registry --detach` started in `directory`; False when none runs.

    The pid file is trusted only when that process is a JVM started for this very directory.
    """
    directory = directory.resolve()
    return stop_by_pid_file(directory / PID_FILE, (f"-D{DIR_PROPERTY}={directory}",), timeout)
