"""Create the project's topics with the partitions and retention it wants; running it again changes nothing
(the command is `dispersion topics`, processor/cli/topics.py).

The broker refuses to create topics on its own (`auto.create.topics.enable=false` on the local broker), so this is
the one place that decides how many partitions a topic has: partitions bound how many processor instances share
the work, and every event of one batch (key = batch id) stays in one partition.

Idempotent: a topic that exists is left as it is, except that its retention and maximum message size are set to
the wanted values (`incremental_alter_configs`, a harmless change). A partition count that differs is reported,
never changed: adding partitions moves keys to other partitions and would break the per-batch order of events in
flight.

With a schema registry configured (`[kafka] schema_registry_url`), every topic's subject `<topic>-value` gets
BACKWARD compatibility and every released version of the topic's schema, oldest first (the registry refuses a
version that breaks its readers). Producers never register on their own: this command is the one that does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

import schemas
from processor.kafka.clients import new_admin
from processor.kafka.settings import MAX_MESSAGE_BYTES, KafkaSettings
from processor.kafka.wire import (
    Registry,
    RegistryUnavailableError,
    registry_client,
    registry_text,
    registry_transport_errors,
    subject_name,
)
from schemas.topics import (
    BATCHES_TOPIC,
    DLQ_TOPIC,
    STATUS_TOPIC,
    TRANSFERS_TOPIC,
    VRP_MANDATES_TOPIC,
    VRP_PAYMENTS_TOPIC,
    VRP_STATUS_TOPIC,
)

COMPATIBILITY = "BACKWARD"  # consumers with the new schema read data written with the previous one
HOUR_MS = 3_600_000
DEFAULT_PARTITIONS = 12
DEFAULT_RETENTION_HOURS = 7 * 24  # inputs: a week to replay
DEFAULT_STATUS_RETENTION_HOURS = 30 * 24  # ledgers may catch up after a month-end
DEFAULT_DLQ_RETENTION_HOURS = 30 * 24  # someone has to look at every dead letter


@dataclass(frozen=True)
class TopicSpec:
    """One topic as the project wants it."""

    name: str
    partitions: int
    retention_ms: int
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    config: Mapping[str, str] = field(default_factory=dict)

    def wanted_config(self) -> dict[str, str]:
        """Topic-level configuration set at creation and kept in line afterwards."""
        return {"retention.ms": str(self.retention_ms), **self.config}


@dataclass(frozen=True)
class TopicResult:
    """What `ensure_topics` did for one topic."""

    name: str
    action: str  # "created" or "exists"
    partitions: int | None = None  # as found on the broker
    changed_config: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def project_topics(
    settings: KafkaSettings | None = None,
    *,
    partitions: int = DEFAULT_PARTITIONS,
    retention_hours: float = DEFAULT_RETENTION_HOURS,
    status_retention_hours: float = DEFAULT_STATUS_RETENTION_HOURS,
    dlq_retention_hours: float = DEFAULT_DLQ_RETENTION_HOURS,
    replication_factor: int = -1,
) -> list[TopicSpec]:
    """The six topics of docs/kafka.md, under the deployment's physical names."""
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    name = settings.topic if settings is not None else (lambda logical: logical)
    big = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
    dlq_big = {"max.message.bytes": str(MAX_MESSAGE_BYTES + 1024 * 1024)}  # the original plus its envelope

    def spec(logical: str, hours: float, config: Mapping[str, str] | None = None) -> TopicSpec:
        return TopicSpec(name(logical), partitions, int(hours * HOUR_MS), replication_factor, dict(config or {}))

    return [
        spec(BATCHES_TOPIC, retention_hours, big),
        spec(STATUS_TOPIC, status_retention_hours, big),  # COMPLETED carries every transaction's result
        spec(DLQ_TOPIC, dlq_retention_hours, dlq_big),
        spec(VRP_MANDATES_TOPIC, retention_hours),
        spec(VRP_PAYMENTS_TOPIC, retention_hours),
        spec(VRP_STATUS_TOPIC, status_retention_hours),
        spec(TRANSFERS_TOPIC, status_retention_hours),  # one event per transfer outcome, for ledgers
    ]


def _describe_configs(admin: AdminClient, names: Iterable[str], timeout: float) -> dict[str, dict[str, str | None]]:
    resources = [ConfigResource("topic", name) for name in names]
    if not resources:
        return {}
    deadline = time.monotonic() + min(timeout, 10.0)
    while True:
        try:
            return _configs(admin, resources, timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            unknown = isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not unknown or time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # a topic created a moment ago: the broker lists it before it describes it


def _configs(admin: AdminClient, resources: list[ConfigResource], timeout: float) -> dict[str, dict[str, str | None]]:
    futures = admin.describe_configs(resources, request_timeout=timeout)
    found: dict[str, dict[str, str | None]] = {}
    for resource, future in futures.items():
        entries = future.result(timeout)
        found[resource.name] = {key: entry.value for key, entry in entries.items()}
    return found


def ensure_topics(
    client_config: Mapping[str, Any], specs: Sequence[TopicSpec], *, timeout: float = 30.0, check_only: bool = False
) -> list[TopicResult]:
    """Create the missing topics and align retention and size limits of existing ones; report everything.

    With `check_only`, nothing is changed; missing topics are reported with action "missing".
    """
    admin = new_admin(client_config)
    metadata = admin.list_topics(timeout=timeout)
    existing = {name: len(topic.partitions) for name, topic in metadata.topics.items()}
    results: dict[str, TopicResult] = {}

    missing = [spec for spec in specs if spec.name not in existing]
    if missing and not check_only:
        new = [
            NewTopic(spec.name, num_partitions=spec.partitions, replication_factor=spec.replication_factor,
                     config=spec.wanted_config())
            for spec in missing
        ]  # fmt: skip
        for name, future in admin.create_topics(new, request_timeout=timeout).items():
            try:
                future.result(timeout)
            except KafkaException as exc:
                error = exc.args[0]
                if not (isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                    raise
                existing[name] = -1  # another instance created it meanwhile: treat it as existing
                continue
            spec = next(s for s in missing if s.name == name)
            results[name] = TopicResult(name, "created", spec.partitions)
    elif missing:
        for spec in missing:
            results[spec.name] = TopicResult(spec.name, "missing")

    present = [spec for spec in specs if spec.name in existing and spec.name not in results]
    if present:
        deadline = time.monotonic() + min(timeout, 10.0)
        while any(existing[spec.name] <= 0 for spec in present) and time.monotonic() < deadline:
            # created a moment ago (here or by another instance): the broker's metadata lists it shortly
            metadata = admin.list_topics(timeout=timeout)
            existing.update({name: len(topic.partitions) for name, topic in metadata.topics.items()})
            if any(existing[spec.name] <= 0 for spec in present):
                time.sleep(0.2)
        current = _describe_configs(admin, (spec.name for spec in present), timeout)
        for spec in present:
            results[spec.name] = _align(admin, spec, existing[spec.name], current[spec.name], timeout, check_only)
    return [results[spec.name] for spec in specs]


def _align(
    admin: AdminClient,
    spec: TopicSpec,
    partitions: int,
    current: Mapping[str, str | None],
    timeout: float,
    check_only: bool,
) -> TopicResult:
    warnings: list[str] = []
    if partitions != spec.partitions:
        warnings.append(
            f"{spec.name} has {partitions} partitions, {spec.partitions} wanted; left unchanged (adding partitions "
            "moves keys and breaks the per-batch order of events in flight)"
        )
    changes = {key: value for key, value in spec.wanted_config().items() if current.get(key) != value}
    if changes and not check_only:
        entries = [
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET) for key, value in changes.items()
        ]
        resource = ConfigResource("topic", spec.name, incremental_configs=entries)
        for future in admin.incremental_alter_configs([resource], request_timeout=timeout).values():
            future.result(timeout)
    elif changes:
        warnings.extend(f"{spec.name}: {key} is {current.get(key)}, {value} wanted" for key, value in changes.items())
    return TopicResult(spec.name, "exists", partitions, tuple(sorted(changes)), tuple(warnings))


@dataclass(frozen=True)
class SubjectResult:
    """What `ensure_subjects` did for one topic's subject."""

    subject: str
    action: str  # "registered", "exists" or "missing" (with check_only)
    schema_ids: tuple[int, ...] = ()  # per released version, oldest first (registered or found)
    changed_compatibility: bool = False


def _registry_call(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a registry request; None on 404, `RegistryUnavailableError` when it cannot be answered. A version
    refused as incompatible (409) raises `SchemaRegistryError`: a schema change to look at, not to retry."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return call(*args, **kwargs)
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:
            return None
        if exc.http_status_code == 409:
            raise
        raise RegistryUnavailableError(f"{what}: {exc}") from exc
    except registry_transport_errors() as exc:
        raise RegistryUnavailableError(f"{what}: unreachable: {type(exc).__name__}: {exc}") from exc


def ensure_subjects(
    registry: Registry, settings: KafkaSettings | None = None, *, check_only: bool = False
) -> list[SubjectResult]:
    """Register every released schema version of every topic under `<physical topic>-value` with BACKWARD
    compatibility (idempotent). A version the registry refuses as incompatible raises `SchemaRegistryError`."""
    from confluent_kafka.schema_registry import Schema

    client = registry_client(registry)
    name = settings.topic if settings is not None else (lambda logical: logical)
    results: list[SubjectResult] = []
    for logical in schemas.TOPICS:
        subject = subject_name(name(logical))
        level = _registry_call(subject, client.get_compatibility, subject)
        change = level != COMPATIBILITY
        if change and not check_only:
            _registry_call(subject, client.set_compatibility, subject_name=subject, level=COMPATIBILITY)
        ids: list[int] = []
        added = False
        for version in schemas.versions(logical):
            candidate = Schema(registry_text(logical, version.version), "AVRO")
            found = _registry_call(subject, client.lookup_schema, subject, candidate)
            if found is None and check_only:
                results.append(SubjectResult(subject, "missing", tuple(ids), change))
                break
            if found is None:
                registered = _registry_call(subject, client.register_schema, subject, candidate)
                if registered is None:
                    raise RegistryUnavailableError(f"{subject}: the registry did not register the schema")
                ids.append(int(registered))
                added = True
            else:
                ids.append(int(found.schema_id))
        else:
            results.append(SubjectResult(subject, "registered" if added else "exists", tuple(ids), change))
    return results
