"""`dispersion submit FILE.xml`: an ISO 20022 `pain.001` (.001.03 or .001.09) becomes one batch per `PmtInf`.

The message is read by `processor.exports.pain001` (ISO's schema, `NbOfTxs`/`CtrlSum` at group and block level),
each block is validated like any batch, and only when every block is valid are the batches produced, one
`payroll.batches` event each. Problems name the block (`PmtInf`) and the transfer (`EndToEndId`).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from processor.cli.submit import EXIT_INVALID, EXIT_USAGE, Progress, _Context, _produce, control_sum
from processor.domain.batch import PayrollBatch
from processor.domain.money import money_text
from processor.domain.schedule import Calendar
from processor.domain.validation import DEFAULT_LIMITS, validate
from processor.exports.pain001 import Pain001Error, batches, explain, read_pain001, totals_problems

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


@dataclass(frozen=True)
class Read:
    """The batches of a message, or every problem found in it."""

    batches: list[PayrollBatch]
    problems: list[str]
    explanation: list[str]


def is_pain001(args: argparse.Namespace) -> bool:
    """The export is XML: by `--format xml`, else by its extension."""
    return bool(args.format == "xml" or (args.format is None and args.export.suffix.lower() == ".xml"))


def usage_problem(args: argparse.Namespace) -> str | None:
    """An option that cannot be combined with a pain.001, named."""
    for name, option in _FROM_THE_MESSAGE:
        if getattr(args, name) is not None:
            return f"{option} cannot be used with a pain.001 message (the message says it)"
    return None


def read_message(
    data: bytes, *, integration: str, calendar: Calendar, integrations: frozenset[str] | None, now: datetime
) -> Read:
    """Read and validate every block; `problems` is empty when all can be produced."""
    try:
        message = read_pain001(data, check_totals=False)
    except Pain001Error as exc:
        return Read([], exc.problems, [])
    found, unpayable = batches(
        message,
        integration=integration,
        requested_at=now,
        source=f"dispersion-submit {message.version}",  # pain.002 names the original message's version
        today=calendar.today(now),
    )
    problems = totals_problems(message) + unpayable
    if integrations is not None and integration not in integrations:
        known = ", ".join(sorted(integrations)) or "none"
        problems.append(f"integration: {integration!r} is not configured (configured: {known})")
    for batch in found:
        block = batch.file_reference
        late = calendar.problem(batch.execute_on, now)
        if late is not None:
            problems.append(f"PmtInf {block}: ReqdExctnDt: {late}")
        for issue in validate(batch, DEFAULT_LIMITS).issues:
            if issue.index is None:
                problems.append(f"PmtInf {block}: {issue.field}: {issue.reason.value}: {issue.message}")
                continue
            transfer = batch.transactions[issue.index]
            if issue.field == "destination_account.email" and not transfer.email:
                continue  # reported above as missing
            reference = transfer.employee_reference
            problems.append(
                f"PmtInf {block}: EndToEndId {reference} (transaction {issue.index}): {issue.field}: "
                f"{issue.reason.value}: {issue.message}"
            )
    return Read(found, problems, explain(message, found))


def submit_pain001(args: argparse.Namespace, context: _Context, progress: Progress) -> int:
    """`dispersion submit FILE.xml`: exit codes as for any export."""
    refused = usage_problem(args)
    integrations = context.integrations
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
        calendar=context.calendars.get(integration, Calendar()),
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
    summaries = [_summary(batch) for batch in read.batches]
    if args.dry_run:
        progress.done(f"valid ({time.monotonic() - started:.1f} s); --dry-run: nothing produced")
        print("\n".join(f"valid {summary}" for summary in summaries))
        return 0
    for position, (batch, summary) in enumerate(zip(read.batches, summaries, strict=True)):
        last = position == len(read.batches) - 1
        code = _produce(args, context, batch, summary, progress, started, note=last, source=batch.source)
        if code != 0:
            return code
    return 0


def _summary(batch: PayrollBatch) -> str:
    text = (
        f"batch {batch.batch_id}: {len(batch.transactions):,} transactions, control sum "
        f"{money_text(control_sum(batch))} "
        f"{batch.origin.currency}"
    )
    if batch.execute_on is not None:
        text += f", to be paid on {batch.execute_on.isoformat()}"
    return text
