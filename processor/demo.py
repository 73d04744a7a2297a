"""`dispersion demo`: the whole system on one machine, with the embedded defaults, in one command.

    dispersion demo [--dir ./demo-run] [--timeout 180] [--no-approve] [--bootstrap HOST:PORT]

It starts a real local Kafka broker (unless `--bootstrap` or `KAFKA_BOOTSTRAP_SERVERS` names one), writes a
sandbox bank configuration into the work directory (`dispersion sandbox init`, on free loopback ports), starts
the sandbox bank and one processor as child processes, creates the topics, submits an embedded sample payroll
export through `dispersion submit`, and prints the batch's status events from `dispersion.status`. When
`AUTHORIZATION_REQUIRED` arrives it opens the approval link and presses Approve on the bank's consent page, as
the approver's browser would (`--no-approve` leaves that to you: open the printed link). It ends at the batch's
terminal status, printing the result of each transfer (one is refused by the bank on purpose), stops
everything it started and exits 0 on COMPLETED, 1 otherwise. Logs of the children stay in the work directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
from confluent_kafka import Consumer, KafkaError

import schemas
from processor.approver import ApprovalError, approve
from processor.kafka_local import KafkaLocalError, LocalKafka
from processor.statuscli import as_text
from producers.kafka import BOOTSTRAP_ENV, STATUS_TOPIC

MARKER = ".dispersion-demo"
TERMINAL = {"COMPLETED", "FAILED", "REJECTED", "EXPIRED", "INVALID"}
SAMPLE_EXPORT = """\
account_number,amount,email,concept,employee_reference
200100300,1500.25,ana.lopez@example.com,Salary November 2026,E-0001
200100301,2000.00,luis.perez@example.com,Salary November 2026,E-0002
200100302,1250.75,maria.garcia@example.com,Salary November 2026,E-0003
200100303,980.10,jorge.ruiz@example.com,Salary November 2026,E-0004
200109902,750.50,eva.santos@example.com,Salary November 2026,E-0005
"""
ORIGIN_ACCOUNT = "3001234567"


class DemoError(RuntimeError):
    """A step of the demo failed; the message says which and where its log is."""


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion demo`."""
    p = argparse.ArgumentParser(prog="dispersion demo", description="Run the whole system locally on a sample.")
    p.add_argument("--dir", type=Path, default=Path("demo-run"), help="work directory (default ./demo-run)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds for the whole run (default 180)")
    p.add_argument("--no-approve", action="store_true", help="print the approval link and wait for you to approve")
    p.add_argument("--bootstrap", help=f"an existing Kafka (default: ${BOOTSTRAP_ENV}, else a local broker)")
    return p


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "processor.cli", *args]


class Children:
    """The child processes of the demo, stopped (SIGTERM, then SIGKILL) in reverse order of start."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.started: list[tuple[str, subprocess.Popen[str], IO[str]]] = []

    def start(self, name: str, args: list[str]) -> subprocess.Popen[str]:
        """Start a child with its output in `<workdir>/<name>.log`."""
        log = (self.workdir / f"{name}.log").open("w", encoding="utf-8")
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True, env=self.env)
        self.started.append((name, process, log))
        return process

    def log_of(self, name: str) -> Path:
        """Where a child's output goes."""
        return self.workdir / f"{name}.log"

    def stop_all(self) -> None:
        """Stop every child this demo started."""
        for _, process, _ in reversed(self.started):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process, log in reversed(self.started):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
            log.close()


def _prepare_workdir(workdir: Path) -> None:
    if workdir.exists():
        if not (workdir / MARKER).exists() and any(workdir.iterdir()):
            raise DemoError(f"{workdir} exists and is not a demo directory; choose another with --dir")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / MARKER).write_text("created by `dispersion demo`; removed by the next run\n", encoding="utf-8")


def _configure(workdir: Path, env: dict[str, str], sandbox_port: int, api_port: int) -> Path:
    """`dispersion sandbox init`, moved to the chosen ports; the processor configuration's path."""
    bank = workdir / "bank"
    done = subprocess.run(_cli("sandbox", "init", str(bank)), capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise DemoError(f"`dispersion sandbox init` failed: {done.stderr.strip()}")
    config = bank / "dispersion.toml"
    text = config.read_text(encoding="utf-8")
    text = text.replace("127.0.0.1:8700", f"127.0.0.1:{sandbox_port}").replace(
        "127.0.0.1:8600", f"127.0.0.1:{api_port}"
    )
    config.write_text(text, encoding="utf-8")
    clients_file = bank / "clients.json"
    clients = json.loads(clients_file.read_text(encoding="utf-8"))
    for client in clients["clients"]:
        client["redirect_uris"] = [
            u.replace("127.0.0.1:8600", f"127.0.0.1:{api_port}") for u in client["redirect_uris"]
        ]
    clients_file.write_text(json.dumps(clients, indent=2), encoding="utf-8")
    return config


def _wait_http(url: str, process: subprocess.Popen[str], log: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DemoError(f"{url} never answered: the process exited with {process.returncode}; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        time.sleep(0.2)
    raise DemoError(f"{url} did not answer in time; see {log}")


def _run_step(what: str, args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise DemoError(f"{what} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}")
    return done.stdout.strip()


def _status_events(bootstrap: str, batch_id: str, deadline: float) -> Iterator[dict[str, Any]]:
    """The batch's status events, decoded, as they arrive (until the deadline)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"dispersion-demo-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([STATUS_TOPIC])
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    print(f"  (kafka: {error})", file=sys.stderr)
                continue
            if message.key() != batch_id.encode():
                continue
            yield schemas.decode(STATUS_TOPIC, message.value() or b"")
    finally:
        consumer.close()


def _print_results(record: dict[str, Any]) -> None:
    for result in record.get("transaction_results") or []:
        reason = f"  {result['reason']}" if result.get("reason") else ""
        who = result.get("employee_reference") or "-"
        print(f"    #{result.get('index')}  {who}  {result.get('amount')}  {result.get('status')}{reason}")


def run(args: argparse.Namespace) -> int:
    """The demo; the exit status."""
    deadline = time.monotonic() + args.timeout
    workdir = args.dir.resolve()
    _prepare_workdir(workdir)
    env = {**os.environ, "DISPERSION_STORE_ALLOW_DEV_KEY": "1", "PYTHONUNBUFFERED": "1"}
    bootstrap = args.bootstrap or os.environ.get(BOOTSTRAP_ENV, "").strip()
    children = Children(workdir, env)
    kafka: LocalKafka | None = None
    try:
        if not bootstrap:
            print("starting a local Kafka broker (the first run fetches the jars with Maven)...", flush=True)
            kafka = LocalKafka(directory=workdir / "kafka")
            bootstrap = kafka.start()
        print(f"kafka: {bootstrap}")
        env[BOOTSTRAP_ENV] = bootstrap
        sandbox_port, api_port = free_port(), free_port()
        config = _configure(workdir, env, sandbox_port, api_port)
        clients = str(config.parent / "clients.json")
        sandbox_args = ["--host", "127.0.0.1", "--port", str(sandbox_port), "--clients", clients]
        bank = children.start("sandbox", _cli("sandbox", *sandbox_args, "--file-payment-delay", "1"))
        discovery = f"http://127.0.0.1:{sandbox_port}/.well-known/openid-configuration"
        _wait_http(discovery, bank, children.log_of("sandbox"), deadline)
        print(f"sandbox bank: http://127.0.0.1:{sandbox_port}  (log {children.log_of('sandbox')})")
        _run_step("creating the topics", _cli("topics", "--config", str(config), "--partitions", "3"), env)
        processor = children.start("processor", _cli("processor", "--config", str(config), "--log-format", "console"))
        _wait_http(f"http://127.0.0.1:{api_port}/healthz", processor, children.log_of("processor"), deadline)
        print(f"processor: http://127.0.0.1:{api_port}  (log {children.log_of('processor')}, metrics at /metrics)")
        export = workdir / "payroll-export.csv"
        export.write_text(SAMPLE_EXPORT, encoding="utf-8")
        batch_id = f"DEMO-{time.strftime('%Y%m%d-%H%M%S')}"
        submit_args = ["--config", str(config), str(export), "--origin-account", ORIGIN_ACCOUNT]
        submit_args += ["--origin-currency", "GTQ", "--batch-id", batch_id, "--quiet"]
        submitted = _run_step("submitting the export", _cli("submit", *submit_args), env)
        print(submitted)
        print(f"\nstatus events of {batch_id}:")
        for record in _status_events(bootstrap, batch_id, deadline):
            status = str(record.get("status"))
            print("  " + as_text(record), flush=True)
            if status == "AUTHORIZATION_REQUIRED":
                link = str(record.get("authorization_url"))
                if args.no_approve:
                    print(f"\n  open this link and approve on the bank's page:\n  {link}\n", flush=True)
                    continue
                outcome = approve(link)
                print(
                    f"  approver: pressed Approve on the bank's page {outcome.consent_page}; "
                    f"our callback API answered HTTP {outcome.callback_status}",
                    flush=True,
                )
            if status in TERMINAL:
                _print_results(record)
                print(f"\n{batch_id}: {status}")
                return 0 if status == "COMPLETED" else 1
        raise DemoError(f"no terminal status within {args.timeout:.0f} s; see {children.log_of('processor')}")
    finally:
        children.stop_all()
        if kafka is not None:
            kafka.stop()


def main(argv: list[str]) -> int:
    """Run `dispersion demo`."""
    args = parser().parse_args(argv)
    try:
        return run(args)
    except (DemoError, ApprovalError, KafkaLocalError) as exc:
        print(f"dispersion demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dispersion demo: interrupted; everything it started was stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
