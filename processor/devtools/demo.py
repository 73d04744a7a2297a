"""`dispersion demo`: the whole system on one machine, end to end, in one command.

    dispersion demo [--dir ./demo-run] [--timeout 180] [--no-approve] [--keep] [--bootstrap HOST:PORT] [--registry]

(`--timeout` defaults to 180 s, or 900 s with `--no-approve`.)

Steps, each printed as it happens:

1. Kafka: a local single-node KRaft broker from the Maven Central jars (`processor.devtools.kafka_local`, the broker of
   `dispersion dev kafka`), unless a broker is given (`--bootstrap` or `KAFKA_BOOTSTRAP_SERVERS`). On a given
   broker the demo uses topics and a consumer group of its own (`demo.<run>.payroll.batches`, ...), so it never
   mixes with what else that broker carries.
   With `--registry` the demo runs in the Confluent wire format: a local schema registry (Apicurio Registry, the
   registry of `dispersion dev registry`) is started as well, unless `DISPERSION_SCHEMA_REGISTRY_URL` names one.
2. `dispersion sandbox init` into the work directory, on free loopback ports (not the fixed 8600/8700), then the
   processor configuration is rewritten: SQLite store in the work directory, the broker (and the registry with
   `wire_format = "confluent"`), quick engine timings.
3. The sandbox bank (`dispersion sandbox`, file payments settle after 1 s) and one processor
   (`dispersion processor`, with `DISPERSION_STORE_ALLOW_DEV_KEY=1`) as child processes; the topics are created
   (`dispersion topics`' code).
4. An embedded payroll export (5 employees; one account ends in 9902, which the sandbox bank rejects as a closed
   account) is written to `payroll-export.csv` and submitted through `dispersion submit`'s code.
5. `dispersion.status` is followed; on AUTHORIZATION_REQUIRED the approval link is printed and approved on the
   bank's consent page as a browser would (`processor.devtools.approver`), unless `--no-approve` (then open the link
   yourself). Every status event is printed until the batch's final status, with the per-transaction results.
   The operator console (docs/console.md) is served by the processor: its address and a sign-in made for this
   run (operator `demo`, a random password) are printed once the processor is ready.
6. Everything the demo started is stopped (SIGTERM by pid, SIGKILL if ignored), also on failure or Ctrl-C;
   with `--keep`, only at Ctrl-C (or SIGTERM) after the batch ended, so the console can be looked at.

Exit status: 0 the batch COMPLETED (with `--keep`: and then Ctrl-C or SIGTERM came);
1 a step failed, the batch ended otherwise or the timeout passed (the message
says which, and where the logs are); 2 bad arguments; 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import secrets
import shutil
import signal
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final

from processor.devtools.demo_services import DemoError, Progress, Services
from processor.devtools.processes import ChildExitedError, listening_socket, port_of

DEFAULT_DIR: Final = "demo-run"
DEFAULT_TIMEOUT: Final = 180.0
MANUAL_TIMEOUT: Final = 900.0  # with --no-approve a person has to open the link
MARKER: Final = ".dispersion-demo"  # a work directory holding it was made by the demo and may be emptied
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
ORIGIN_ACCOUNT: Final = "3001234567"
ORIGIN_CURRENCY: Final = "GTQ"
INTEGRATION: Final = "sandbox"
CONSOLE_OPERATOR: Final = "demo"
FINAL_STATUSES: Final = frozenset({"COMPLETED", "FAILED", "REJECTED", "EXPIRED", "INVALID"})

# The ERP's export: one row per employee. The account ending in 9902 is refused by the sandbox bank (AC04, closed
# account; docs/sandbox.md, "Deterministic failures"), to show a per-transaction failure in a completed payment.
SAMPLE_EXPORT: Final = """\
employee_reference,account_number,account_type,amount,currency,email,concept
E-1001,2001002001,SAVINGS,8500.00,GTQ,ana.lopez@example.com,Payroll November
E-1002,2001002002,SAVINGS,7250.50,GTQ,bruno.diaz@example.com,Payroll November
E-1003,2001002003,MONETARY,12000.00,GTQ,carla.mendez@example.com,Payroll November
E-1004,2001009902,SAVINGS,6100.25,GTQ,diego.ruiz@example.com,Payroll November
E-1005,2001002005,SAVINGS,9375.75,GTQ,elena.soto@example.com,Payroll November
"""

# Quick engine timings, so the demo does not wait on production back-offs (docs/engine.md, `[engine]`).
DEMO_ENGINE: Final[Mapping[str, float]] = {
    "idle_interval": 0.2,
    "poll_first": 0.5,
    "poll_max": 2.0,
    "retry_first": 0.5,
    "retry_max": 5.0,
}


class _Interrupted(BaseException):
    """Ctrl-C or SIGTERM: unwind so that every child is stopped on the way out."""


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise _Interrupted


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion demo`."""
    p = argparse.ArgumentParser(
        prog="dispersion demo",
        description="Run Kafka, the sandbox bank and a processor locally, submit a sample payroll export, approve "
        "it on the bank's consent page and print every status event until the batch completes.",
    )
    p.add_argument("--dir", type=Path, default=Path(DEFAULT_DIR), help=f"work directory (default ./{DEFAULT_DIR})")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds for the whole run (default {DEFAULT_TIMEOUT:.0f}; {MANUAL_TIMEOUT:.0f} with --no-approve)",
    )
    p.add_argument("--no-approve", action="store_true", help="print the approval link and wait for you to open it")
    p.add_argument("--bootstrap", help="use this Kafka broker (default: $KAFKA_BOOTSTRAP_SERVERS, else start one)")
    p.add_argument(
        "--registry",
        action="store_true",
        help="Confluent wire format with a schema registry ($DISPERSION_SCHEMA_REGISTRY_URL, else a local one)",
    )
    p.add_argument(
        "--keep", action="store_true", help="after the batch ended, keep everything running until Ctrl-C (console)"
    )
    return p


# -- small helpers ------------------------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def toml_document(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """A TOML document from `{"table.name": {key: value}}`; nested mappings become sub-tables."""
    lines: list[str] = []

    def table(name: str, values: Mapping[str, Any]) -> None:
        lines.append(f"[{name}]")
        nested: list[tuple[str, Mapping[str, Any]]] = []
        for key, value in values.items():
            if isinstance(value, Mapping):
                nested.append((f"{name}.{json.dumps(key)}", value))
            else:
                lines.append(f"{json.dumps(key)} = {_toml_value(value)}")
        lines.append("")
        for sub, sub_values in nested:
            table(sub, sub_values)

    for name, values in tables.items():
        table(name, values)
    return "\n".join(lines)


def demo_config(
    generated: Mapping[str, Any],
    *,
    directory: Path,
    public_url: str,
    bootstrap: str,
    topics: Mapping[str, str],
    group_id: str,
    registry_url: str | None = None,
    console: Mapping[str, Any] | None = None,
    admin: Mapping[str, Any] | None = None,
) -> str:
    """The processor configuration for the demo: `sandbox init`'s, with the demo's store, broker and timings (the
    Confluent wire format when a registry is given, the `[console]` table when given)."""
    integrations = generated.get("integrations")
    if not isinstance(integrations, Mapping) or INTEGRATION not in integrations:
        raise DemoError(f"`dispersion sandbox init` wrote no [integrations.{INTEGRATION}] table")
    kafka: dict[str, Any] = {"bootstrap_servers": bootstrap, "group_id": group_id}
    if registry_url:
        kafka.update(wire_format="confluent", schema_registry_url=registry_url)
    if topics:
        kafka["topics"] = dict(topics)
    return toml_document(
        {
            "processor": {
                "store": f"sqlite:///{(directory / 'dispersion.sqlite').resolve()}",
                "public_url": public_url,
            },
            "kafka": kafka,
            "engine": dict(DEMO_ENGINE),
            **({"console": dict(console)} if console else {}),
            **({"admin": dict(admin)} if admin else {}),
            # one person runs the demo: their corrected retries are approved by themselves (the audit trail says
            # so); a production deployment keeps four eyes on (docs/operations.md, "Controls")
            **({"controls": {"four_eyes": False}} if console else {}),
            f"integrations.{INTEGRATION}": dict(integrations[INTEGRATION]),
        }
    )


def prepare_directory(directory: Path) -> Path:
    """Create the work directory, or empty one a previous demo made; refuse a foreign non-empty directory."""
    directory = directory.resolve()
    if directory.exists():
        if not directory.is_dir():
            raise DemoError(f"{directory} exists and is not a directory")
        if any(directory.iterdir()):
            if not (directory / MARKER).is_file():
                raise DemoError(f"{directory} is not empty and was not made by `dispersion demo`; pick another --dir")
            shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("made by `dispersion demo`; emptied by the next run\n")
    (directory / "logs").mkdir()
    return directory


@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield buffer


# -- the run ------------------------------------------------------------------------------------------------------


@dataclass
class Demo(Progress):
    """One run of the demo's scenario: configure, submit, follow and approve; its processes are `services`."""

    bootstrap: InitVar[str | None] = None
    registry: InitVar[bool] = False  # Confluent wire format
    registry_url: InitVar[str | None] = None  # a registry to use (else one is started when `registry`)
    approve: bool = True
    approved: bool = False
    keep: bool = False
    ended: bool = False  # the batch reached its final status (a Ctrl-C under --keep is then the normal end)
    console_password: str = field(default_factory=lambda: secrets.token_urlsafe(12), repr=False)
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    services: Services = field(init=False)

    def __post_init__(self, bootstrap: str | None, registry: bool, registry_url: str | None) -> None:
        self.services = Services(self, bootstrap=bootstrap, registry=registry, registry_url=registry_url)

    def write_config(self, bootstrap: str, api_port: int, sandbox_port: int, registry_url: str | None = None) -> Path:
        """`dispersion sandbox init` on the chosen ports, then the processor configuration rewritten for the demo."""
        from sandbox.init import main as sandbox_init

        public_url = f"http://127.0.0.1:{api_port}"
        sandbox_dir = (
            self.directory / "sandbox-bank"
        )  # not "sandbox": the children run here, and a folder of that name would shadow the package
        with _captured() as output:
            code = sandbox_init(
                [
                    str(sandbox_dir),
                    "--redirect-uri",
                    f"{public_url}/callback",
                    "--sandbox-url",
                    f"http://127.0.0.1:{sandbox_port}",
                ]
            )
        if code != 0:
            raise DemoError(f"`dispersion sandbox init` failed ({code}): {output.getvalue()}")
        generated = tomllib.loads((sandbox_dir / "dispersion.toml").read_text())
        run = secrets.token_hex(3)
        topics: dict[str, str] = {}
        group_id = "dispersion-processor"
        if self.services.kafka is None:  # a broker the demo did not start: keep to topics and a group of this run
            from schemas.topics import ALL_TOPICS

            topics = {logical: f"demo.{run}.{logical}" for logical in ALL_TOPICS}
            group_id = f"dispersion-demo-{run}"
        config = self.directory / "dispersion.toml"
        config.write_text(
            "# Written by `dispersion demo` from `dispersion sandbox init`'s file (sandbox-bank/dispersion.toml).\n"
            + demo_config(
                generated,
                directory=self.directory,
                public_url=public_url,
                bootstrap=bootstrap,
                topics=topics,
                group_id=group_id,
                registry_url=registry_url,
                console=self.console_table(),
                admin={"token_sha256": hashlib.sha256(self.admin_token.encode()).hexdigest()},
            )
        )
        config.chmod(0o600)  # it holds the client secret
        self.say(
            f"config: {self.rel(config)} (bank client registered at the sandbox, callback API {public_url}, "
            f"store {self.rel(self.directory / 'dispersion.sqlite')})"
        )
        return config

    def console_table(self) -> dict[str, Any]:
        """The `[console]` table: one operator `demo` (the admin role) with this run's password (hashed), a session
        key."""
        from processor.api.console.auth import hash_password

        return {
            "session_key": secrets.token_urlsafe(32),
            "operators": {CONSOLE_OPERATOR: {"password": hash_password(self.console_password), "role": "admin"}},
        }

    def create_topics(self, config: Path) -> None:
        """The project's topics (`dispersion topics`' code), 3 partitions each, and their registry subjects."""
        from processor.cli.topics import main as topics_main

        with _captured() as output:
            code = topics_main(["--config", str(config), "--partitions", "3", "--timeout", "30"])
        if code != 0:
            raise DemoError(f"`dispersion topics` failed ({code}): {output.getvalue().strip()}")
        names = [line.split(":", 1)[0] for line in output.getvalue().splitlines() if ":" in line]
        self.say(f"topics: {', '.join(name for name in names if not name.endswith('-value'))}")
        subjects = [name for name in names if name.endswith("-value")]
        if subjects:
            self.say(f"schema registry subjects (BACKWARD compatibility): {', '.join(subjects)}")

    def submit(self, config: Path, batch_id: str) -> Path:
        """Write the sample export and submit it (`dispersion submit`'s code)."""
        from processor.cli.submit import main as submit_main

        export = self.directory / "payroll-export.csv"
        export.write_text(SAMPLE_EXPORT)
        rows = len(SAMPLE_EXPORT.strip().splitlines()) - 1
        self.say(
            f"export: {self.rel(export)} ({rows} employees; account 2001009902 is closed at the bank, "
            "so that transfer will fail)"
        )
        argv = [
            "--config",
            str(config),
            str(export),
            "--origin-account",
            ORIGIN_ACCOUNT,
            "--origin-currency",
            ORIGIN_CURRENCY,
            "--batch-id",
            batch_id,
            "--quiet",
            "--no-wait",  # the demo follows the status events itself
        ]
        with _captured() as output:
            code = submit_main(argv)
        if code != 0:
            raise DemoError(f"`dispersion submit` failed ({code}); see the problems above")
        self.say(output.getvalue().strip())
        return export

    def follow(self, config: Path, batch_id: str) -> dict[str, Any]:
        """Print the batch's status events until its final status (approving it on the way); that event."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        import schemas
        from processor.cli.config import settings_from_config
        from processor.cli.status import as_text
        from processor.kafka.clients import new_consumer, reader_config
        from processor.kafka.wire import WireCodec
        from schemas.topics import STATUS_TOPIC

        settings = settings_from_config(str(config))
        topic = settings.topic(STATUS_TOPIC)
        codec = WireCodec(STATUS_TOPIC, settings.wire)
        consumer = new_consumer(reader_config(settings, "demo-status"))
        seen: set[str] = set()
        wanted = batch_id.encode()
        try:
            metadata = consumer.list_topics(topic, timeout=min(30.0, self.remaining("reading topic metadata")))
            info = metadata.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                raise DemoError(f"topic {topic} not found")
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in info.partitions])
            self.say(f"following {topic} for batch {batch_id}")
            while True:
                self.services.check_children()
                self.remaining(f"waiting for the status of batch {batch_id}")
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.fatal():
                        raise DemoError(f"reading {topic}: {error}")
                    continue
                if message.key() != wanted:
                    continue
                try:
                    record = codec.decode(message.value() or b"", topic)
                except schemas.SchemaError as exc:
                    raise DemoError(f"reading {topic}: {exc}") from exc
                if record["event_id"] in seen:
                    continue
                seen.add(record["event_id"])
                status = str(record["status"])
                self.say("status: " + as_text(record, details=True))
                if status == "AUTHORIZATION_REQUIRED" and record.get("authorization_url"):
                    self.on_authorization(str(record["authorization_url"]))
                if status in FINAL_STATUSES:
                    return record
        finally:
            consumer.close()

    def on_authorization(self, link: str) -> None:
        """Approve on the bank's consent page, or ask the user to."""
        if not self.approve:
            left = self.deadline - time.monotonic()
            self.say(
                f"approval link: {link}\n"
                f"open it in a browser and press Approve (or Reject) on the bank's consent page; "
                f"waiting up to {left:.0f} s (--timeout)"
            )
            return
        if self.approved:
            return
        from processor.devtools.approver import ApprovalError, approve

        self.say(f"approver: opening {link}")
        try:
            result = approve(link, decision="approve", timeout=min(30.0, self.remaining("approving")))
        except ApprovalError as exc:
            raise DemoError(f"approving on the consent page failed: {exc}") from exc
        self.approved = True
        self.say(
            f"approver: pressed Approve on the bank's consent page {result.consent_page}; the bank redirected to "
            f"{result.callback_url}, which answered {result.callback_status} ({result.callback_text[:60]})"
        )

    def run(self) -> int:
        """Every step; the exit status."""
        self.say(f"work directory {self.directory}; logs in {self.logs}")
        services = self.services
        bootstrap = services.start_kafka()
        registry_url = services.start_registry()
        # Held from now on and handed to the children (--listen-fd): no other program can take a port meanwhile.
        with listening_socket() as api_sock, listening_socket() as sandbox_sock:
            api_port = port_of(api_sock)
            config = self.write_config(bootstrap, api_port, port_of(sandbox_sock), registry_url)
            sandbox, sandbox_url = services.start_sandbox(sandbox_sock)
            self.create_topics(config)
            processor = services.start_processor(config, bootstrap, api_sock)
        services.wait_http(sandbox, f"{sandbox_url}/.well-known/openid-configuration")
        self.say(f"sandbox bank: {sandbox_url} (pid {sandbox.pid}, log {self.rel(sandbox.log_path)})")
        ready = services.wait_ready(processor)
        self.say(
            f"processor: {ready.removeprefix('processor ready: ')} (pid {processor.pid}, log "
            f"{self.rel(processor.log_path)})"
        )
        self.say(
            f"console: http://127.0.0.1:{api_port}/console/ (sign in as {CONSOLE_OPERATOR}, password "
            f"{self.console_password}); admin API token for report, find, retry-failed, dlq: "
            f"DISPERSION_ADMIN_TOKEN={self.admin_token}"
        )
        batch_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        self.submit(config, batch_id)
        final = self.follow(config, batch_id)
        status = str(final["status"])
        if status != "COMPLETED":
            reason = f" ({final['reason']})" if final.get("reason") else ""
            raise DemoError(f"batch {batch_id} ended {status}{reason}")
        results = final.get("transaction_results") or []
        paid = sum(1 for r in results if r.get("status") == "COMPLETED")
        self.say(
            f"batch {batch_id} COMPLETED: {paid} of {len(results)} transfers paid, {len(results) - paid} failed "
            f"(see the results above); control sum {final.get('control_sum')} {final.get('currency') or ''}".rstrip()
        )
        self.ended = True
        if self.keep:
            self.say(
                f"--keep: everything stays up for the console at http://127.0.0.1:{api_port}/console/; Ctrl-C ends"
            )
            while True:
                self.services.check_children()
                time.sleep(0.5)
        return EXIT_OK

    def close(self) -> None:
        """Stop every process the run started (`Services.close`); never raises."""
        self.services.close()


def main(argv: list[str]) -> int:
    """`dispersion demo`."""
    args = parser().parse_args(argv)
    if args.timeout is None:
        args.timeout = MANUAL_TIMEOUT if args.no_approve else DEFAULT_TIMEOUT
    if args.timeout <= 0:
        print("dispersion demo: --timeout must be positive", file=sys.stderr)
        return EXIT_USAGE
    try:
        directory = prepare_directory(args.dir)
    except (DemoError, OSError) as exc:
        print(f"dispersion demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    bootstrap = args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or None
    registry_url = os.environ.get("DISPERSION_SCHEMA_REGISTRY_URL", "").strip() or None
    demo = Demo(
        directory,
        args.timeout,
        approve=not args.no_approve,
        bootstrap=bootstrap,
        registry=args.registry,
        registry_url=registry_url,
        keep=args.keep,
    )
    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in handled}
    try:
        try:
            return demo.run()
        except (DemoError, ChildExitedError) as exc:
            demo.say(f"FAILED: {exc}")
            print(f"dispersion demo: {str(exc).splitlines()[0]}", file=sys.stderr)
            return EXIT_FAILED
        except _Interrupted:
            if demo.ended:  # --keep: the batch ended; Ctrl-C is how the run ends
                demo.say("stopping what the demo started")
                return EXIT_OK
            demo.say("interrupted; stopping what the demo started")
            return EXIT_INTERRUPTED
        except Exception as exc:  # anything unforeseen still ends with every child stopped and a clear message
            demo.say(f"FAILED: unexpected {type(exc).__name__}: {exc}; logs in {demo.logs}")
            print(f"dispersion demo: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        finally:
            # a second Ctrl-C must not cut the clean-up short
            for sig in handled:
                signal.signal(sig, signal.SIG_IGN)
            demo.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
