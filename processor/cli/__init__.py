"""The `dispersion` command. Each part lives in its own module; this only dispatches."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

USAGE = """usage: dispersion COMMAND [ARGS...]

commands:
  sandbox     run the sandbox bank (`dispersion sandbox init DIR` writes keys and config)
  demo        run the local demo with the embedded defaults
  dev kafka   start a local single-node Apache Kafka (KRaft) from the Maven Central jars
  processor   run one processor instance: consumers, flow engine, outbox relay, callback API, metrics
  pay-file    run flow A for one batch without Kafka: authorization URL, redirect, result per transfer
  submit      turn an ERP payroll export (CSV or JSON) into a payroll.batches event (validated first)
  status      print status events (`--follow` as they arrive, `--batch ID` for one batch)
  topics      create the project's Kafka topics (idempotent)
  vrp         variable recurring payments: `vrp mandate`, `vrp pay`, `vrp status` (docs/vrp.md)
  console     operator console helpers: `console hash-password NAME` (docs/console.md)
  retry-failed  pay a batch's failed transfers again as ID.retry-N (admin API)
  dlq         dead letters: `dlq list`, `dlq show ID`, `dlq replay ID --reason TEXT` (admin API)
  report      per-transfer reconciliation report: `report --since T --until T [--format csv|json]`
"""


# Each command's module, imported only when the command runs (a command's dependencies load only for it; the
# development tools sit above the commands they drive, so they are named here, not imported).
MODULES: dict[str, str] = {
    "sandbox": "sandbox.cli",
    "demo": "processor.devtools.demo",
    "dev": "processor.devtools.dev",
    "submit": "processor.cli.submit",
    "status": "processor.cli.status",
    "topics": "processor.cli.topics",
    "processor": "processor.cli.service",
    "pay-file": "processor.cli.payfile",
    "vrp": "processor.cli.vrp",
    "console": "processor.cli.console",
    "retry-failed": "processor.cli.retry_failed",
    "dlq": "processor.cli.dlq",
    "report": "processor.cli.report",
}


def _command(name: str) -> Callable[[list[str]], int]:
    run: Callable[[list[str]], int] = importlib.import_module(MODULES[name]).main
    return run


def main(argv: list[str] | None = None) -> int:
    """Run a `dispersion` subcommand."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] not in MODULES:
        print(f"dispersion: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return _command(args[0])(args[1:])
