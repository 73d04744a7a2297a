"""`dispersion topics`: create the project's Kafka topics (idempotent) and, with a schema registry, their
`<topic>-value` subjects; the work is in processor/kafka/topics.py.

dispersion topics [--config C] [--bootstrap HOST:PORT] [--partitions 12] [--retention-hours 168]
                  [--status-retention-hours 720] [--dlq-retention-hours 720] [--replication-factor N]
                  [--check]
"""

from __future__ import annotations

import argparse
import sys

from confluent_kafka import KafkaException

import schemas
from processor.cli.config import settings_from_config
from processor.kafka.settings import KafkaSetupError
from processor.kafka.topics import (
    COMPATIBILITY,
    DEFAULT_DLQ_RETENTION_HOURS,
    DEFAULT_PARTITIONS,
    DEFAULT_RETENTION_HOURS,
    DEFAULT_STATUS_RETENTION_HOURS,
    ensure_subjects,
    ensure_topics,
    project_topics,
)


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion topics`."""
    p = argparse.ArgumentParser(
        prog="dispersion topics",
        description="Create the project's Kafka topics (idempotent): partitions, retention, size limits; with "
        "[kafka] schema_registry_url also register their subjects <topic>-value with BACKWARD compatibility.",
    )
    p.add_argument(
        "--config",
        help="configuration file, its [kafka] table: bootstrap, topic names, client settings"
        " (default: $DISPERSION_CONFIG, or ./dispersion.toml when present)",
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: [kafka] or $KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS, help="partitions per topic (default 12)")
    p.add_argument("--replication-factor", type=int, default=-1, help="default: the broker's default")
    p.add_argument("--retention-hours", type=float, default=DEFAULT_RETENTION_HOURS, help="input topics")
    p.add_argument("--status-retention-hours", type=float, default=DEFAULT_STATUS_RETENTION_HOURS)
    p.add_argument("--dlq-retention-hours", type=float, default=DEFAULT_DLQ_RETENTION_HOURS)
    p.add_argument("--check", action="store_true", help="only report what differs; change nothing (exit 1 if any)")
    p.add_argument("--timeout", type=float, default=30.0)
    return p


def main(argv: list[str]) -> int:
    """`dispersion topics`."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    args = parser().parse_args(argv)
    try:
        settings = settings_from_config(args.config, bootstrap=args.bootstrap)
        specs = project_topics(
            settings,
            partitions=args.partitions,
            retention_hours=args.retention_hours,
            status_retention_hours=args.status_retention_hours,
            dlq_retention_hours=args.dlq_retention_hours,
            replication_factor=args.replication_factor,
        )
        results = ensure_topics(settings.config(), specs, timeout=args.timeout, check_only=args.check)
        registry = settings.wire.registry
        subjects = ensure_subjects(registry, settings, check_only=args.check) if registry is not None else []
    except (KafkaSetupError, ValueError, KafkaException, schemas.SchemaError) as exc:
        print(f"dispersion topics: {exc}", file=sys.stderr)
        return 1
    except SchemaRegistryError as exc:  # 409: a released version breaks what the subject holds
        print(f"dispersion topics: the schema registry refused a version ({COMPATIBILITY}): {exc}", file=sys.stderr)
        return 1
    differs = False
    for result in results:
        detail = f"{result.partitions} partitions" if result.partitions is not None else ""
        if result.changed_config:
            detail += f"; {'differs' if args.check else 'set'}: {', '.join(result.changed_config)}"
        print(f"{result.name}: {result.action}" + (f" ({detail})" if detail else ""))
        for warning in result.warnings:
            print(f"  warning: {warning}", file=sys.stderr)
        differs = differs or result.action == "missing" or bool(result.warnings) or bool(result.changed_config)
    for subject in subjects:
        ids = ", ".join(str(i) for i in subject.schema_ids)
        detail = f"schema id {ids}; " if ids else ""
        verb = "differs" if args.check else "set"
        detail += f"compatibility {COMPATIBILITY}" + (f" ({verb})" if subject.changed_compatibility else "")
        print(f"{subject.subject}: {subject.action} ({detail})")
        differs = differs or subject.action == "missing" or subject.changed_compatibility
    return 1 if args.check and differs else 0
