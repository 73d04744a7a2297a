"""`dispersion status`: print the status events of `dispersion.status` (or `vrp.status`), decoded.

    dispersion status [--config C] [--bootstrap HOST:PORT] [--batch ID] [--follow] [--new] [--json]
                      [--until-terminal] [--vrp] [--topic T]

The configuration file is `--config`, else `$DISPERSION_CONFIG`, else `./dispersion.toml` when present (as for
`dispersion submit`); its `[kafka]` table gives the bootstrap address and topic names.

Without `--follow` it prints the events the topic holds now and exits; with `--follow` it keeps printing them as
they arrive until Ctrl-C or SIGTERM. `--until-terminal --batch ID` follows (it implies `--follow`) until that
batch reaches a final status and exits with the outcome: 0 every transfer paid, 4 COMPLETED with failed transfers,
1 FAILED, REJECTED, EXPIRED or INVALID, 3 not final within `--timeout` seconds (or interrupted), 2 usage
(docs/operations.md, "Exit codes"). `--new` skips the history.

It reads every partition directly (no consumer group, nothing committed), so it never disturbs the processor and
any number of people can watch. An event published twice (the outbox relay delivers at least once) is printed
once: events are deduplicated on `event_id`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Final

from processor.domain.money import money_text
from processor.domain.outcomes import EXIT_KAFKA_UNREACHABLE, EXIT_NOT_TERMINAL, exit_code
from processor.domain.text import printable
from processor.domain.time import iso_ms

if TYPE_CHECKING:
    from confluent_kafka import Message

    from processor.cli.status_numbers import OriginalNumbers
    from processor.kafka.settings import KafkaSettings
    from processor.kafka.wire import WireCodec

VRP_TERMINAL: Final = {"AUTHORIZED": 0, "REJECTED": 1, "EXPIRED": 1, "INVALID": 1}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        return iso_ms(value)
    if isinstance(value, date):  # execute_on
        return value.isoformat()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def as_json(record: Mapping[str, Any]) -> str:
    """One event as a JSON line (amounts as decimal strings, instants as ISO 8601 UTC with milliseconds)."""
    return json.dumps(_plain(record), ensure_ascii=False, separators=(",", ":"))


def as_text(record: Mapping[str, Any], *, details: bool = False, numbers: Mapping[int, int] | None = None) -> str:
    """One event as a human line: time, key, status, then the fields that are set. With `details`, a line per
    transfer, numbered as in the original batch when `numbers` (a retry batch's, position -> original number)
    has them (`processor.cli.status_numbers`)."""
    key = record.get("batch_id") or record.get("mandate_id") or "?"
    occurred = record.get("occurred_at")
    when = iso_ms(occurred) if isinstance(occurred, datetime) else str(occurred)
    parts = [when, str(key), str(record.get("status"))]
    if (record.get("attempt") or 1) > 1:  # a batch id submitted again after it ended
        parts.append(f"attempt={record['attempt']}")
    labels = (
        ("payment_id", "payment"),
        ("consent_id", "consent"),
        ("file_payment_id", "file_payment"),
        ("domestic_vrp_id", "vrp"),
        ("bank_status", "bank_status"),
        ("number_of_transactions", "transactions"),
        ("execute_on", "execute_on"),
        ("duplicate_of", "duplicate_of"),
        ("duplicate_confirmed_by", "confirmed_by"),
    )
    parts.extend(f"{label}={record[name]}" for name, label in labels if record.get(name) is not None)
    if record.get("control_sum") is not None:
        parts.append(f"control_sum={money_text(record['control_sum'])} {record.get('currency') or ''}".rstrip())
    if record.get("transfers_failed") is not None:
        parts.append(
            f"paid={record.get('transfers_completed')} ({money_text(record.get('amount_completed') or Decimal(0))})"
            f" failed={record['transfers_failed']} ({money_text(record.get('amount_failed') or Decimal(0))})"
        )
    if record.get("amount") is not None:
        parts.append(f"amount={record['amount']} {record.get('currency') or ''}".rstrip())
    if record.get("authorization_url"):
        parts.append(f"approve at {record['authorization_url']}")
    if record.get("reason"):
        parts.append(f"reason: {record['reason']}")
    results = record.get("transaction_results")
    lines = ["  ".join(parts)]
    if results:
        counts: dict[str, int] = {}
        for item in results:
            counts[item["status"]] = counts.get(item["status"], 0) + 1
        lines[0] += "  results: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        if details:
            numbers = numbers or {}
            if record.get("retry_of") and len(numbers) < len(results):
                lines.append(
                    "    (numbered by position in this retry batch: its dispersion.transfers events were not found)"
                )
            for item in results:
                reference = item.get("employee_reference") or "-"
                why = f"  {item['reason']}" if item.get("reason") else ""
                number = numbers.get(item["index"], item["index"]) if len(numbers) >= len(results) else item["index"]
                lines.append(f"    #{number} {reference} {item['amount']} {item['status']}{why}")
    return "\n".join(map(printable, lines))  # a control character in a stored text cannot forge a line


class _Stop(BaseException):
    """SIGTERM arrived."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion status`."""
    p = argparse.ArgumentParser(
        prog="dispersion status", description="Print status events (dispersion.status or vrp.status), decoded."
    )
    p.add_argument(
        "--config", help="configuration file, its [kafka] table (default: $DISPERSION_CONFIG, or ./dispersion.toml)"
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: [kafka] or $KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--topic", help="topic to read (default: dispersion.status, or vrp.status with --vrp)")
    p.add_argument("--vrp", action="store_true", help="VRP mandates and payments (vrp.status)")
    p.add_argument("--batch", "--mandate", dest="key", help="only this batch id (or mandate id with --vrp)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing events as they arrive")
    p.add_argument("--new", action="store_true", help="skip the events already on the topic")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--details", action="store_true", help="per-transaction results too")
    p.add_argument(
        "--until-terminal",
        action="store_true",
        help="with --batch: follow until its final status; exit 0 all paid, 4 some failed, 1 ended, 3 not in time",
    )
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for the broker's metadata (default 30), and with --until-terminal for the final status "
        "(default: no limit)",
    )
    return p


def main(argv: list[str], out: IO[str] | None = None) -> int:
    """`dispersion status`."""
    from processor.cli.config import settings_from_config
    from processor.cli.kafka_noise import collapsed_kafka_logs, where_kafka_is
    from processor.kafka.settings import KafkaSetupError
    from processor.kafka.wire import WireCodec
    from schemas.topics import STATUS_TOPIC, VRP_STATUS_TOPIC

    args = parser().parse_args(argv)
    out = out or sys.stdout
    if args.until_terminal and not args.key:
        print("dispersion status: --until-terminal needs --batch", file=sys.stderr)
        return 2
    if args.timeout is not None and args.timeout <= 0:
        print("dispersion status: --timeout must be a positive number of seconds", file=sys.stderr)
        return 2
    logical = VRP_STATUS_TOPIC if args.vrp else STATUS_TOPIC
    try:
        settings = settings_from_config(args.config, bootstrap=args.bootstrap)
    except (KafkaSetupError, ValueError) as exc:
        print(f"dispersion status: {exc}", file=sys.stderr)
        return 2
    topic = args.topic or settings.topic(logical)
    codec = WireCodec(logical, settings.wire)  # either wire format
    wanted = args.key.encode("utf-8") if args.key else None
    where = where_kafka_is(settings.bootstrap, args.bootstrap, args.config)
    try:
        with collapsed_kafka_logs():
            return _follow(args, settings, topic, codec, wanted, out)
    except _UnreachableError as exc:  # the one clear line, after librdkafka's own lines were summed up
        print(f"dispersion status: Kafka at {where} is not reachable ({exc})", file=sys.stderr)
        return EXIT_KAFKA_UNREACHABLE


class _UnreachableError(Exception):
    """The broker did not answer (librdkafka's reason)."""


def _follow(
    args: argparse.Namespace,
    settings: KafkaSettings,
    topic: str,
    codec: WireCodec,
    wanted: bytes | None,
    out: IO[str],
) -> int:
    """Read the status topic (see `main`); librdkafka's own lines are collapsed by the caller."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, TopicPartition

    from processor.cli.status_numbers import OriginalNumbers
    from processor.kafka.clients import new_consumer, reader_config

    deadline = None if args.timeout is None or not args.until_terminal else time.monotonic() + args.timeout
    consumer = new_consumer(reader_config(settings, "status", **{"enable.partition.eof": True}))
    originals = OriginalNumbers(settings)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_stop) if main_thread else None
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=args.timeout or 30.0)
        except KafkaException as exc:
            raise _UnreachableError(exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc) from None
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            print(f"dispersion status: topic {topic} not found", file=sys.stderr)
            return 2
        start = OFFSET_END if args.new else OFFSET_BEGINNING
        consumer.assign([TopicPartition(topic, p, start) for p in info.partitions])
        reading = _Reading(args, topic, codec, wanted, out, len(info.partitions), originals)
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                print(f"dispersion status: {args.key} not final within {args.timeout:g} s", file=sys.stderr)
                return EXIT_NOT_TERMINAL
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is None:
                code = reading.record(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                code = reading.end_of(message.partition() or 0)
            elif error.fatal():
                raise KafkaException(error)
            elif error.code() == KafkaError._ALL_BROKERS_DOWN and not reading.at_end:
                raise _UnreachableError(error.str())
            else:
                print(f"dispersion status: {error}", file=sys.stderr)
                code = None
            if code is not None:
                return code
    except (KeyboardInterrupt, _Stop):
        return EXIT_NOT_TERMINAL if args.until_terminal else 0
    except KafkaException as exc:
        print(f"dispersion status: {exc}", file=sys.stderr)
        return 3
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        consumer.close()
        originals.close()


@dataclass
class _Reading:
    """Where a `dispersion status` read stands: which partitions were read to their end, what was printed."""

    args: argparse.Namespace
    topic: str
    codec: WireCodec
    wanted: bytes | None  # the key of `--batch`, or None for every key
    out: IO[str]
    partitions: int
    originals: OriginalNumbers  # a retry batch's transfer numbers in its original batch
    at_end: set[int] = field(default_factory=set)
    caught_up: set[int] = field(default_factory=set)  # partitions read to their end once (the history is behind us)
    pending: tuple[int, int] | None = None  # (partition, exit code) of a final status seen in the history
    seen: set[str] = field(default_factory=set)  # event ids printed (the relay delivers at least once)

    def end_of(self, partition: int) -> int | None:
        """A partition read to its end: the exit code when that ends the read, else None."""
        self.at_end.add(partition)
        self.caught_up.add(partition)
        if self.pending is not None and self.pending[0] in self.caught_up:
            return self.pending[1]  # the latest attempt's final status
        follow = self.args.follow or self.args.until_terminal  # a script must never take an unapproved batch for paid
        if not follow and len(self.at_end) == self.partitions:
            return 0
        return None

    def record(self, message: Message) -> int | None:
        """Print a message's status (each event once); the exit code when it is the awaited final status."""
        import schemas
        from processor.kafka.wire import RegistryUnavailableError

        partition = message.partition() or 0
        self.at_end.discard(partition)
        if self.wanted is not None and message.key() != self.wanted:
            return None
        value = message.value()
        try:
            record = self.codec.decode(value if value is not None else b"", self.topic)
        except (schemas.DecodeError, RegistryUnavailableError) as exc:
            print(f"dispersion status: skipped offset {message.offset()}: {exc}", file=sys.stderr)
            return None
        if record["event_id"] in self.seen:
            return None
        self.seen.add(record["event_id"])
        self.out.write(self._shown(record) + "\n")
        self.out.flush()
        if not self.args.until_terminal:
            return None
        # A batch id submitted again after it ended has a later attempt: a final status read from the history
        # counts only when no later event of the key follows it.
        code = _final(record, vrp=self.args.vrp)
        if code is not None and partition in self.caught_up:
            return code
        self.pending = None if code is None else (partition, code)
        return None

    def _shown(self, record: Mapping[str, Any]) -> str:
        """One event as printed: JSON, or text (a retry batch's details by its transfers' original numbers)."""
        if self.args.json:
            return as_json(record)
        results = record.get("transaction_results")
        numbers = None
        if self.args.details and results and record.get("retry_of"):
            numbers = self.originals.of(str(record["batch_id"]), len(results))
        return as_text(record, details=self.args.details, numbers=numbers)


def _final(record: Mapping[str, Any], *, vrp: bool) -> int | None:
    """The exit status when `record` is the key's final status, else None."""
    if vrp:
        return None if record.get("payment_id") else VRP_TERMINAL.get(str(record["status"]))
    failed = record.get("transfers_failed")
    if failed is None and record.get("transaction_results"):  # an event written before schema v2
        failed = sum(1 for item in record["transaction_results"] if item["status"] == "FAILED")
    return exit_code(str(record["status"]), failed)
