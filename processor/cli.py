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
  dev registry
              start a local schema registry (Apicurio Registry, in memory) from Maven Central
  processor   run one processor instance: consumers, flow engine, outbox relay, callback API, metrics
  pay-file    run flow A for one batch without Kafka: authorization URL, redirect, result per transfer
  submit      turn an ERP payroll export (CSV or JSON) into a payroll.batches event (validated first)
  status      print status events (`--follow` as they arrive, `--batch ID` for one batch)
  topics      create the project's Kafka topics (idempotent)
  vrp         variable recurring payments: `vrp mandate`, `vrp pay`, `vrp status` (docs/vrp.md)
"""


def _sandbox(argv: list[str]) -> int:
    from sandbox.cli import main as sandbox_main

    return sandbox_main(argv)


def _demo(argv: list[str]) -> int:
    demo_main: Callable[[list[str]], int] = importlib.import_module("processor.demo").main
    return demo_main(argv)


def _dev(argv: list[str]) -> int:
    from processor.dev import main as dev_main

    return dev_main(argv)


COMMANDS: dict[str, Callable[[list[str]], int]] = {"sandbox": _sandbox, "demo": _demo, "dev": _dev}
COMMANDS["submit"] = lambda argv: importlib.import_module("processor.submit").main(argv)
COMMANDS["status"] = lambda argv: importlib.import_module("processor.statuscli").main(argv)
COMMANDS["topics"] = lambda argv: importlib.import_module("producers.topics").main(argv)
COMMANDS["processor"] = lambda argv: importlib.import_module("processor.service").main(argv)
COMMANDS["pay-file"] = lambda argv: importlib.import_module("processor.payfile").main(argv)
COMMANDS["vrp"] = lambda argv: importlib.import_module("processor.vrpcli").main(argv)


def main(argv: list[str] | None = None) -> int:
    """Run a `dispersion` subcommand."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"dispersion: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return command(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
