"""A real single-node Apache Kafka (KRaft) on loopback, run from the Apache Kafka jars on Maven Central.

Used by `dispersion dev kafka`, the test fixtures and the demo, so a newcomer, the tests and CI start the same
broker the same way. Two parts:

- `fetch_jars` writes a small pom depending on `org.apache.kafka:kafka_2.13` (plus a log4j2 binding so the
  broker logs to a file) and runs `mvn dependency:copy-dependencies` once into a cache folder
  (`~/.cache/dispersion/kafka-<version>/libs`, or `$DISPERSION_KAFKA_HOME/libs`). Later runs reuse it.
- `LocalKafka` writes `server.properties` into a run directory, formats the storage once
  (`kafka.tools.StorageTool format --standalone`) and runs `kafka.Kafka` as a child process in its own process
  group. Ports and data survive `stop()`/`start()`, so a restart brings back the same broker with its data.

Only processes started here are ever signalled, and only by their pid.
"""

from __future__ import annotations

import base64
import json
import logging
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

from processor.devtools.jvm_service import (
    Artifact,
    JvmOptions,
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

DEFAULT_KAFKA_VERSION = "4.3.1"
LOG4J_VERSION = "2.24.3"
DEPENDENCY_PLUGIN_VERSION = "3.8.1"
DEFAULT_HEAP = "512m"
STATE_FILE = "broker.json"
PID_FILE = "kafka.pid"

_log = logging.getLogger(__name__)


class KafkaLocalError(JvmServiceError):
    """The local broker could not be fetched, formatted, started or stopped."""


KAFKA = Artifact("DISPERSION_KAFKA_VERSION", DEFAULT_KAFKA_VERSION, "DISPERSION_KAFKA_HOME", "kafka")
kafka_version = KAFKA.version  # the version to run: $DISPERSION_KAFKA_VERSION or the pinned one
cache_home = KAFKA.home  # where a version is cached ($DISPERSION_KAFKA_HOME overrides it)


def pom_xml(version: str) -> str:
    """The pom whose runtime dependencies are exactly what the broker needs on its class path."""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by dispersion (processor/devtools/kafka_local.py): the jars of a local Apache Kafka broker. -->
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dispersion.dev</groupId>
  <artifactId>local-kafka</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <!-- Kafka logs through slf4j 1.7; this binds it to log4j2, which writes the broker's log file. -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>{LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
  <build>
    <pluginManagement>
      <plugins>
        <plugin>
          <groupId>org.apache.maven.plugins</groupId>
          <artifactId>maven-dependency-plugin</artifactId>
          <version>{DEPENDENCY_PLUGIN_VERSION}</version>
        </plugin>
      </plugins>
    </pluginManagement>
  </build>
</project>
"""


def jars_ready(home: Path) -> bool:
    """Whether `home/libs` holds a complete download (the marker is written last)."""
    return (home / "libs" / ".complete").is_file()


def fetch_jars(
    version: str | None = None,
    home: Path | None = None,
    *,
    mvn: str | None = None,
    timeout: float = 900.0,
    say: Callable[[str], None] | None = None,
) -> Path:
    """Make sure the broker's jars are cached; return the `libs` folder.

    The first call runs Maven (a few minutes on a cold Maven repository); later calls return at once. A failed or
    interrupted download leaves nothing behind that looks complete.
    """
    version = version or kafka_version()
    cache = home or cache_home(version)
    libs = cache / "libs"

    def download() -> None:
        mvn_path = find_maven(mvn, "the Kafka jars", KafkaLocalError)
        (cache / "pom.xml").write_text(pom_xml(version))
        staging = cache / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        if say:
            say(f"fetching Apache Kafka {version} jars with Maven into {libs} (first run only)")
        log_path = cache / "maven.log"
        command = [
            mvn_path,
            "-B",
            "-f",
            str(cache / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ]
        code = run_maven(command, log_path, timeout, KafkaLocalError)
        if code != 0 or not any(staging.glob("kafka_2.13-*.jar")):
            raise KafkaLocalError(f"Maven could not fetch Kafka {version} (exit {code}); see {log_path}")
        install_staged(staging, libs, version)

    return fetch_once(cache, lambda: libs if jars_ready(cache) else None, download)


def new_cluster_id() -> str:
    """A random Kafka cluster id (a UUID in URL-safe base64 without padding, as `kafka-storage random-uuid`)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):  # Kafka avoids these too: they read like a command-line option
            return text


def server_properties(directory: Path, port: int, controller_port: int, host: str = "127.0.0.1") -> str:
    """The broker's configuration: one combined broker+controller node, replication factors 1, strict topics."""
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(directory / "data"),
        # The project creates its own topics with the partitions and retention it wants; a typo in a topic name
        # must fail loudly instead of silently creating a one-partition topic.
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "10",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # Consumer groups form at once instead of waiting 3 s for more members: tests and the demo start fast.
        "group.initial.rebalance.delay.ms": "0",
    }
    body = "".join(f"{key}={value}\n" for key, value in lines.items())
    return "# Written by dispersion (processor/devtools/kafka_local.py); rewritten at every start.\n" + body


def log4j2_properties(log_file: Path) -> str:
    """log4j2 configuration: everything to one file in the run directory, nothing on the console."""
    return "\n".join(
        [
            "status = error",
            "name = dispersion-local-kafka",
            # Kafka shuts down in its own JVM shutdown hook; log4j2's hook must not close the log before that.
            "shutdownHook = disable",
            "appender.file.type = File",
            "appender.file.name = FILE",
            f"appender.file.fileName = {log_file}",
            "appender.file.append = true",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = FILE",
            "logger.request.name = kafka.request.logger",
            "logger.request.level = WARN",
            "logger.statechange.name = state.change.logger",
            "logger.statechange.level = WARN",
            "",
        ]
    )


@dataclass
class _State:
    """What must stay the same across restarts of one broker (kept in `broker.json` in the run directory)."""

    cluster_id: str
    port: int
    controller_port: int
    version: str


class LocalKafka(JvmService):
    """One local Kafka broker+controller in a run directory.

    `start()` fetches the jars if needed, formats the storage on first use and waits until the broker answers;
    `stop()` sends SIGTERM to the pid it started (SIGKILL after a timeout); `restart()` does both and keeps the
    ports and the data. Without a directory a temporary one is used and removed by `close()`.
    """

    error = KafkaLocalError
    name = "kafka"
    title = "Kafka"
    pid_file = PID_FILE

    default_heap = DEFAULT_HEAP

    artifact = KAFKA

    def __init__(
        self, directory: Path | str | None = None, *, controller_port: int | None = None, **options: Unpack[JvmOptions]
    ) -> None:
        super().__init__(directory, **options)
        self._requested_controller_port = controller_port
        self._state: _State | None = None

    # -- paths and state -------------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """Where the broker keeps its log segments and metadata."""
        return self.directory / "data"

    @property
    def log_file(self) -> Path:
        """The broker's own log (log4j2)."""
        return self.directory / "logs" / "server.log"

    @property
    def port(self) -> int:
        """The client (PLAINTEXT) port; fixed once the broker has been started."""
        return self._ensure_state().port

    @property
    def controller_port(self) -> int:
        """The KRaft controller port, recorded in the metadata log at format time: it never changes."""
        return self._ensure_state().controller_port

    @property
    def bootstrap(self) -> str:
        """`host:port` for `bootstrap.servers`."""
        return f"{self.host}:{self.port}"

    def _ensure_state(self) -> _State:
        if self._state is not None:
            return self._state
        path = self.directory / STATE_FILE
        if path.is_file() and (self.data_dir / "meta.properties").is_file():
            raw = json.loads(path.read_text())
            state = _State(
                cluster_id=str(raw["cluster_id"]),
                port=int(raw["port"]),
                controller_port=int(raw["controller_port"]),
                version=str(raw["version"]),
            )
            if self._requested_controller_port and self._requested_controller_port != state.controller_port:
                raise KafkaLocalError(
                    f"{self.directory} was formatted with controller port {state.controller_port}; "
                    "the controller port of a formatted broker cannot change"
                )
            if self._requested_port:  # the client port may move: the broker re-registers its listener
                state.port = self._requested_port
        else:
            state = _State(
                cluster_id=new_cluster_id(),
                port=self._requested_port or free_port(self.host),
                controller_port=self._requested_controller_port or free_port(self.host),
                version=self.version,
            )
        self._state = state
        return state

    def _save_state(self) -> None:
        state = self._ensure_state()
        (self.directory / STATE_FILE).write_text(json.dumps(state.__dict__, indent=2) + "\n")

    # -- commands --------------------------------------------------------------------------------------------

    def _jvm(self, main_class: str, *args: str, heap: str) -> list[str]:
        libs = fetch_jars(self.version, self.home, say=self._say)
        return [
            find_java(self._java, "Kafka", KafkaLocalError),
            f"-Xmx{heap}",
            "-Xms64m",
            # Serial GC: no background GC threads competing for the few cores of a dev machine or CI.
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.log_file.parent}",
            "-cp",
            str(libs / "*"),  # expanded by java itself, not by a shell
            main_class,
            *args,
        ]

    def _write_config(self) -> Path:
        state = self._ensure_state()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        (self.directory / "log4j2.properties").write_text(log4j2_properties(self.log_file))
        config = self.directory / "server.properties"
        config.write_text(server_properties(self.directory, state.port, state.controller_port, self.host))
        return config

    def _format_if_needed(self, config: Path) -> None:
        if (self.data_dir / "meta.properties").is_file():
            return
        state = self._ensure_state()
        command = self._jvm(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            state.cluster_id,
            "-c",
            str(config),
            "--standalone",
            heap="256m",
        )
        result = subprocess.run(command, capture_output=True, timeout=120, check=False)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode(errors="replace").strip()
            raise KafkaLocalError(f"formatting the Kafka storage failed (exit {result.returncode}):\n{output}")

    def fetch(self) -> Path:
        """Fetch the jars now (normally done by `start`)."""
        return fetch_jars(self.version, self.home, say=self._say)

    def start(self, *, detach: bool = False) -> str:
        """Start the broker (formatting the storage on first use), wait until it answers, return the bootstrap address.

        With `detach` the broker is not tied to this process's life (for `dispersion dev kafka --detach`).
        """
        if self.running:
            return self.bootstrap
        for attempt in range(3):
            fresh = not (self.data_dir / "meta.properties").is_file()
            try:
                return self._start_once(detach=detach)
            except KafkaLocalError as exc:
                # A port picked free a moment ago may be taken by now (another test session starting a broker).
                # A broker formatted just now holds no data yet: start it over on new ports.
                auto_ports = self._requested_port is None and self._requested_controller_port is None
                if not (fresh and auto_ports and "Address already in use" in str(exc)) or attempt == 2:
                    raise
                _log.warning("kafka ports were taken meanwhile; formatting again on new ports")
                shutil.rmtree(self.data_dir, ignore_errors=True)
                (self.directory / STATE_FILE).unlink(missing_ok=True)
                self._state = None
        raise AssertionError("unreachable")

    def _start_once(self, *, detach: bool) -> str:
        config = self._write_config()
        self._format_if_needed(config)
        self._save_state()
        self._launch(self._jvm("kafka.Kafka", str(config), heap=self.heap), detach=detach)
        return self.bootstrap

    def wait_until_ready(self, timeout: float) -> None:
        """Wait until a metadata request lists the broker (it is then registered, unfenced and takes topics)."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaLocalError(f"Kafka did not answer within {timeout:.0f} s; see {self.log_file}")
            cluster = self._ensure_state().cluster_id
            if _port_open(self.host, self.port) and broker_answers(
                self.bootstrap, timeout=min(5.0, remaining), cluster_id=cluster
            ):
                return
            time.sleep(0.2)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the broker wrote (console first, then its log file)."""
        parts = []
        for path in (self.console_file, self.log_file):
            if path.is_file():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path}\n" + "\n".join(text))
        return "\n".join(parts) or "(no output)"


def _port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def broker_answers(bootstrap: str, timeout: float = 5.0, cluster_id: str | None = None) -> bool:
    """Whether a Kafka metadata request to `bootstrap` lists at least one broker within `timeout` seconds.

    With `cluster_id`, only that cluster counts (not some other broker that took the port meanwhile).
    """
    from processor.kafka.clients import new_admin  # imported late: fetching jars needs no client library

    quiet = logging.getLogger("dispersion.kafka_local.librdkafka")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": quiet,
        "socket.connection.setup.timeout.ms": 2000,
    }
    admin = new_admin(config)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception:  # KafkaException while the broker is still coming up
        return False
    if cluster_id is not None and metadata.cluster_id != cluster_id:
        return False
    return len(metadata.brokers) > 0


def stop_detached(directory: Path, timeout: float = 30.0) -> bool:
    """Stop a broker that `dispersion dev kafka --detach` started in `directory`; False when none runs.

    The pid file is trusted only when that process is a `kafka.Kafka` JVM started on this directory's
    `server.properties`, so a stale pid never hits an unrelated process.
    """
    config = str(directory.resolve() / "server.properties")
    return stop_by_pid_file(directory.resolve() / PID_FILE, ("kafka.Kafka", config), timeout)
