"""`dispersion submit`: an ERP payroll export (CSV or JSON) becomes one `payroll.batches` event.

    dispersion submit --config dispersion.toml export.csv [--origin-account 3001234567 --origin-currency GTQ]
                      [--batch-id ID] [--integration NAME] [--file-reference REF] [--bootstrap HOST:PORT]
                      [--topic T] [--delimiter ';'] [--execute-on YYYY-MM-DD] [--dry-run] [--quiet]
    dispersion submit --config dispersion.toml --profile NAME FILE [--dry-run [--explain]] [options as above]

`--profile NAME` reads the ERP's own export (CSV in any encoding and number format, or `.xlsx`) through the
configuration's `[exports.NAME]` profile (`processor.exports.profiled`; docs/submit.md, "Bring your ERP's export");
`--explain` prints how its first rows were read (ERP column -> our field -> value) before the result line.
An ISO 20022 `pain.001` (`FILE.xml`) becomes one batch per payment information block (`processor.cli.submit_iso`;
docs/submit.md, "From an ERP that speaks ISO 20022").

This module is the command line and the producing; reading and checking the export is `processor.exports`
(`reading.read_export`, `checks.check`). The export is read and checked completely before anything is sent:
every unreadable or invalid row is reported (with its line in the file) and, if there is any, nothing is produced
(exit 1). A valid batch is encoded as Avro (single-object encoding, `schemas/payroll_batches.v*.avsc`), keyed by
its batch id, and produced with an idempotent producer (`acks=all`); the command returns once Kafka acknowledged
it. The CSV layout is in docs/submit.md. Progress goes to standard error; the one result line to standard output.

Exit codes: 0 produced (or valid, with `--dry-run`); 1 the export is invalid; 2 bad arguments or configuration;
3 Kafka did not acknowledge the event.
"""

from __future__ import annotations

import argparse
import codecs
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from processor.cli.submit_iso import is_pain001, submit_pain001
from processor.cli.submit_output import EXIT_INVALID, EXIT_KAFKA, EXIT_USAGE, Progress, report
from processor.cli.submit_wait import add_wait_arguments
from processor.domain.batch import PayrollBatch, iso_day
from processor.domain.duplicates import ALLOW_DUPLICATE_HEADER
from processor.domain.schedule import Calendar
from processor.domain.settings import ConfigError
from processor.exports.checks import batch_summary, check
from processor.exports.errors import ExportLimitError
from processor.exports.layout import SOURCE, BatchFields, ExportError, file_defaults
from processor.exports.mapping import Explanation
from processor.exports.profile import ExportProfile, ProfileError
from processor.exports.profiled import explain_lines, profile_named
from processor.exports.reading import read_export

if TYPE_CHECKING:
    from processor.kafka.settings import KafkaTable

__all__ = ["EXIT_INVALID", "EXIT_KAFKA", "EXIT_USAGE", "main", "parser"]


# -- command line -------------------------------------------------------------------------------------------------


def _execute_on(text: str) -> str:
    """`--execute-on`: a YYYY-MM-DD date (a bad argument, exit 2)."""
    if iso_day(text.strip()) is None:
        raise argparse.ArgumentTypeError(f"expected a date such as 2026-11-30 (YYYY-MM-DD), not {text!r}")
    return text.strip()


@dataclass
class SubmitContext:
    integrations: Collection[str] | None = None
    calendars: Mapping[str, Calendar] = field(default_factory=dict)
    config_path: str | None = None
    kafka: KafkaTable | None = None  # the configuration's [kafka] table
    exports: object = None  # the configuration's raw [exports] table


def _delimiter(text: str) -> str:
    """`--delimiter`: one character (csv.reader takes no other)."""
    if len(text) != 1:
        raise argparse.ArgumentTypeError(f"must be one character, not {text!r} (a tab is detected by itself)")
    return text


def _encoding(name: str) -> str:
    """`--encoding`: a codec Python knows (a bad argument, exit 2, rather than a traceback while reading)."""
    try:
        codecs.lookup(name)
    except LookupError:
        raise argparse.ArgumentTypeError(f"unknown encoding {name!r}") from None
    return name


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion submit`."""
    p = argparse.ArgumentParser(
        prog="dispersion submit",
        description="Turn an ERP payroll export (CSV, JSON or pain.001) into payroll.batches events; validated first.",
        epilog="CSV layout: docs/submit.md. Nothing is produced when any row is invalid.",
    )
    p.add_argument("export", type=Path, help="the export file (.csv, .json, .xlsx, or a pain.001 .xml)")
    p.add_argument("--config", help="configuration file (default: $DISPERSION_CONFIG, or ./dispersion.toml if present)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: [kafka] or $KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--topic", help="topic to produce to (default: payroll.batches, or its [kafka.topics] name)")
    p.add_argument(
        "--format",
        choices=("csv", "json", "xlsx", "xml"),
        help="default: from the extension (.json, .xlsx/.xlsm, .xml: pain.001, else csv)",
    )
    p.add_argument(
        "--delimiter", type=_delimiter, help="CSV delimiter (default: detected from the header: ',', ';' or tab)"
    )
    p.add_argument("--encoding", type=_encoding, help="CSV text encoding (default utf-8-sig: UTF-8, BOM allowed)")
    p.add_argument("--profile", help="read the export through the configuration's [exports.NAME] profile")
    p.add_argument(
        "--explain", action="store_true", help="with --profile or a pain.001: show how the first rows were read"
    )
    p.add_argument(
        "--batch-id", help="default: the batch_id column, else payroll-<SHA-256 prefix of the origin and transfers>"
    )
    p.add_argument("--integration", help="bank configuration (default: the column, or the only configured one)")
    p.add_argument("--file-reference", help="FileReference (default: the column, else the batch id)")
    p.add_argument("--origin-account", help="origin account number (default: the origin_account_number column)")
    p.add_argument("--origin-account-type", help="default: the column, else MONETARY")
    p.add_argument("--origin-currency", help="ISO 4217 code (default: the origin_currency column)")
    p.add_argument(
        "--execute-on",
        type=_execute_on,
        metavar="YYYY-MM-DD",
        help="pay on that day (the integration's time zone): approved now, paid then (default: the execute_on "
        "column, else as soon as approved)",
    )
    p.add_argument("--dry-run", action="store_true", help="read and validate only; produce nothing")
    p.add_argument("--quiet", action="store_true", help="no progress on standard error")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for Kafka's acknowledgement")
    add_wait_arguments(p)
    return p


def _context(args: argparse.Namespace) -> SubmitContext:
    from processor.cli.config import load_config, optional_config_path

    path = optional_config_path(args.config)
    if path is None:
        return SubmitContext()
    config = load_config(path)
    return SubmitContext(
        integrations=frozenset(config.integrations),
        calendars={name: integration.calendar for name, integration in config.integrations.items()},
        config_path=path,
        kafka=config.kafka,
        exports=config.exports,
    )


def _fields(args: argparse.Namespace) -> BatchFields:
    """The batch values given on the command line (they win over the file's)."""
    return BatchFields(
        batch_id=args.batch_id,
        integration=args.integration,
        file_reference=args.file_reference,
        origin_account_number=args.origin_account,
        origin_account_type=args.origin_account_type,
        origin_currency=args.origin_currency,
        execute_on=args.execute_on,
    )


def _profile(args: argparse.Namespace, exports: object, config_path: str | None) -> ExportProfile:
    """`--profile NAME [--explain]`: the profile; ConfigError (exit 2) when it cannot be used so."""
    if args.profile is None:
        raise ConfigError("--explain needs --profile NAME (an [exports.NAME] profile)")
    if config_path is None:
        raise ConfigError("--profile needs a configuration (--config, $DISPERSION_CONFIG or ./dispersion.toml)")
    clashing = [option for option in ("format", "delimiter", "encoding") if getattr(args, option) is not None]
    if clashing:
        raise ConfigError(f"--{clashing[0]} cannot be combined with --profile (set it in the profile)")
    try:
        return profile_named(exports, args.profile, config_path)
    except ProfileError as exc:
        raise ConfigError("\n".join(exc.problems)) from None


def _explainer(path: Path, profile: ExportProfile) -> Callable[[Explanation], None]:
    """`--explain`: how the first rows were read, on standard output before the result line."""

    def explain(explanation: Explanation) -> None:
        print("\n".join(explain_lines(explanation, path, profile.constants)))

    return explain


def main(argv: list[str]) -> int:
    """`dispersion submit`."""
    args = parser().parse_args(argv)
    progress = Progress(enabled=not args.quiet)
    try:
        context = _context(args)
    except ConfigError as exc:
        print(f"dispersion submit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if is_pain001(args):

        def produce(batch: PayrollBatch, summary: str, started: float, last: bool) -> int:
            return _produce(args, context, batch, summary, progress, started, note=last, source=batch.source)

        return submit_pain001(
            args, progress, integrations=context.integrations, calendars=context.calendars, produce=produce
        )
    try:
        profile = None
        if args.profile is not None or args.explain:
            profile = _profile(args, context.exports, context.config_path)
    except ConfigError as exc:
        print(f"dispersion submit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with args.export.open("rb"):
            pass  # readable: a missing or unreadable file is a bad argument (exit 2)
    except OSError as exc:
        print(f"dispersion submit: cannot read {args.export}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    started = time.monotonic()
    try:
        export = read_export(
            args.export,
            _fields(args),
            file_defaults(context.integrations),
            progress,
            kind=args.format,
            encoding=args.encoding,
            delimiter=args.delimiter,
            profile=profile,
            explain=_explainer(args.export, profile) if args.explain and profile is not None else None,
        )
    except ExportLimitError as exc:
        progress.done("")
        print(f"dispersion submit: {exc}; nothing was produced", file=sys.stderr)
        return EXIT_USAGE
    except ExportError as exc:
        report(exc.problems, progress)
        return EXIT_INVALID
    batch = export.batch
    count = len(batch.transactions)
    if export.ignored_columns:
        print(f"note: ignored column(s): {', '.join(export.ignored_columns)}", file=sys.stderr)
    progress.update(f"validating {count:,} transactions", force=True)
    problems = check(export, integrations=context.integrations, calendars=context.calendars, now=batch.requested_at)
    if problems:
        report(problems, progress)
        return EXIT_INVALID
    summary = batch_summary(batch)
    if args.dry_run:
        progress.done(f"valid ({time.monotonic() - started:.1f} s); --dry-run: nothing produced")
        print(f"valid {summary}")
        return 0
    return _produce(args, context, batch, summary, progress, started)


def _produce(
    args: argparse.Namespace,
    context: SubmitContext,
    batch: PayrollBatch,
    summary: str,
    progress: Progress,
    started: float,
    *,
    note: bool = True,
    source: str = SOURCE,
) -> int:
    from confluent_kafka import KafkaError, Message

    from processor.cli.kafka_noise import collapsed_kafka_logs, where_kafka_is
    from processor.kafka.clients import new_producer, producer_config
    from processor.kafka.records import batch_record
    from processor.kafka.settings import KafkaSetupError, settings_from
    from processor.kafka.wire import RegistryUnavailableError, WireCodec
    from schemas.topics import BATCHES_TOPIC

    try:
        settings = settings_from(context.kafka, bootstrap=args.bootstrap)
    except KafkaSetupError as exc:
        print(f"dispersion submit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    topic = args.topic or settings.topic(BATCHES_TOPIC)
    progress.update("encoding", force=True)
    try:
        value = WireCodec(BATCHES_TOPIC, settings.wire).encode(batch_record(batch, source=source), topic)
    except RegistryUnavailableError as exc:
        progress.done("")
        print(f"dispersion submit: {exc}; nothing was produced", file=sys.stderr)
        return EXIT_KAFKA
    progress.update(f"producing {len(value):,} bytes to {topic}", force=True)
    producer = new_producer(
        producer_config(
            settings,
            "submit",
            **{"compression.type": "lz4", "message.timeout.ms": int(args.timeout * 1000)},
        )
    )
    outcome: list[tuple[KafkaError | None, Message]] = []
    headers = [("source", SOURCE.encode()), ("export_file", args.export.name.encode("utf-8"))]
    if args.allow_duplicate_of:
        headers.append((ALLOW_DUPLICATE_HEADER, args.allow_duplicate_of.encode("utf-8")))
    producer.produce(
        topic,
        value=value,
        key=batch.batch_id.encode("utf-8"),
        headers=headers,
        on_delivery=lambda err, msg: outcome.append((err, msg)),
    )
    with collapsed_kafka_logs():  # an unreachable broker: each librdkafka line once, counted, not 100 of them
        producer.flush(args.timeout + 5)
    if not outcome or outcome[0][0] is not None:
        why = outcome[0][0].str() if outcome and outcome[0][0] is not None else "no acknowledgement"
        where = where_kafka_is(settings.bootstrap, args.bootstrap, args.config)
        progress.done("")
        print(
            f"dispersion submit: Kafka at {where} did not take the batch ({why}); it may be retried safely",
            file=sys.stderr,
        )
        return EXIT_KAFKA
    message = outcome[0][1]
    progress.done(f"done in {time.monotonic() - started:.1f} s")
    print(f"submitted {summary} -> {topic} partition {message.partition()} offset {message.offset()}")
    return _after_producing(args, batch, (topic, message.partition() or 0, message.offset() or 0), note=note)


def _after_producing(args: argparse.Namespace, batch: PayrollBatch, placed: tuple[str, int, int], *, note: bool) -> int:
    """Kafka took the batch (at `placed`: topic, partition, offset): wait for the processor's verdict, or say why
    not."""
    if not args.no_wait:
        from processor.cli.common import CliError
        from processor.cli.submit_wait import EXIT_NO_VERDICT, await_verdict, verdict_client

        try:
            client = verdict_client(args)
        except CliError as exc:
            print(f"dispersion submit: the processor's verdict cannot be asked: {exc}", file=sys.stderr)
            return EXIT_NO_VERDICT
        if client is not None:
            return await_verdict(args, client, batch.batch_id, *placed)
        if not args.quiet:
            print(
                "note: not waiting for the processor's verdict: no admin token ($DISPERSION_ADMIN_TOKEN, or the "
                "variable [admin] token_env names); pass --no-wait to say so",
                file=sys.stderr,
            )
    if note and not args.quiet:
        print(
            f"note: batch {batch.batch_id} is identified by its content (not by when it was sent): submitting the same "
            "export again is recognised as the same batch and paid at most once; the same batch id with other "
            "transfers is refused as a conflict (dead letter)",
            file=sys.stderr,
        )
    return 0
