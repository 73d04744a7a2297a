"""The checks of an export read into batches, as the processor will make them, with every problem named by where
it is in the file: business validation (`processor.domain.validation`), the batch id, the integration, the day to
pay on. `read_message` reads and checks an ISO 20022 `pain.001` the same way, block by block.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Final

from processor.domain.batch import PayrollBatch
from processor.domain.money import money_text
from processor.domain.outcomes import batch_id_problem
from processor.domain.schedule import Calendar
from processor.domain.validation import DEFAULT_LIMITS, Reason, ValidationLimits, validate
from processor.exports.layout import Export, Problem
from processor.exports.pain001 import Pain001Error, batches, explain, read_pain001, totals_problems


def check(
    export: Export,
    *,
    integrations: Collection[str] | None = None,
    limits: ValidationLimits = DEFAULT_LIMITS,
    calendars: Mapping[str, Calendar] | None = None,
    now: datetime | None = None,
) -> list[Problem]:
    """Business validation (`processor.domain.validation`) with each bad row named by its line; empty when valid.
    With `now`, an `execute_on` is checked as the processor will check it (the integration's calendar, else UTC)."""
    problems: list[Problem] = list(export.problems)
    batch = export.batch
    unfit = batch_id_problem(batch.batch_id)
    if unfit is not None:
        problems.append(Problem(None, "batch_id", unfit))
    if integrations is not None and batch.integration not in integrations:
        known = ", ".join(sorted(integrations)) or "none"
        problems.append(Problem(None, "integration", f"{batch.integration!r} is not configured (configured: {known})"))
    if now is not None:
        late = (calendars or {}).get(batch.integration, Calendar()).problem(batch.execute_on, now)
        if late is not None:
            problems.append(Problem(None, "execute_on", late))
    for issue in validate(batch, limits).issues:
        if issue.index is None:
            problems.append(Problem(None, issue.field, f"{issue.reason.value}: {issue.message}"))
            continue
        if issue.index in export.unreadable_amounts and (
            issue.field == "amount" or issue.reason is Reason.DUPLICATE_TRANSFER
        ):
            continue  # already reported as unreadable (its value is unknown, so it is no known duplicate either)
        line = export.lines[issue.index] if export.lines is not None else None
        where = "" if line is not None else f"transactions[{issue.index}]."
        name = export.labels.get(issue.field, issue.field)
        message = f"{issue.reason.value}: {issue.message} (transaction {issue.index})"
        problems.append(Problem(line, f"{where}{name}", message, export.unit))
    problems.sort(key=lambda p: (p.line is not None, p.line or 0))  # the file as a whole first, then by line
    return problems


def control_sum(batch: PayrollBatch) -> Decimal:
    """The exact total of the amounts."""
    return sum((t.amount for t in batch.transactions), Decimal(0))


def batch_summary(batch: PayrollBatch) -> str:
    """`batch ID: N transactions, control sum S CUR[, to be paid on DAY]`: what a valid batch is, in one line."""
    text = (
        f"batch {batch.batch_id}: {len(batch.transactions):,} transactions, control sum "
        f"{money_text(control_sum(batch))} {batch.origin.currency}"
    )
    if batch.execute_on is not None:
        text += f", to be paid on {batch.execute_on.isoformat()}"
    return text


SHOWN_PROBLEMS: Final = 50  # printed one by one; the rest are summed up per column


def problem_summary(problems: list[Problem]) -> list[str]:
    """The closing lines: how many problems in how many rows, per column when there are many, and a hint when
    one column fails on nearly every row (a wrong profile or number format, not 300 wrong rows)."""
    rows = {p.line for p in problems if p.line is not None}
    lines: list[str] = []
    if len(problems) > SHOWN_PROBLEMS:
        lines.append(f"... and {len(problems) - SHOWN_PROBLEMS} more problem(s) like those")
    per_field = Counter(p.field for p in problems if p.line is not None)
    if len(per_field) > 1 and len(problems) > 10:
        lines.append("problems per column: " + ", ".join(f"{name} {n}" for name, n in per_field.most_common()))
    if per_field:
        field, count = per_field.most_common(1)[0]
        if count >= 10 and count >= 0.9 * len(rows):
            lines.append(
                f"{field} is refused on {count} of {len(rows)} rows: is it the right --profile, column or number "
                "format (1.234,56 or 1,234.56)? `--dry-run --explain` shows how each cell was read"
            )
    lines.append(f"dispersion submit: {len(problems)} problem(s); nothing was produced")
    return lines


@dataclass(frozen=True)
class Read:
    """The batches of a message, or every problem found in it."""

    batches: list[PayrollBatch]
    problems: list[str]
    explanation: list[str]


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
