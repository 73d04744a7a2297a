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
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from processor.domain.settings import HttpUrl, NonEmpty, SecretText, Table, problem
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


class KafkaSetupError(RuntimeError):
    """The Kafka settings are unusable (no bootstrap address)."""


class KafkaTable(Table):
    """`[kafka]`: the broker, the consumer group, the wire format and the options of every client."""

    bootstrap_servers: Annotated[str, AfterValidator(str.strip)] = ""
    """HOST:PORT[,HOST:PORT...]; empty: --bootstrap or KAFKA_BOOTSTRAP_SERVERS."""
    group_id: NonEmpty = DEFAULT_GROUP_ID
    """Consumer group of the processor instances."""
    static_membership: bool = True
    """group.instance.id = the instance name, so a restart takes its partitions back at once."""
    wire_format: Literal["single-object", "confluent"] = "single-object"
    """single-object or confluent (needs schema_registry_url); docs/kafka.md."""
    schema_registry_url: HttpUrl | None = None
    """The registry's Confluent-compatible API, e.g. http://registry:8080/apis/ccompat/v7."""
    schema_registry_username: NonEmpty | None = None
    """HTTP basic user of the registry (optional)."""
    schema_registry_password: SecretText | None = None
    """HTTP basic password of the registry (better: schema_registry_password_env)."""
    topics: dict[str, NonEmpty] = {}
    """Physical topic names by logical name, when a deployment prefixes or renames them."""
    client: dict[str, Any] = Field(default={}, repr=False)
    """Extra librdkafka properties for every client (TLS, SASL); values may be secrets and are never logged."""

    @model_validator(mode="after")
    def _wire_checks(self) -> KafkaTable:
        try:
            self.wire  # noqa: B018 (built once here so that a bad registry setting is refused at load)
        except ValueError as exc:
            raise problem(str(exc)) from None
        return self

    @property
    def wire(self) -> WireSettings:
        """The wire format and the schema registry."""
        user, password = self.schema_registry_username, self.schema_registry_password
        if self.schema_registry_url is None:
            if user or password:
                raise ValueError("schema_registry_username/password without schema_registry_url")
            return WireSettings(self.wire_format)
        registry = Registry(self.schema_registry_url, user, password.reveal() if password else None)
        return WireSettings(self.wire_format, registry)


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


def settings_from(table: KafkaTable | None = None, *, bootstrap: str | None = None) -> KafkaSettings:
    """The clients' settings from the (already checked) `[kafka]` table, none for its defaults; the bootstrap
    address is `bootstrap` (`--bootstrap`), else the table's, else `KAFKA_BOOTSTRAP_SERVERS`."""
    table = table or KafkaTable()
    candidates = (bootstrap or "", table.bootstrap_servers, os.environ.get(BOOTSTRAP_ENV, ""))
    address = next((candidate.strip() for candidate in candidates if candidate.strip()), "")
    if not address:
        raise KafkaSetupError(
            f"no Kafka bootstrap address: pass --bootstrap, set [kafka] bootstrap_servers, or export {BOOTSTRAP_ENV} "
            "(`dispersion dev kafka` starts a local broker and prints it)"
        )
    return KafkaSettings(
        bootstrap=address,
        group_id=table.group_id,
        topics=table.topics,
        static_membership=table.static_membership,
        client=table.client,
        wire=table.wire,
    )
