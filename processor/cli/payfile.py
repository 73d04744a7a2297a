"""`dispersion pay-file`: flow A (a file payment) for one payroll batch, from the command line, without Kafka.

    dispersion pay-file --config dispersion.toml batch.json [--wait SECONDS]

The JSON file holds what a `payroll.batches` record holds (docs/payload.md); a `.xml` file is an ISO 20022
`pain.001` with one payment information block, read by the reader `dispersion submit` uses (docs/submit.md,
"From an ERP that speaks ISO 20022"). The command validates it (every bad
row is listed, exit status 2), stores it in the configured store (`[processor] store`), creates the consent and
uploads the file, prints the approval link, serves the callback API on the address of `[processor] public_url`
while it waits for the approver, then creates the file payment, follows it to its end and prints the result of
every transaction (the destination account masked to its last four characters).

A batch with `execute_on` is approved now and paid on that day (the integration's time zone): the command says
when, and waits (or stop it, `--wait`, and run it again on the day). The state lives in the store, so the command
can be stopped and run again: a batch id already stored is never
paid twice; the run resumes where the last one stopped, or just prints the result when the payment has ended.
Tokens and PKCE verifiers are encrypted with `DISPERSION_STORE_KEY` (docs/store.md).

Exit status: 0 COMPLETED with every transfer paid; 4 COMPLETED with failed transfers (pay them again with
`dispersion retry-failed`); 1 ended otherwise (REJECTED, EXPIRED, FAILED, INVALID); 2 bad usage or input;
3 still running when `--wait` ran out or the command was interrupted (run it again to resume).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from processor.cli.common import (
    ENDED,
    LISTEN_FD_HELP,
    USAGE,
    WAITING,
    CliError,
    callback_api,
    configure_command_logging,
    open_engine,
)
from processor.cli.config import Config
from processor.domain.batch import (
    BatchParseError,
    PayrollBatch,
    batch_from_dict,
    batch_from_stored,
    loads_exact,
)
from processor.domain.file_states import FlowState
from processor.domain.identity import document_content_sha256
from processor.domain.kinds import Kind
from processor.domain.masking import mask_account
from processor.domain.money import money_text
from processor.domain.outcomes import batch_id_problem, exit_code
from processor.domain.schedule import Calendar
from processor.domain.settings import ConfigError
from processor.domain.time import iso_ms
from processor.domain.validation import validate
from processor.engine.assembly import Engine
from processor.engine.authorization import approval_link
from processor.engine.file_events import results_of
from processor.engine.file_schedule import payment_due_at
from processor.engine.intake import accept_batch, calendars_of, readable_batch_id
from processor.kafka.records import batch_record
from processor.store import Flow, Store, StoreError
from processor.store.values import dump_json, sha256_hex
from schemas.topics import STATUS_TOPIC

POLL_SECONDS = 0.25  # how often the command looks at the flow while the worker runs it


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion pay-file`."""
    parser = argparse.ArgumentParser(
        prog="dispersion pay-file",
        description="Pay one payroll batch as an Open Banking file payment (flow A), without Kafka.",
    )
    parser.add_argument(
        "batch", type=Path, help="the batch JSON (the payroll.batches fields; - reads stdin), or a pain.001 .xml"
    )
    parser.add_argument(
        "--config", type=Path, help="configuration file (default: $DISPERSION_CONFIG or ./dispersion.toml)"
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="give up waiting after this many seconds (exit status 3; run again to resume). Default: until the "
        "payment ends or the authorization deadline passes",
    )
    parser.add_argument(
        "--listen", help="HOST:PORT to serve the callback API on while waiting (default: from [processor] public_url)"
    )
    parser.add_argument("--listen-fd", type=int, metavar="FD", help=LISTEN_FD_HELP)
    parser.add_argument(
        "--no-serve",
        action="store_true",
        help="do not serve the callback API here (another `dispersion` process serves it on the same store)",
    )
    parser.add_argument("--verbose", action="store_true", help="log the engine's steps to stderr")
    return parser


def main(argv: Sequence[str]) -> int:
    """Run `dispersion pay-file`; returns the exit status."""
    args = build_parser().parse_args(list(argv))
    if args.wait is not None and args.wait < 0:
        print("dispersion pay-file: --wait must not be negative", file=sys.stderr)
        return USAGE
    configure_command_logging(args.verbose)
    try:
        return asyncio.run(pay_file(args))
    except (CliError, ConfigError, StoreError) as exc:
        print(f"dispersion pay-file: {exc}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        print("interrupted; the state is kept: run the same command again to resume", file=sys.stderr)
        return WAITING


# -- reading and checking the batch -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchInput:
    """The batch file as read: its text (stored verbatim), the parsed document and its id."""

    text: str
    document: dict[str, Any]
    batch_id: str


def read_batch(path: Path) -> BatchInput:
    """Read the batch file (or stdin for `-`); `CliError` when it is not a JSON object with a `batch_id`."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CliError(f"cannot read {path}: {reason}") from None
    try:
        document = loads_exact(text)
    except ValueError as exc:
        raise CliError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CliError(f"{path} must hold a JSON object (a payroll batch)")
    batch_id = readable_batch_id(document)
    unfit = batch_id_problem(batch_id if batch_id is not None else document.get("batch_id"))
    if batch_id is None or unfit is not None:
        raise CliError(f"{path}: {unfit or 'batch_id is missing or not a non-empty string'}")
    return BatchInput(text, document, batch_id)


def batch_problems(
    document: Mapping[str, Any],
    integrations: Sequence[str],
    *,
    calendars: Mapping[str, Calendar] | None = None,
    now: datetime | None = None,
) -> list[str]:
    """Every problem of a batch document, one line each (shape problems with their path, then each bad row's
    rules, then an `execute_on` past or too far ahead at `now`); empty when the batch can be paid."""
    try:
        batch = batch_from_dict(document)
    except BatchParseError as exc:
        return [str(problem) for problem in exc.problems]
    problems: list[str] = []
    if batch.integration not in integrations:
        known = ", ".join(sorted(integrations)) or "none"
        problems.append(f"integration: {batch.integration!r} is not configured (configured: {known})")
    problems.extend(str(issue) for issue in validate(batch).issues)
    if now is not None:
        late = (calendars or {}).get(batch.integration, Calendar()).problem(batch.execute_on, now)
        if late is not None:
            problems.append(late)
    return problems


# -- the command ------------------------------------------------------------------------------------------------


def read_pain001_batch(path: Path, integrations: Sequence[str], calendars: Mapping[str, Calendar]) -> BatchInput:
    """A pain.001 with one payment information block, read as `dispersion submit` reads it (the same reader and
    checks, `processor.exports.checks.read_message`); `CliError` listing every problem, or naming the blocks of a
    message that holds several (`dispersion submit` sends each as its own batch)."""
    from processor.exports.checks import read_message

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(integrations) != 1:
        raise CliError("a pain.001 needs a configuration with exactly one integration")
    integration = integrations[0]
    now = datetime.now(UTC)
    read = read_message(
        data,
        integration=integration,
        calendar=calendars.get(integration, Calendar()),
        integrations=frozenset(integrations),
        now=now.replace(microsecond=now.microsecond // 1000 * 1000),
    )
    if read.problems:
        raise CliError(f"{path}: nothing was stored or sent to the bank:\n  " + "\n  ".join(read.problems))
    if len(read.batches) != 1:
        blocks = ", ".join(batch.batch_id for batch in read.batches)
        raise CliError(
            f"{path} holds {len(read.batches)} payment blocks ({blocks}); pay-file pays one batch: use "
            "dispersion submit, which sends each block as its own batch"
        )
    (batch,) = read.batches
    text = dump_json(batch_record(batch, source=batch.source))
    return BatchInput(text, loads_exact(text), batch.batch_id)


async def pay_file(args: argparse.Namespace) -> int:
    """Accept the batch (or find it stored), drive its flow, print the outcome; returns the exit status."""
    xml = args.batch.suffix.lower() == ".xml"
    given = None if xml else read_batch(args.batch)
    async with open_engine(args.config) as (config, store, engine):
        if given is None:
            given = read_pain001_batch(args.batch, sorted(config.integrations), calendars_of(config.integrations))
        batch_id = given.batch_id
        existing = await store.arun(lambda tx: tx.flows.get(batch_id), write=False)
        calendars = calendars_of(config.integrations)
        if existing is None:
            now = engine.ctx.clock.now()
            problems = batch_problems(given.document, list(config.integrations), calendars=calendars, now=now)
            if problems:
                print(f"batch {batch_id}: INVALID, nothing was stored or sent to the bank:")
                for problem in problems:
                    print(f"  {problem}")
                return USAGE
            result = await accept_batch(
                store, given.text, now=now, integrations=set(config.integrations), calendars=calendars
            )
            if result.flow is None or result.invalid:
                print(f"batch {batch_id}: INVALID: {result.reason}")
                return USAGE
            flow = result.flow
            print(
                f"batch {batch_id}: {flow.number_of_transactions} transactions, control sum "
                f"{_amount(flow.control_sum)} {_currency(given.document)}, integration {flow.integration}"
                + (f", to be paid on {flow.execute_on.isoformat()}" if flow.execute_on else "")
            )
        else:
            flow = existing
            same = existing.payload_sha256 in (document_content_sha256(given.document), sha256_hex(given.text))
            note = "" if same else " (the file differs from the stored batch; the stored batch counts)"
            print(f"batch {batch_id} already exists: {flow.state}{note}")
        if not flow.terminal:
            serve = not args.no_serve
            flow = await follow(
                engine, config, flow, wait=args.wait, listen=args.listen, serve=serve, listen_fd=args.listen_fd
            )
        return await report(store, engine, flow)


def _currency(document: Mapping[str, Any]) -> str:
    origin = document.get("origin_account")
    value = origin.get("currency") if isinstance(origin, Mapping) else None
    return value if isinstance(value, str) else ""


def _amount(value: Decimal | str | None) -> str:
    if value is None:
        return "?"
    return money_text(value if isinstance(value, Decimal) else Decimal(value))


async def follow(
    engine: Engine,
    config: Config,
    flow: Flow,
    *,
    wait: float | None,
    listen: str | None,
    serve: bool,
    listen_fd: int | None = None,
) -> Flow:
    """Run the flow with a single-flow worker, serving the callback API, until it ends or `wait` runs out;
    prints each step as it happens. Returns the flow as last read."""
    batch_id = flow.batch_id
    store = engine.ctx.store
    worker = engine.worker(keys=[batch_id])
    task = asyncio.create_task(worker.run(), name=f"pay-file:{batch_id}")
    loop = asyncio.get_running_loop()
    deadline = None if wait is None else loop.time() + wait
    seen: str | None = None
    try:
        async with callback_api(engine, config, listen, serve=serve, listen_fd=listen_fd):
            while True:
                flow = await store.arun(lambda tx: tx.flows.require(batch_id), write=False)
                if flow.state != seen:
                    _announce(engine, flow)
                    seen = flow.state
                if flow.terminal or (deadline is not None and loop.time() >= deadline):
                    return flow
                if task.done():
                    task.result()  # the worker loop never ends by itself: surface its error
                    return flow
                await asyncio.sleep(POLL_SECONDS)
    finally:
        await worker.stop(grace=10)
        with contextlib.suppress(Exception):
            await task


def _announce(engine: Engine, flow: Flow) -> None:
    state = flow.state
    if state == FlowState.CONSENT_CREATED:
        print(f"consent {flow.consent_id} created; uploading the file")
    elif state == FlowState.AWAITING_AUTHORIZATION:
        print(f"file uploaded; consent {flow.consent_id} awaits authorization")
        print(f"approval link: {approval_link(engine.ctx.public_url, Kind.FILE, flow.batch_id, flow.approval_token)}")
        if flow.authorization_deadline is not None:
            print(f"the link works until {iso_ms(flow.authorization_deadline)}")
        print("waiting for the approver...", flush=True)
    elif state == FlowState.AUTHORIZED:
        print(_authorized(engine, flow), flush=True)
    elif state == FlowState.INITIATED:
        print(f"file payment {flow.file_payment_id} initiated; following it", flush=True)
    sys.stdout.flush()


def _authorized(engine: Engine, flow: Flow) -> str:
    now = engine.ctx.clock.now()
    due = payment_due_at(engine.ctx, flow, now)
    if flow.execute_on is None or due <= now:
        return "authorized; creating the file payment"
    zone = engine.ctx.banks.integration(flow.integration).timezone
    return (
        f"authorized; the file payment is scheduled for {flow.execute_on.isoformat()} ({zone}) and is created from "
        f"{iso_ms(due)}: leave this running, or stop it and run the same command again on that day"
    )


# -- the result -------------------------------------------------------------------------------------------------


def result_lines(batch: PayrollBatch | None, results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The per-transaction table: index, masked destination account, amount, status, reason."""
    rows = [("#", "account", "amount", "status", "reason")]
    transfers = batch.transactions if batch is not None else ()
    for result in results:
        index = result.get("index")
        transfer = transfers[index] if isinstance(index, int) and 0 <= index < len(transfers) else None
        account = transfer.account_number if transfer is not None else None
        amount = result.get("amount")
        rows.append(
            (
                str(index),
                mask_account(account),
                _amount(amount) if amount is not None else "?",
                str(result.get("status") or "?"),
                str(result.get("reason") or ""),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for row in rows:
        index, account, amount, status, reason = row
        text = f"  {index:>{widths[0]}}  {account:<{widths[1]}}  {amount:>{widths[2]}}  {status:<{widths[3]}}  {reason}"
        lines.append(text.rstrip())
    return lines


async def report(store: Store, engine: Engine, flow: Flow) -> int:
    """Print the flow's outcome (per transaction when the bank reported them) and return the exit status."""
    batch_id = flow.batch_id
    if not flow.terminal:
        print(f"batch {batch_id}: {flow.state}, still running; run the same command again to resume")
        if flow.state == FlowState.AWAITING_AUTHORIZATION:
            print(f"approval link: {approval_link(engine.ctx.public_url, Kind.FILE, batch_id, flow.approval_token)}")
        if flow.state == FlowState.AUTHORIZED and flow.execute_on is not None:
            print(f"  {_authorized(engine, flow)}")
        if flow.last_error:
            print(f"  last error: {flow.last_error}")
        return WAITING
    stored = await store.arun(lambda tx: (tx.flows.report(batch_id), tx.flows.payload(batch_id)), write=False)
    stored_report, text = stored
    results = results_of(stored_report)
    batch = None
    if results and text is not None:
        with contextlib.suppress(ValueError):
            batch = batch_from_stored(text)
    if results:
        for line in result_lines(batch, results):
            print(line)
    events = await store.arun(lambda tx: tx.outbox.events(STATUS_TOPIC, batch_id), write=False)
    reason = next((e.payload.get("reason") for e in reversed(events) if e.status == flow.state), None)
    reason = reason or flow.last_error
    parts = [f"batch {batch_id}: {flow.state}"]
    if flow.file_payment_id:
        parts.append(f"file payment {flow.file_payment_id}")
    if flow.bank_status:
        parts.append(f"bank status {flow.bank_status}")
    if flow.number_of_transactions is not None and flow.control_sum is not None:
        parts.append(f"{flow.number_of_transactions} transactions, control sum {money_text(flow.control_sum)}")
    print(", ".join(parts))
    if results:
        settled = sum(1 for r in results if r.get("status") == "COMPLETED")
        rejected = sum(1 for r in results if r.get("status") == "FAILED")
        pending = len(results) - settled - rejected
        summary = f"summary: {settled} settled, {rejected} rejected"
        print(summary + (f", {pending} pending" if pending else ""))
    if reason:
        print(f"  reason: {reason}")
    code = exit_code(flow.state, sum(1 for r in results if r.get("status") == "FAILED"))
    return ENDED if code is None else code
