"""`dispersion submit FILE.xml`: an ISO 20022 `pain.001` (.001.03 or .001.09) becomes one batch per `PmtInf`.

The message is read and checked by `processor.exports.checks.read_message` (`processor.exports.pain001`: ISO's
schema, `NbOfTxs`/`CtrlSum` at group and block level; each block validated like any batch), and only when every
block is valid are the batches produced, one `payroll.batches` event each. Problems name the block (`PmtInf`) and
the transfer (`EndToEndId`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Final

from processor.cli.submit_output import EXIT_INVALID, EXIT_USAGE, Progress
from processor.domain.batch import PayrollBatch
from processor.domain.schedule import Calendar
from processor.exports.checks import batch_summary, read_message

# Produces one batch (its summary, when the command started, whether it is the message's last): an exit code.
Produce = Callable[[PayrollBatch, str, float, bool], int]

# Options that say what the message itself says: refused with a pain.001, so there is one source of truth.
_FROM_THE_MESSAGE: Final = (
    ("batch_id", "--batch-id"),
    ("file_reference", "--file-reference"),
    ("origin_account", "--origin-account"),
    ("origin_account_type", "--origin-account-type"),
    ("origin_currency", "--origin-currency"),
    ("execute_on", "--execute-on"),
    ("delimiter", "--delimiter"),
    ("encoding", "--encoding"),
    ("profile", "--profile"),
)


def is_pain001(args: argparse.Namespace) -> bool:
    """The export is XML: by `--format xml`, else by its extension."""
    return bool(args.format == "xml" or (args.format is None and args.export.suffix.lower() == ".xml"))


def usage_problem(args: argparse.Namespace) -> str | None:
    """An option that cannot be combined with a pain.001, named."""
    for name, option in _FROM_THE_MESSAGE:
        if getattr(args, name) is not None:
            return f"{option} cannot be used with a pain.001 message (the message says it)"
    return None


def submit_pain001(
    args: argparse.Namespace,
    progress: Progress,
    *,
    integrations: Collection[str] | None,
    calendars: Mapping[str, Calendar],
    produce: Produce,
) -> int:
    """`dispersion submit FILE.xml`: exit codes as for any export; each valid batch goes to `produce`."""
    refused = usage_problem(args)
    integration = args.integration or (sorted(integrations)[0] if integrations and len(integrations) == 1 else None)
    if refused is None and integration is None:
        refused = "--integration is required (the configuration does not have exactly one integration)"
    if refused is not None:
        print(f"dispersion submit: {refused}", file=sys.stderr)
        return EXIT_USAGE
    assert integration is not None
    try:
        data = args.export.read_bytes()
    except OSError as exc:
        print(f"dispersion submit: cannot read {args.export}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    started = time.monotonic()
    now = datetime.now(UTC)
    read = read_message(
        data,
        integration=integration,
        calendar=calendars.get(integration, Calendar()),
        integrations=None if integrations is None else frozenset(integrations),
        now=now.replace(microsecond=now.microsecond // 1000 * 1000),
    )
    if args.explain and read.explanation:
        print("\n".join(read.explanation))
    if read.problems:
        progress.done("")
        for problem in read.problems:
            print(problem, file=sys.stderr)
        print(f"dispersion submit: {len(read.problems)} problem(s); nothing was produced", file=sys.stderr)
        return EXIT_INVALID
    summaries = [batch_summary(batch) for batch in read.batches]
    if args.dry_run:
        progress.done(f"valid ({time.monotonic() - started:.1f} s); --dry-run: nothing produced")
        print("\n".join(f"valid {summary}" for summary in summaries))
        return 0
    for position, (batch, summary) in enumerate(zip(read.batches, summaries, strict=True)):
        last = position == len(read.batches) - 1
        code = produce(batch, summary, started, last)
        if code != 0:
            return code
    return 0
