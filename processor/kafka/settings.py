"""The deployment's Kafka settings: where the broker is, how topics are named, the wire format, and the librdkafka
properties every client gets (the clients themselves are built by `processor.kafka.clients`).

Bootstrap address, in order: an explicit `--bootstrap`, the configuration file's `[kafka] bootstrap_servers`,
the `KAFKA_BOOTSTRAP_SERVERS` environment variable (what `dispersion dev kafka` prints).

The `[kafka]` table of the configuration file may also hold (all optional):

    [kafka]
    bootstrap_servers = "broker-1:9092,broker-2:9092"
    group_id = "dispersion-processor"        # consumer group of the processor instances
    static_membership = true                 # group.instance.id = the instance name (default true)
    wire_format = "single-object"            # or "confluent" (needs schema_registry_url), docs/kafka.md
    schema_registry_url = "http://registry:8080/apis/ccompat/v7"   # read Confluent-framed records; write them
    schema_registry_username = "dispersion"  # HTTP basic, optional
    schema_registry_password_env = "SCHEMA_REGISTRY_PASSWORD"
    [kafka.topics]                            # physical names, when a deployment prefixes or renames them
    "payroll.batches" = "acme.payroll.batches"
    [kafka.client]                            # extra librdkafka properties for every client (TLS, SASL, ...)
    "security.protocol" = "SASL_SSL"

Values of `[kafka.client]` may hold secrets (`sasl.password`): they are handed to librdkafka and never logged;
the registry password likewise goes only to the registry client.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from processor.kafka.wire import Registry, WireSettings

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"

DEFAULT_GROUP_ID = "dispersion-processor"

# The Java client's default partitioner for keyed records (murmur2 of the key bytes, positive, modulo the
# partition count); librdkafka's own default is CRC32-based. With it a key lands in the partition a Java producer
# (an ERP, Kafka Streams) picks, so joins by key (batches with their statuses) stay co-partitioned. Keyless
# records go to a random partition, as in Java. Set for every producer here and not overridable.
PARTITIONER = "murmur2_random"

# A 100,000-transaction batch is about 10 MB of Avro, far above Kafka's 1 MB default: the batch and dead-letter
# topics, the producers and the consumers all allow this much per message (see docs/kafka.md).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


KNOWN_OPTIONS = frozenset(
    {
        "group_id",
        "static_membership",
        "topics",
        "client",
        "wire_format",
        "schema_registry_url",
        "schema_registry_username",
        "schema_registry_password",
    }
)


class KafkaSetupError(RuntimeError):
    """The Kafka settings are unusable (no bootstrap address, a bad `[kafka]` table)."""


@dataclass(frozen=True)
class KafkaSettings:
    """Where the broker is and how this deployment names its topics."""

    bootstrap: str
    group_id: str = DEFAULT_GROUP_ID
    topics: Mapping[str, str] = field(default_factory=dict)  # logical name -> physical name
    static_membership: bool = True  # consumers of a named instance set group.instance.id (clients.consumer_config)
    client: Mapping[str, Any] = field(default_factory=dict, repr=False)  # extra librdkafka properties
    wire: WireSettings = field(default_factory=WireSettings)  # wire format and schema registry

    def topic(self, logical: str) -> str:
        """The physical name of a logical topic (the same unless `[kafka.topics]` renames it)."""
        return self.topics.get(logical, logical)

    def config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka properties for a client: bootstrap, the deployment's `[kafka.client]`, then `extra`."""
        return {"bootstrap.servers": self.bootstrap, **self.client, **extra}


def resolve_bootstrap(explicit: str | None = None, configured: str | None = None) -> str:
    """The bootstrap address from `--bootstrap`, the configuration, or `KAFKA_BOOTSTRAP_SERVERS`."""
    for candidate in (explicit, configured, os.environ.get(BOOTSTRAP_ENV)):
        if candidate and candidate.strip():
            return candidate.strip()
    raise KafkaSetupError(
        f"no Kafka bootstrap address: pass --bootstrap, set [kafka] bootstrap_servers, or export {BOOTSTRAP_ENV} "
        "(`dispersion dev kafka` starts a local broker and prints it)"
    )


def settings_from(
    options: Mapping[str, Any] | None = None, *, bootstrap: str | None = None, configured: str | None = None
) -> KafkaSettings:
    """Build `KafkaSettings` from the `[kafka]` table's extra keys (`processor.cli.config.KafkaSettings.options`)."""
    options = dict(options or {})
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        known = ", ".join(sorted(KNOWN_OPTIONS))
        raise KafkaSetupError(f"[kafka]: unknown key(s) {', '.join(sorted(unknown))} (known: {known})")
    group_id = options.get("group_id", DEFAULT_GROUP_ID)
    static_membership = options.get("static_membership", True)
    topics = options.get("topics", {})
    client = options.get("client", {})
    if not isinstance(group_id, str) or not group_id:
        raise KafkaSetupError("[kafka] group_id must be a non-empty string")
    if not isinstance(static_membership, bool):
        raise KafkaSetupError(f"[kafka] static_membership must be true or false, got {static_membership!r}")
    if not isinstance(topics, Mapping) or not all(isinstance(v, str) and v for v in topics.values()):
        raise KafkaSetupError("[kafka.topics] must map topic names to non-empty strings")
    if not isinstance(client, Mapping):
        raise KafkaSetupError("[kafka.client] must be a table of librdkafka properties")
    return KafkaSettings(
        bootstrap=resolve_bootstrap(bootstrap, configured),
        group_id=group_id,
        static_membership=static_membership,
        topics={str(k): str(v) for k, v in topics.items()},
        client={str(k): v for k, v in client.items()},
        wire=wire_settings(options),
    )


def wire_settings(options: Mapping[str, Any]) -> WireSettings:
    """The wire format and schema registry from the `[kafka]` table's keys (`wire_format`, `schema_registry_*`)."""
    values: dict[str, str | None] = {}
    for key in ("wire_format", "schema_registry_url", "schema_registry_username", "schema_registry_password"):
        value = options.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise KafkaSetupError(f"[kafka] {key} must be a non-empty string")
        values[key] = value.strip() if isinstance(value, str) else None
    try:
        url = values["schema_registry_url"]
        registry = None
        if url is not None:
            registry = Registry(url, values["schema_registry_username"], values["schema_registry_password"])
        elif values["schema_registry_username"] or values["schema_registry_password"]:
            raise ValueError("schema_registry_username/password without schema_registry_url")
        return WireSettings(values["wire_format"] or "single-object", registry)
    except ValueError as exc:
        raise KafkaSetupError(f"[kafka] {exc}") from None
