"""`dispersion exports check`: validate a configuration's export profiles against sample exports.

    dispersion exports check [--config C] [--profile NAME] [--explain] [SAMPLE | NAME=SAMPLE ...]

Every profile (or only `--profile NAME`) is validated as a definition, then each sample is read through it
exactly as `dispersion submit --profile NAME SAMPLE --dry-run` would read it, business rules included. A plain
SAMPLE is read with every selected profile; `NAME=SAMPLE` only with that profile (a configuration with a CSV and
a workbook profile checks each against its own sample). One line per profile and sample on standard output, each
problem indented below it.

Exit codes: 0 every profile and sample is fine; 1 problems (a bad profile definition, a sample that does not read
or validate, no profiles configured); 2 bad arguments (no configuration, an unreadable configuration or sample,
an unknown profile).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from processor.exports.checks import check, control_sum
from processor.exports.layout import BatchFields, ExportError, Problem, file_defaults, settle_batch_id
from processor.exports.mapping import Explanation
from processor.exports.profile import ExportProfile, ProfileError, parse_profile
from processor.exports.profiled import explain_lines, read_profiled

EXIT_PROBLEMS: Final = 1
EXIT_USAGE: Final = 2


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion exports`."""
    p = argparse.ArgumentParser(prog="dispersion exports", description="ERP export profiles ([exports.NAME]).")
    commands = p.add_subparsers(dest="command", required=True)
    c = commands.add_parser(
        "check",
        help="validate every profile against sample exports",
        description="Validate the configuration's export profiles, and read each sample through them.",
        epilog="Exit codes: 0 all fine, 1 problems, 2 bad arguments. Profiles: docs/submit.md.",
    )
    c.add_argument("samples", nargs="*", metavar="SAMPLE", help="a sample export, or NAME=SAMPLE for one profile")
    c.add_argument("--config", help="configuration file (default: $DISPERSION_CONFIG, or ./dispersion.toml)")
    c.add_argument("--profile", help="check only this profile")
    c.add_argument("--explain", action="store_true", help="also show how the first rows of each sample were read")
    return p


def main(argv: list[str]) -> int:
    """`dispersion exports`."""
    args = parser().parse_args(argv)
    from processor.cli.config import load_config, optional_config_path
    from processor.domain.settings import ConfigError

    path = optional_config_path(args.config)
    if path is None:
        return _usage("needs a configuration (--config, $DISPERSION_CONFIG or ./dispersion.toml)")
    try:
        config = load_config(path)
    except ConfigError as exc:
        return _usage(str(exc))
    exports = config.exports
    if not isinstance(exports, Mapping) or not exports:
        print(f"{path}: no [exports.NAME] profiles are configured", file=sys.stdout)
        return EXIT_PROBLEMS
    names = sorted(str(name) for name in exports)
    if args.profile is not None and args.profile not in exports:
        return _usage(f"no profile {args.profile!r} in {path} (configured: {', '.join(names)})")
    selected = [args.profile] if args.profile is not None else names
    pairs: list[tuple[str, Path]] = []
    for sample in args.samples:
        name, _, rest = sample.partition("=")
        if rest and name in exports:
            if name in selected:
                pairs.append((name, Path(rest)))
        else:
            pairs.extend((profile, Path(sample)) for profile in selected)
    for _, file in pairs:
        if not file.is_file():
            return _usage(f"cannot read the sample {file}")
    failed = 0
    checks = 0
    for name in selected:
        samples = [file for profile_name, file in pairs if profile_name == name]
        checks += max(len(samples), 1)
        try:
            profile = parse_profile(name, exports[name])
        except ProfileError as exc:
            failed += max(len(samples), 1)
            print(f"{name}: the profile has {len(exc.problems)} problem(s)")
            for problem in exc.problems:
                print(f"  {path}: {problem}")
            continue
        if not samples:
            print(f"{name}: the profile is valid (no sample given)")
        for file in samples:
            failed += not _check_sample(profile, file, frozenset(config.integrations), explain=args.explain)
    if failed:
        print(f"exports check: problems in {failed} of {checks} check(s)")
        return EXIT_PROBLEMS
    return 0


def _check_sample(profile: ExportProfile, file: Path, integrations: frozenset[str], *, explain: bool) -> bool:
    """Read one sample as `submit --profile --dry-run` would; print the verdict; True when it is valid."""
    defaults = file_defaults(integrations)
    now = datetime.now(UTC)
    explained: list[Explanation] = []
    problems: list[Problem]
    try:
        export = read_profiled(
            file,
            profile,
            BatchFields(),
            requested_at=now.replace(microsecond=now.microsecond // 1000 * 1000),
            defaults=defaults,
            explain=explained.append,
        )
        export = settle_batch_id(export, submitted_at=now)
    except ExportError as exc:
        problems = exc.problems
        summary = None
    else:
        problems = check(export, integrations=integrations)
        batch = export.batch
        summary = f"{len(batch.transactions):,} rows, control sum {control_sum(batch)} {batch.origin.currency}"
    total = explained[0].total if explained else None
    if problems:
        print(f"{profile.name}: {file}: {len(problems)} problem(s)")
    else:
        print(f"{profile.name}: {file}: ok: {summary}" + (f"; total row {total.row} matches" if total else ""))
    if explain and explained:
        print("\n".join(f"  | {line}" for line in explain_lines(explained[0], file, profile.constants)))
    for problem in problems:
        print(f"  {problem}")
    return not problems


def _usage(message: str) -> int:
    print(f"dispersion exports: {message}", file=sys.stderr)
    return EXIT_USAGE
