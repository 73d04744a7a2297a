"""The `dispersion` command. Each part lives in its own module; this only dispatches."""

from __future__ import annotations

import sys
from collections.abc import Callable

USAGE = """usage: dispersion COMMAND [ARGS...]

commands:
  sandbox     run the sandbox bank (`dispersion sandbox init DIR` writes keys and config)
  demo        run the local demo with the embedded defaults
  dev kafka   start a local single-node Apache Kafka (KRaft) from the Maven Central jars
"""


def _sandbox(argv: list[str]) -> int:
    from sandbox.cli import main as sandbox_main

    return sandbox_main(argv)


def _demo(argv: list[str]) -> int:
    from processor.demo import main as demo_main

    return demo_main(argv)


def _dev(argv: list[str]) -> int:
    from processor.dev import main as dev_main

    return dev_main(argv)


COMMANDS: dict[str, Callable[[list[str]], int]] = {"sandbox": _sandbox, "demo": _demo, "dev": _dev}


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
