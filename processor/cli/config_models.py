"""The configuration file as one pydantic-settings model, `Config`: every table, its types, defaults, bounds
(`Field` constraints and validators, each declared once where its owner lives: `[engine]` in
processor.engine.settings, the integrations in processor.bank.integration, `[controls]` in processor.domain.roles)
and the JSON Schema. The commands use these models as they are; processor.cli.config reads a file into them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, cast
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from processor.api.console.auth import ConsoleTable
from processor.bank.integration import Integration
from processor.domain.roles import AdminToken, Controls, PersonName, Role
from processor.domain.settings import EnvText, HttpUrl, NonEmpty, Secret, Table, problem, redact_url
from processor.engine.settings import EngineSettings
from processor.kafka.settings import KafkaTable

AT_LEAST_ONE_INTEGRATION = "at least one [integrations.NAME] table is required"
LEGACY_TOKEN_NAME = "admin"


def _store(text: str) -> str:
    if urlsplit(text).scheme.split("+")[0] not in ("sqlite", "postgresql", "postgres"):
        raise problem(f"must be a sqlite:/// or postgresql:// address, got {redact_url(text)!r}")
    return text


class ProcessorTable(Table):
    """`[processor]`: where the flows are stored and where browsers reach the callback API."""

    store: Annotated[
        NonEmpty,
        AfterValidator(_store),
        Field(json_schema_extra={"pattern": "^(sqlite|postgresql|postgres)(\\+[a-z0-9]+)?:"}),
    ] = "sqlite:///dispersion.sqlite"
    """sqlite:///PATH or postgresql://USER@HOST:PORT/DB (a password belongs in store_env)."""
    public_url: HttpUrl = "http://127.0.0.1:8600"
    """The callback API's public address: approval links and the redirect URI's host."""
    store_threads: Annotated[int, Field(ge=1, le=32)] = 2
    """Store transactions the processor runs at once (its worker threads); more serve a distant database's
    round trips in parallel, fewer leave the event loop more of the CPU (docs/capacity.md)."""

    def __repr_args__(self) -> Any:
        return [
            ("store", redact_url(self.store)),
            ("public_url", self.public_url),
            ("store_threads", self.store_threads),
        ]


class TelemetryTable(Table):
    """`[telemetry]`: where traces go (processor/cli/telemetry.py; none by default)."""

    otlp_endpoint: HttpUrl | None = None
    """OTLP/HTTP collector, e.g. http://collector:4318 (spans to /v1/traces); default:
    $OTEL_EXPORTER_OTLP_ENDPOINT, else no traces are exported."""


def _hex64(text: str) -> str:
    if len(text) != 64 or set(text.lower()) - set("0123456789abcdef"):
        raise problem("must be 64 hex digits (sha256sum of the token)")
    return text.lower()


Digest = Annotated[str, AfterValidator(_hex64), Field(json_schema_extra={"pattern": "^[0-9a-fA-F]{64}$"})]
Token = Annotated[Secret, Field(min_length=16)]


class AdminTokenTable(Table):
    """`[admin.tokens.NAME]`: one person's admin API token and role."""

    token_sha256: Digest | None = None
    """sha256sum of the token (or token_env: the token itself, hashed here)."""
    token: Token | None = None
    role: Role = Field(strict=False)
    """viewer, operator, approver or admin."""

    @model_validator(mode="after")
    def _one_token(self) -> AdminTokenTable:
        if (self.token_sha256 is None) == (self.token is None):
            raise problem("give token_sha256 or token_env" + (", not both" if self.token else ""))
        return self

    @property
    def sha256(self) -> str:
        """The token's SHA-256 (what the admin API compares)."""
        return hashlib.sha256(self.token.reveal().encode()).hexdigest() if self.token else str(self.token_sha256)


class AdminTable(Table):
    """`[admin]`: the personal tokens of the admin API and, for the commands that call it, `url` (default:
    `[processor] public_url`). The older single `token_sha256` / `token_env` is the token named `admin`, with the
    `admin` role; without any token the admin API refuses every request."""

    token_sha256: Digest | None = None
    token: Token | None = None
    url: HttpUrl | None = None
    tokens: dict[PersonName, AdminTokenTable] = {}

    @model_validator(mode="after")
    def _names(self) -> AdminTable:
        if self.token_sha256 is not None and self.token is not None:
            raise problem("give token_sha256 or token_env, not both")
        if LEGACY_TOKEN_NAME in self.tokens and (self.token_sha256 or self.token):
            raise problem(f"tokens.{LEGACY_TOKEN_NAME}: the name is taken by [admin] token_sha256/token_env")
        digests = [token.sha256 for token in self.by_name.values()]
        if len(set(digests)) != len(digests):
            raise problem("tokens: two names share one token (each person has their own)")
        return self

    @property
    def by_name(self) -> dict[str, AdminToken]:
        """Every token by its holder's name."""
        named = {name: AdminToken(name, table.sha256, table.role) for name, table in self.tokens.items()}
        if self.token_sha256 or self.token:
            legacy = AdminTokenTable(token_sha256=self.token_sha256, token=self.token, role=Role.ADMIN)
            named[LEGACY_TOKEN_NAME] = AdminToken(LEGACY_TOKEN_NAME, legacy.sha256, Role.ADMIN)
        return named


ENV_PREFIX, ENV_DELIMITER = "DISPERSION__", "__"
# Tables whose keys are free names the environment cannot spell (`"security.protocol"`, `"payroll.batches"`):
# an override's `_` stands for the `.` of the name (`DISPERSION__KAFKA__CLIENT__SASL_PASSWORD` is `sasl.password`).
DOTTED_NAME_TABLES = frozenset({("kafka", "client"), ("kafka", "topics")})
KeyPath = tuple[str, ...]


@dataclass
class Load:
    """One reading of a configuration: its environment, the file's (K_env-resolved) values, the file's folder, and
    which variable set which key (for messages)."""

    environ: Mapping[str, str]
    file: Mapping[str, Any]
    base_dir: Path
    overrides: dict[KeyPath, str] = field(default_factory=dict)


LOADING: ContextVar[Load | None] = ContextVar("dispersion_config_load", default=None)


class EnvironmentSource(PydanticBaseSettingsSource):
    """The `DISPERSION__SECTION__KEY` variables of the reading's environment as nested tables (any case, `__`
    between levels; a value starting with `{` is a table in JSON), names spelled as the file spells them, text as
    `EnvText` (converted to each key's type by its table). A model built outside a reading takes no overrides."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        """Unused: the whole document is returned by `__call__`."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        load = LOADING.get()
        out: dict[str, Any] = {}
        if load is None:
            return out
        for variable, value in load.environ.items():
            if not variable.upper().startswith(ENV_PREFIX) or not all(variable[len(ENV_PREFIX) :].split("__")):
                continue
            parts = variable[len(ENV_PREFIX) :].lower().split(ENV_DELIMITER)
            node, file, path = out, cast(Any, load.file), cast(KeyPath, ())
            for depth, part in enumerate(parts):
                name, named = _spelled(part, file, path), ENV_PREFIX + ENV_DELIMITER.join(parts[: depth + 1]).upper()
                path = (*path, name)
                file = file.get(name) if isinstance(file, Mapping) else None
                if depth == len(parts) - 1:
                    node[name] = _env_value(value)
                    load.overrides[path] = named
                elif isinstance(node.setdefault(name, {}), dict):
                    if file is None:  # a table only the environment gives: what it lacks is asked of it too
                        load.overrides.setdefault(path, named + "__...")
                    node = node[name]
                else:
                    break
        return out


def _spelled(part: str, file: Any, path: KeyPath) -> str:
    dotted = path in DOTTED_NAME_TABLES
    for key in file if isinstance(file, Mapping) else ():
        if key.lower() == part or (dotted and key.lower().replace(".", "_") == part):
            return str(key)
    return part.replace("_", ".") if dotted else part


def _env_value(text: str) -> Any:
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return EnvText(text)


SETTINGS = SettingsConfigDict(
    extra="allow",  # tables no model describes are kept (model_extra) for whoever reads them
    frozen=True,
    strict=True,
    hide_input_in_errors=True,
    use_attribute_docstrings=True,
    validate_default=True,
    title="dispersion configuration",
)


class Layered(BaseSettings):
    """A settings model read by processor.cli.config: the environment's `DISPERSION__...` overrides over the
    file's values (given as the init values)."""

    model_config = SETTINGS
    _source: str = PrivateAttr("<memory>")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The environment first (it wins), then the file; no dotenv, no secrets folder."""
        return EnvironmentSource(settings_cls), init_settings

    @property
    def source(self) -> str:
        """The file it was read from (for messages)."""
        return self._source


class Config(Layered):
    """The whole configuration file, environment overrides applied."""

    processor: ProcessorTable = ProcessorTable()
    kafka: KafkaTable = KafkaTable()
    engine: EngineSettings = EngineSettings()
    telemetry: TelemetryTable = TelemetryTable()
    integrations: dict[str, Integration] = Field(min_length=1)
    """One table per bank integration: [integrations.NAME]."""
    exports: dict[str, dict[str, Any]] = {}
    """ERP export profiles for `dispersion submit --profile NAME` (docs/submit.md); checked by their owner."""
    admin: AdminTable = AdminTable()
    controls: Controls = Controls()
    console: ConsoleTable = ConsoleTable()

    @field_validator("integrations", mode="before")
    @classmethod
    def _named(cls, tables: Any) -> Any:
        """Each integration knows its name; a relative signing_key_path is read from the file's folder."""
        if not isinstance(tables, Mapping):
            return tables
        load = LOADING.get()
        named = {}
        for name, table in tables.items():
            if isinstance(table, Mapping):
                table = {**table, "name": name}
                path = table.get("signing_key_path")
                if load is not None and isinstance(path, str) and path and not Path(path).expanduser().is_absolute():
                    table["signing_key_path"] = str(load.base_dir / path)
            named[name] = table
        return named

    @property
    def public_url(self) -> str:
        """The callback API's public address (approval links, redirect URI paths)."""
        return self.processor.public_url


class KafkaOnly(Layered):
    """Only `[kafka]`, for commands that read a topic (the integrations' secrets need not be set)."""

    model_config = SETTINGS | SettingsConfigDict(extra="ignore")
    kafka: KafkaTable = KafkaTable()


class AdminCaller(Table):
    """What a command calling the admin API reads of `[admin]`."""

    model_config = Table.model_config | {"extra": "ignore"}
    url: HttpUrl | None = None
    token: Secret | None = None


class AdminClientOnly(Layered):
    """`[processor]` and `[admin]`, for commands that call the admin API."""

    model_config = SETTINGS | SettingsConfigDict(extra="ignore")
    processor: ProcessorTable = ProcessorTable()
    admin: AdminCaller = AdminCaller()


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the configuration file, generated from the models: every string key `K` may also be
    written `K_env` (the name of an environment variable), so a required `K` is satisfied by either."""
    schema = Config.model_json_schema()
    for table in (schema, *schema.get("$defs", {}).values()):
        _allow_env_keys(table)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


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
