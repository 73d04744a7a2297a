"""`dispersion config`: the configuration file's JSON Schema, and a check of a configuration.

    dispersion config schema                 # the JSON Schema (docs/dispersion.schema.json is this output)
    dispersion config check [--config C]     # load it as the processor would: every problem with file and line

Exit codes: 0 fine; 2 an unusable configuration (each problem on standard error).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final

EXIT_USAGE: Final = 2


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion config`."""
    p = argparse.ArgumentParser(prog="dispersion config", description="The configuration file (docs/configuration.md).")
    commands = p.add_subparsers(dest="command", required=True)
    commands.add_parser("schema", help="print the configuration's JSON Schema", description="Print the JSON Schema.")
    c = commands.add_parser(
        "check",
        help="load a configuration as the processor would and report every problem",
        description="Load a configuration (the file, its K_env keys and DISPERSION__... overrides) and check it.",
    )
    c.add_argument("--config", help="configuration file (default: $DISPERSION_CONFIG or ./dispersion.toml)")
    return p


def schema_text() -> str:
    """The JSON Schema as printed (and committed as docs/dispersion.schema.json)."""
    from processor.cli.config_models import json_schema

    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Run `dispersion config`."""
    args = parser().parse_args(argv)
    if args.command == "schema":
        sys.stdout.write(schema_text())
        return 0
    from processor.cli.config import default_config_path, load_config
    from processor.domain.settings import ConfigError

    path = args.config or default_config_path()
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    print(f"{path}: ok (integrations: {', '.join(sorted(config.integrations))})")
    return 0
