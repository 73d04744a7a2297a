# PYTHON_ARGCOMPLETE_OK
"""The `dispersion` command. Each part lives in its own module; this only dispatches.

Shell completion (argcomplete): `eval "$(register-python-argcomplete dispersion)"` in bash or zsh. Only when the
shell asks for completions is the full parser of every subcommand built (`completion_parser`); a normal run
imports only the command it runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

USAGE = """usage: dispersion COMMAND [ARGS...] | dispersion --version

commands:
  sandbox     run the sandbox bank (`dispersion sandbox init DIR` writes keys and config)
  demo        run the local demo with the embedded defaults
  dev kafka   start a local single-node Apache Kafka (KRaft) from the Maven Central jars
  dev registry
              start a local schema registry (Apicurio Registry, in memory) from Maven Central
  processor   run one processor instance: consumers, flow engine, outbox relay, callback API, metrics
  pay-file    run flow A for one batch without Kafka: authorization URL, redirect, result per transfer
  submit      turn an ERP payroll export (CSV, JSON, or any layout via --profile) into a payroll.batches event
  exports     `exports check`: validate the [exports.NAME] profiles against sample exports
  status      print status events (`--follow` as they arrive, `--batch ID` for one batch)
  topics      create the project's Kafka topics (idempotent)
  vrp         variable recurring payments: `vrp mandate`, `vrp pay`, `vrp status` (docs/vrp.md)
  console     operator console helpers: `console hash-password NAME` (docs/console.md)
  retry-failed  pay a batch's failed transfers again as ID.retry-N (admin API)
  withdraw    withdraw a batch not yet initiated at the bank: `withdraw --batch ID --reason TEXT` (admin API)
  confirm-duplicate  let a batch held as a possible duplicate payroll go to the bank (admin API)
  dlq         dead letters: `dlq list`, `dlq show ID`, `dlq replay ID --reason TEXT` (admin API)
  report      reconciliation report and money totals: `report --since DAY [--until DAY] [--format csv|json]`
  requests    requests for a second person: `requests list`, `requests approve ID`, `requests decline ID`
  audit       the audit trail of operator actions: `audit --since T` (admin API)
  find        an employee's transfers and their outcome: `find --employee REF | --account LAST4 | --amount A`
  pain002     a batch's ISO 20022 status report for the ERP: `pain002 --batch ID [--version 03|10] [--output F]`
  camt054     ISO 20022 debit notifications for the ledger: `camt054 --since T --until T [--accounts clear|masked]`
  config      `config check`: load a configuration and report its problems; `config schema`: its JSON Schema
"""


# Each command's module, imported only when the command runs (a command's dependencies load only for it; the
# development tools sit above the commands they drive, so they are named here, not imported).
MODULES: dict[str, str] = {
    "sandbox": "sandbox.cli",
    "demo": "processor.devtools.demo",
    "dev": "processor.devtools.dev",
    "submit": "processor.cli.submit",
    "exports": "processor.cli.exports",
    "status": "processor.cli.status",
    "topics": "processor.cli.topics",
    "processor": "processor.cli.service",
    "pay-file": "processor.cli.payfile",
    "vrp": "processor.cli.vrp",
    "console": "processor.cli.console",
    "retry-failed": "processor.cli.retry_failed",
    "withdraw": "processor.cli.withdraw",
    "confirm-duplicate": "processor.cli.confirm_duplicate",
    "dlq": "processor.cli.dlq",
    "report": "processor.cli.report",
    "requests": "processor.cli.requests",
    "audit": "processor.cli.audit",
    "find": "processor.cli.find",
    "pain002": "processor.cli.pain002",
    "camt054": "processor.cli.camt054",
    "config": "processor.cli.config_command",
}


def _command(name: str) -> Callable[[list[str]], int]:
    run: Callable[[list[str]], int] = importlib.import_module(MODULES[name]).main
    return run


def dispersion_version() -> str:
    """`dispersion <version>` of the installed distribution."""
    try:
        return f"dispersion {version('dispersion')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "dispersion (not installed)"


# Each subcommand's own argparse parser, by module and factory; nested commands as (name, module, factory).
_PARSERS: dict[str, tuple[str, str]] = {
    "sandbox": ("sandbox.cli", "build_parser"),
    "demo": ("processor.devtools.demo", "parser"),
    "processor": ("processor.cli.service", "parser"),
    "pay-file": ("processor.cli.payfile", "build_parser"),
    "submit": ("processor.cli.submit", "parser"),
    "exports": ("processor.cli.exports", "parser"),
    "status": ("processor.cli.status", "parser"),
    "topics": ("processor.cli.topics", "parser"),
    "vrp": ("processor.cli.vrp", "build_parser"),
    "config": ("processor.cli.config_command", "parser"),
    "withdraw": ("processor.cli.withdraw", "withdraw_parser"),
    "confirm-duplicate": ("processor.cli.confirm_duplicate", "parser"),
}
_NESTED: dict[str, tuple[str, str, str]] = {
    "dev": ("kafka", "processor.devtools.dev", "kafka_parser"),
    "sandbox": ("init", "sandbox.init", "build_parser"),
}


def _factory(module: str, name: str) -> Callable[[], argparse.ArgumentParser]:
    factory: Callable[[], argparse.ArgumentParser] = getattr(importlib.import_module(module), name)
    return factory


def completion_parser() -> argparse.ArgumentParser:
    """One argparse parser over every subcommand (their own parsers as parents), for shell completion."""
    top = argparse.ArgumentParser(prog="dispersion")
    top.add_argument("--version", action="version", version=dispersion_version())
    commands = top.add_subparsers(dest="command")
    for name in MODULES:
        parents = [_factory(*_PARSERS[name])()] if name in _PARSERS else []
        sub = commands.add_parser(name, parents=parents, add_help=not parents)
        if name in _NESTED:
            nested, module, factory = _NESTED[name]
            sub.add_subparsers(dest="sub").add_parser(nested, parents=[_factory(module, factory)()], add_help=False)
    return top


def main(argv: list[str] | None = None) -> int:
    """Run a `dispersion` subcommand."""
    if argv is None and "_ARGCOMPLETE" in os.environ:  # the shell asks for completions: answer and exit
        import argcomplete

        argcomplete.autocomplete(completion_parser())
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        print(dispersion_version())
        return 0
    if args[0] not in MODULES:
        print(f"dispersion: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return _command(args[0])(args[1:])
