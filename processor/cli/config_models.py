"""The configuration file's tables as pydantic models: types, defaults, ranges, our messages and the JSON Schema.

The file's values must already have their TOML type (`assertion_lifetime = "60"` is refused, as before);
environment values are text (`EnvText`) and are converted to the key's type first. Every check raises a
`PydanticCustomError` of type `config` whose message is the problem as the user reads it (`must be between 5 and
3600, got 0`); `processor.cli.config_source` puts the file, line and dotted key in front. A secret's value never
enters a message: its checks name only its type.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, SecretStr
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema
from pydantic_settings import SettingsConfigDict

from processor.bank.integration import (
    ASSERTION_SIGNINGS,
    GRANT_PARAMETERS,
    TOKEN_AUTH_METHODS,
    AssertionSigning,
    GrantParameter,
    RetrySettings,
    TimeoutSettings,
    TokenAuthMethod,
)
from processor.cli.config_source import (
    AT_LEAST_ONE_INTEGRATION,
    ENV_DELIMITER,
    ENV_PREFIX,
    EnvText,
    LayeredSettings,
)
from processor.domain.schedule import DEFAULT_MAX_DAYS_AHEAD
from processor.engine.settings import ENGINE_LIMITS, EngineSettings
from schemas.codec import WIRE_FORMATS

STORE_SCHEMES = ("sqlite", "postgresql", "postgres")


def problem(message: str) -> PydanticCustomError:
    """A validation error whose message is shown as is (after `file:line: dotted.key: `)."""
    return PydanticCustomError("config", message)


def redact_url(url: str) -> str:
    """The URL with any password in its user part replaced by `***` (for DSNs in logs and reprs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))


@dataclass(frozen=True, eq=False)  # hashed by identity: typing hashes Annotated metadata
class Check:
    """Annotated metadata: `check` runs before the type's own validation (with our message) and `schema` is merged
    into the key's JSON Schema."""

    check: Callable[[Any], Any]
    schema: Mapping[str, Any] = field(default_factory=dict)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema.update(self.schema)
        return json_schema


@dataclass(frozen=True)
class Range:
    """Annotated metadata for a number between `low` and `high` (an `int` key takes integers only)."""

    low: float
    high: float

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        integer = source is int

        def check(value: Any) -> Any:
            kind = "an integer" if integer else "a number of seconds"
            if isinstance(value, EnvText):
                try:
                    value = int(value.strip()) if integer else float(value.strip())
                except ValueError:
                    raise problem(f"must be {kind}, got {str(value)!r}") from None
            numeric = int if integer else int | float
            if isinstance(value, bool) or not isinstance(value, numeric) or not math.isfinite(value):
                raise problem(f"must be {kind}, got {value!r}")
            if not self.low <= value <= self.high:
                raise problem(f"must be between {self.low:g} and {self.high:g}, got {value!r}")
            return value

        return core_schema.no_info_before_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema.update(minimum=self.low, maximum=self.high)
        return json_schema


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise problem(f"must be a string, not {type(value).__name__}")
    return str(value)


def _nonempty(value: Any) -> str:
    text = _text(value)
    if not text.strip():
        raise problem("must not be empty")
    return text


def _secret(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value
    return SecretStr(_nonempty(value))  # the checks above name only the type: the value stays out of messages


def _url(value: Any) -> str:
    text = _nonempty(value)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise problem(f"must be an absolute http(s) address, got {redact_url(text)!r}")
    if parts.query or parts.fragment:
        raise problem("must not carry a query or fragment")
    return text


def _ip(value: Any) -> str:
    text = _nonempty(value).strip()
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise problem(f"must be an IP address, got {text!r}") from None
    return text


def _timezone(value: Any) -> str:
    text = _nonempty(value).strip()
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise problem(f"must be an IANA time zone name such as 'UTC' or 'America/Guatemala', got {text!r}") from None
    return text


def _store(value: Any) -> str:
    text = _nonempty(value)
    if urlsplit(text).scheme.split("+")[0] not in STORE_SCHEMES:
        raise problem(f"must be a sqlite:/// or postgresql:// address, got {redact_url(text)!r}")
    return text


def _flag(value: Any) -> Any:
    if isinstance(value, EnvText):
        words = {"true": True, "1": True, "false": False, "0": False}
        if value.strip().lower() in words:
            return words[value.strip().lower()]
    if not isinstance(value, bool):
        raise problem(f"must be true or false, got {value!r}")
    return value


def one_of(options: tuple[str, ...]) -> Check:
    """A choice among `options`, refused with the list of them."""

    def check(value: Any) -> str:
        text = _text(value)
        if text not in options:
            raise problem(f"must be one of {', '.join(repr(o) for o in options)}, got {text!r}")
        return text

    return Check(check)


def _tables(value: Any) -> Any:
    if isinstance(value, Mapping) and not value:
        raise problem(AT_LEAST_ONE_INTEGRATION)
    return value


Text = Annotated[str, Check(_text)]
NonEmpty = Annotated[str, Check(_nonempty, {"minLength": 1})]
HttpUrl = Annotated[str, Check(_url, {"format": "uri", "pattern": "^https?://"})]
SecretText = Annotated[SecretStr, Check(_secret, {"minLength": 1})]
Flag = Annotated[bool, Check(_flag)]


class Table(BaseModel):
    """A table of the file: unknown keys refused, docstrings under the fields become the schema's descriptions."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, hide_input_in_errors=True, use_attribute_docstrings=True, validate_default=True
    )


class ProcessorTable(Table):
    """`[processor]`: where the flows are stored and where browsers reach the callback API."""

    store: Annotated[str, Check(_store, {"pattern": "^(sqlite|postgresql|postgres)(\\+[a-z0-9]+)?:"})] = (
        "sqlite:///dispersion.sqlite"
    )
    """sqlite:///PATH or postgresql://USER@HOST:PORT/DB (a password belongs in store_env)."""
    public_url: HttpUrl = "http://127.0.0.1:8600"
    """The callback API's public address: approval links and the redirect URI's host."""


class KafkaTable(Table):
    """`[kafka]`: the broker and the client options (processor.kafka reads everything but bootstrap_servers)."""

    # Keys that processor.kafka.settings.KNOWN_OPTIONS adds later are accepted raw (checked in processor.cli.config).
    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": False})

    bootstrap_servers: Text = ""
    """HOST:PORT[,HOST:PORT...]; empty: --bootstrap or KAFKA_BOOTSTRAP_SERVERS."""
    group_id: NonEmpty | None = None
    """Consumer group of the processor instances (default dispersion-processor)."""
    static_membership: Flag | None = None
    """group.instance.id = the instance name, so a restart takes its partitions back at once (default true)."""
    wire_format: Annotated[Literal["single-object", "confluent"], one_of(WIRE_FORMATS)] | None = None
    """single-object (default) or confluent (needs schema_registry_url); docs/kafka.md."""
    schema_registry_url: HttpUrl | None = None
    """The registry's Confluent-compatible API, e.g. http://registry:8080/apis/ccompat/v7."""
    schema_registry_username: NonEmpty | None = None
    """HTTP basic user of the registry (optional)."""
    schema_registry_password: SecretText | None = None
    """HTTP basic password of the registry (better: schema_registry_password_env)."""
    topics: dict[str, NonEmpty] | None = None
    """Physical topic names by logical name, when a deployment prefixes or renames them."""
    client: dict[str, Any] | None = None
    """Extra librdkafka properties for every client (TLS, SASL); values may be secrets and are never logged."""


class TimeoutsTable(Table):
    """`[integrations.NAME.timeouts]`: httpx timeouts per phase, in seconds."""

    connect: Annotated[float, Range(0.001, 600)] = TimeoutSettings.connect
    read: Annotated[float, Range(0.001, 600)] = TimeoutSettings.read
    write: Annotated[float, Range(0.001, 600)] = TimeoutSettings.write
    pool: Annotated[float, Range(0.001, 600)] = TimeoutSettings.pool


class RetryTable(Table):
    """`[integrations.NAME.retry]`: bounds of the bank client's retry policy (seconds unless noted)."""

    max_attempts: Annotated[int, Range(1, 20)] = RetrySettings.max_attempts
    """Tries per call, the first included."""
    base_delay: Annotated[float, Range(0, 60)] = RetrySettings.base_delay
    max_delay: Annotated[float, Range(0, 600)] = RetrySettings.max_delay
    max_elapsed: Annotated[float, Range(0, 3600)] = RetrySettings.max_elapsed
    max_retry_after: Annotated[float, Range(0, 3600)] = RetrySettings.max_retry_after
    """The longest Retry-After the client waits for."""


class IntegrationTable(Table):
    """`[integrations.NAME]`: one bank; batches name it in `integration`."""

    issuer: HttpUrl
    """The bank's authorization server."""
    resource_server: HttpUrl
    """The bank's payment API."""
    client_id: NonEmpty
    client_secret: SecretText
    """Basic credential = base64(client_id:client_secret); better given as client_secret_env."""
    redirect_uri: HttpUrl
    """Registered with the bank; its path is served by the callback API."""
    kid: NonEmpty
    """Key id of the signing key (JWS header)."""
    signing_key: SecretText | None = None
    """The RSA private key's PEM itself (usually signing_key_env); or signing_key_path."""
    signing_key_path: NonEmpty | None = None
    """A PEM file; a relative path is read from the configuration file's folder."""
    financial_id: NonEmpty
    """x-fapi-financial-id."""
    customer_ip: Annotated[str, Check(_ip, {"minLength": 1})]
    """x-fapi-customer-ip-address (an IP address)."""
    tpp_name: NonEmpty = "Dispersion"
    token_auth_method: Annotated[TokenAuthMethod, one_of(TOKEN_AUTH_METHODS)] = "private_key_jwt"
    grant_parameter: Annotated[GrantParameter, one_of(GRANT_PARAMETERS)] = "grand_type"
    """The token request's grant field name: grand_type (the spec's spelling) or grant_type."""
    assertion_signing: Annotated[AssertionSigning, one_of(ASSERTION_SIGNINGS)] = "local"
    """local, or remote (the spec's E2 operation; sends the key over the wire)."""
    assertion_lifetime: Annotated[int, Range(5, 3600)] = 60
    token_refresh_margin: Annotated[int, Range(0, 3600)] = 60
    max_connections: Annotated[int, Range(1, 1000)] = 16
    timezone: Annotated[str, Check(_timezone, {"minLength": 1})] = "UTC"
    """IANA time zone whose days a scheduled batch's execute_on names (the payment is made from its midnight)."""
    schedule_max_days: Annotated[int, Range(0, 3650)] = DEFAULT_MAX_DAYS_AHEAD
    """How many days ahead execute_on may be: keep the approval's token renewable on the day."""
    timeouts: TimeoutsTable = TimeoutsTable()
    retry: RetryTable = RetryTable()


class EngineTable(Table):
    """`[engine]`: the flow engine's tunables (processor/engine/settings.py owns the defaults and limits)."""

    authorization_deadline: Annotated[float, Range(*ENGINE_LIMITS["authorization_deadline"])] = (
        EngineSettings.authorization_deadline
    )
    """Seconds the approver has, from AUTHORIZATION_REQUIRED."""
    concurrency: Annotated[int, Range(*ENGINE_LIMITS["concurrency"])] = EngineSettings.concurrency
    """Flow steps run at once per instance."""
    lease_seconds: Annotated[float, Range(*ENGINE_LIMITS["lease_seconds"])] = EngineSettings.lease_seconds
    """How long a claimed flow is held (renewed while a step runs)."""
    idle_interval: Annotated[float, Range(*ENGINE_LIMITS["idle_interval"])] = EngineSettings.idle_interval
    """Seconds between claims when nothing is due."""
    poll_first: Annotated[float, Range(*ENGINE_LIMITS["poll_first"])] = EngineSettings.poll_first
    """First wait before re-reading a pending file payment."""
    poll_max: Annotated[float, Range(*ENGINE_LIMITS["poll_max"])] = EngineSettings.poll_max
    """Longest wait between two reads."""
    retry_first: Annotated[float, Range(*ENGINE_LIMITS["retry_first"])] = EngineSettings.retry_first
    """First wait after a failed (transient) bank call."""
    retry_max: Annotated[float, Range(*ENGINE_LIMITS["retry_max"])] = EngineSettings.retry_max
    """Longest wait between two tries."""
    attempt_ttl: Annotated[float, Range(*ENGINE_LIMITS["attempt_ttl"])] = EngineSettings.attempt_ttl
    """Seconds an authorization attempt (`state`) stays usable."""
    duplicate_wait: Annotated[float, Range(*ENGINE_LIMITS["duplicate_wait"])] = EngineSettings.duplicate_wait
    """A repeated redirect waits this long for the first one to finish."""
    exchange_recovery_after: Annotated[float, Range(*ENGINE_LIMITS["exchange_recovery_after"])] = (
        EngineSettings.exchange_recovery_after
    )
    """A used `state` whose code exchange left no tokens may be retried after this."""
    consent_watch_interval: Annotated[float, Range(*ENGINE_LIMITS["consent_watch_interval"])] = (
        EngineSettings.consent_watch_interval
    )
    """Seconds between two reads of a consent awaiting its approver (a rejection whose redirect was lost)."""
    mandate_watch_interval: Annotated[float, Range(*ENGINE_LIMITS["mandate_watch_interval"])] = (
        EngineSettings.mandate_watch_interval
    )
    """Seconds between two reads of an authorised VRP mandate's consent (revoked, rejected or expired at the bank),
    also read before a payment when the last read is older."""
    duplicate_window_days: Annotated[float, Range(*ENGINE_LIMITS["duplicate_window_days"])] = (
        EngineSettings.duplicate_window_days
    )
    """Days back a new batch's transfers are compared with other batches' (the duplicate-payroll guard); 0: off."""
    duplicate_overlap: Annotated[float, Range(*ENGINE_LIMITS["duplicate_overlap"])] = EngineSettings.duplicate_overlap
    """Share of a new batch's transfers (same account, same amount) another recent batch must hold to hold it."""


class TelemetryTable(Table):
    """`[telemetry]`: where traces go (processor/cli/telemetry.py; none by default)."""

    otlp_endpoint: HttpUrl | None = None
    """OTLP/HTTP collector, e.g. http://collector:4318 (spans to /v1/traces); default:
    $OTEL_EXPORTER_OTLP_ENDPOINT, else no traces are exported."""


SETTINGS_CONFIG = SettingsConfigDict(
    env_prefix=ENV_PREFIX,
    env_nested_delimiter=ENV_DELIMITER,
    case_sensitive=False,
    extra="allow",  # tables other parts own ([exports.NAME], ...) are kept raw in Config.sections
    frozen=True,
    hide_input_in_errors=True,
    use_attribute_docstrings=True,
    title="dispersion configuration",
)


class FileSettings(LayeredSettings):
    """The whole configuration file, environment overrides applied (sources: processor.cli.config_source)."""

    model_config = SETTINGS_CONFIG

    processor: ProcessorTable = ProcessorTable()
    kafka: KafkaTable = KafkaTable()
    engine: EngineTable = EngineTable()
    telemetry: TelemetryTable = TelemetryTable()
    integrations: Annotated[dict[str, IntegrationTable], Check(_tables, {"minProperties": 1})]
    """One table per bank integration: [integrations.NAME]."""
    exports: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """ERP export profiles for `dispersion submit --profile NAME` (docs/submit.md); checked by their owner."""


class KafkaFileSettings(LayeredSettings):
    """Only the `[kafka]` table (commands that read a topic need no integration secrets)."""

    model_config = SETTINGS_CONFIG | SettingsConfigDict(extra="ignore")

    kafka: KafkaTable = KafkaTable()


JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the configuration file, generated from the models: every string key `K` may also be
    written `K_env` (the name of an environment variable), so a required `K` is satisfied by either."""
    schema = FileSettings.model_json_schema()
    for table in (schema, *schema.get("$defs", {}).values()):
        _allow_env_keys(table)
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


def _is_text(prop: Mapping[str, Any]) -> bool:
    return prop.get("type") == "string" or any(alt.get("type") == "string" for alt in prop.get("anyOf", []))


def _allow_env_keys(table: dict[str, Any]) -> None:
    properties: dict[str, Any] = table.get("properties", {})
    texts = [name for name, prop in properties.items() if _is_text(prop)]
    for name in texts:
        properties[f"{name}_env"] = {
            "type": "string",
            "minLength": 1,
            "description": f"The name of an environment variable holding {name}.",
        }
    required = table.get("required", [])
    either = [name for name in required if name in texts]
    if either:
        table["required"] = [name for name in required if name not in texts]
        if not table["required"]:
            del table["required"]
        table["allOf"] = [{"anyOf": [{"required": [name]}, {"required": [f"{name}_env"]}]} for name in either]
