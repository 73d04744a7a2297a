"""The deployment's configuration file (TOML), parsed and validated once at start-up (pydantic-settings models in
`config_models`, sources and error places in `config_source`; this module builds what the commands use).

Layout (`dispersion sandbox init DIR` writes exactly this shape)::

    [processor]
    store = "sqlite:///var/lib/dispersion/dispersion.sqlite"   # or postgresql://...
    public_url = "http://127.0.0.1:8600"                       # callback API and approval links

    [kafka]
    bootstrap_servers = ""              # empty: the local broker / KAFKA_BOOTSTRAP_SERVERS

    [integrations.sandbox]              # one table per bank integration; the name is what batches refer to
    issuer = "http://127.0.0.1:8700"
    resource_server = "http://127.0.0.1:8700"
    client_id = "..."
    client_secret = "..."               # Basic credential = base64(client_id:client_secret)
    redirect_uri = "http://127.0.0.1:8600/callback"
    kid = "..."
    signing_key_path = "signing-key.pem"   # relative paths are read from the config file's folder
    financial_id = "0015800001041RHAAY"
    customer_ip = "127.0.0.1"
    tpp_name = "Dispersion"
    token_auth_method = "private_key_jwt"  # or "client_secret_basic"
    grant_parameter = "grand_type"         # or "grant_type"
    assertion_signing = "local"            # or "remote" (the spec's E2 operation; sends the key over the wire)

    [integrations.sandbox.timeouts]     # optional, seconds
    connect = 5.0
    read = 30.0

    [integrations.sandbox.retry]        # optional
    max_attempts = 5

    [engine]                            # optional: processor.engine.settings
    concurrency = 32

    [exports.planilla]                  # optional: how `dispersion submit --profile planilla` reads an ERP's
    decimal_separator = ","             # export; kept raw in Config.sections["exports"] and validated by
    [exports.planilla.columns]          # processor.exports.profile (docs/submit.md, "Bring your ERP's
    amount = "Monto"                    # export")

Any string key `K` may instead be given as `K_env = "VARIABLE"`, read from the environment (for secrets:
`client_secret_env`, `signing_key_env` holding the PEM itself, `store_env` for a DSN with a password). Any key at
all may be overridden by `DISPERSION__SECTION__KEY` (`DISPERSION__KAFKA__BOOTSTRAP_SERVERS`,
`DISPERSION__INTEGRATIONS__SANDBOX__CLIENT_SECRET`); the environment wins over the file. Errors name the place
and the key (`dispersion.toml:14: integrations.sandbox.kid: must not be empty`). Secrets never appear in a repr
or an error. docs/configuration.md has the details and the JSON Schema.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from pydantic import SecretStr

from processor.bank.integration import Integration, RetrySettings, TimeoutSettings
from processor.cli.config_models import (
    EngineTable,
    FileSettings,
    IntegrationTable,
    KafkaFileSettings,
    KafkaTable,
    redact_url,
)
from processor.cli.config_source import (
    KeyLines,
    Problems,
    read_settings,
    read_toml,
    resolve_env_keys,
    type_name,
    unknown_key,
)
from processor.domain.roles import NAME_PATTERN as _TOKEN_NAME
from processor.domain.roles import ROLE_NAMES, AdminToken, Controls, Role, controls_from, role_of
from processor.domain.settings import ConfigError, Secret
from processor.engine.settings import EngineSettings, engine_settings
from processor.kafka.settings import KNOWN_OPTIONS, settings_from
from processor.kafka.settings import KafkaSettings as KafkaClientSettings

__all__ = [
    "Config",
    "ConfigError",
    "Integration",
    "KafkaSettings",
    "ProcessorSettings",
    "RetrySettings",
    "Secret",
    "TimeoutSettings",
    "default_config_path",
    "load_config",
    "load_kafka_settings",
    "optional_config_path",
    "parse_config",
    "redact_url",
    "settings_from_config",
]

CONFIG_ENV = "DISPERSION_CONFIG"
# Tables the models here describe: `K_env` keys are resolved at every depth. In the tables other parts own, only
# their top-level keys are (as before): their nested names are theirs.
_MODELLED = ("processor", "kafka", "integrations", "engine")
_RESOLVED_DEEP = (*_MODELLED, "admin")  # `[admin.tokens.NAME] token_env` too


@dataclass(frozen=True)
class ProcessorSettings:
    """The `[processor]` table."""

    store: str = "sqlite:///dispersion.sqlite"
    public_url: str = "http://127.0.0.1:8600"

    def __repr__(self) -> str:
        return f"ProcessorSettings(store={redact_url(self.store)!r}, public_url={self.public_url!r})"


@dataclass(frozen=True)
class KafkaSettings:
    """The `[kafka]` table. Keys other than `bootstrap_servers` are kept in `options` for the Kafka parts."""

    bootstrap_servers: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"KafkaSettings(bootstrap_servers={self.bootstrap_servers!r}, options={sorted(self.options)!r})"


ADMIN_TOKEN_ENV = "DISPERSION_ADMIN_TOKEN"
_ADMIN_KEYS = {"token_sha256", "token", "url", "tokens"}
_TOKEN_KEYS = {"token_sha256", "token", "role"}
_HEX64 = frozenset("0123456789abcdef")
LEGACY_TOKEN_NAME = "admin"


@dataclass(frozen=True)
class AdminSettings:
    """The `[admin]` table: the personal tokens of the admin API (`[admin.tokens.NAME]`, each a `token_sha256`
    or a `token_env` whose value is hashed here, and a `role`) and, for the commands that call it, `url` (default:
    `[processor] public_url`). The older single `token_sha256` / `token_env` is the token named `admin`, with the
    `admin` role."""

    tokens: Mapping[str, AdminToken] = field(default_factory=dict)
    url: str | None = None
    token: Secret | None = None  # only when the older single token came through token_env (the commands send it)

    def __repr__(self) -> str:
        return f"AdminSettings(tokens={sorted(self.tokens)!r}, url={self.url!r})"


def _token_digest(raw: Mapping[str, Any], where: str) -> str:
    digest, token = raw.get("token_sha256"), raw.get("token")
    if digest is not None and token is not None:
        raise ConfigError(f"{where}: give token_sha256 or token_env, not both")
    if digest is None and token is None:
        raise ConfigError(f"{where}: give token_sha256 or token_env")
    if digest is not None and (not isinstance(digest, str) or len(digest) != 64 or set(digest.lower()) - _HEX64):
        raise ConfigError(f"{where}.token_sha256: must be 64 hex digits (sha256sum of the token)")
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        raise ConfigError(f"{where}.token_env: the token must be at least 16 characters")
    if token is not None:
        return hashlib.sha256(str(token).encode("utf-8")).hexdigest()
    return str(digest).lower()


def admin_settings(raw: Mapping[str, Any] | None, *, source: str = "<memory>") -> AdminSettings:
    """Validate an (env-resolved) `[admin]` table; ConfigError naming the key."""
    if not raw:
        return AdminSettings()
    for key in raw:
        if key not in _ADMIN_KEYS:
            raise ConfigError(f"{source}: admin.{key}: unknown key (known: token_sha256, token_env, tokens, url)")
    url = raw.get("url")
    if url is not None and (not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https")):
        raise ConfigError(f"{source}: admin.url: must be an http(s) address")
    tokens: dict[str, AdminToken] = {}
    if "token_sha256" in raw or "token" in raw:
        tokens[LEGACY_TOKEN_NAME] = AdminToken(LEGACY_TOKEN_NAME, _token_digest(raw, f"{source}: admin"), Role.ADMIN)
    table = raw.get("tokens") or {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: admin.tokens: must be a table of [admin.tokens.NAME] tables")
    for name, entry in table.items():
        where = f"{source}: admin.tokens.{name}"
        if not isinstance(entry, Mapping) or not _TOKEN_NAME.match(str(name)):
            raise ConfigError(f"{where}: must be a table (token_sha256 or token_env, role); a name is 1-64 ._@-")
        unknown = sorted(set(entry) - _TOKEN_KEYS)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown key (known: role, token_env, token_sha256)")
        role = role_of(entry.get("role"))
        if role is None:
            raise ConfigError(f"{where}.role: must be one of {ROLE_NAMES}, got {entry.get('role')!r}")
        if name in tokens:
            raise ConfigError(f"{where}: the name {name} is taken by [admin] token_sha256/token_env")
        tokens[str(name)] = AdminToken(str(name), _token_digest(entry, where), role)
    digests = [t.sha256 for t in tokens.values()]
    if len(set(digests)) != len(digests):
        raise ConfigError(f"{source}: admin.tokens: two names share one token (each person has their own)")
    legacy = raw.get("token")
    return AdminSettings(tokens, url, Secret(legacy) if isinstance(legacy, str) else None)


@dataclass(frozen=True)
class Config:
    """The whole file. Tables other parts own ([engine], [exports], ...) are kept in `sections` for them."""

    processor: ProcessorSettings
    kafka: KafkaSettings
    integrations: Mapping[str, Integration]
    source: str = "<memory>"
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def public_url(self) -> str:
        """The callback API's public address (approval links, redirect URI paths)."""
        return self.processor.public_url

    @property
    def engine(self) -> EngineSettings:
        """The `[engine]` table, validated (defaults when absent)."""
        return engine_settings(self.sections.get("engine"), source=self.source)

    @property
    def admin(self) -> AdminSettings:
        """The `[admin]` table, validated (no token: the admin API refuses every request)."""
        return admin_settings(self.sections.get("admin"), source=self.source)

    @property
    def controls(self) -> Controls:
        """The `[controls]` table, validated (defaults when absent: four eyes, changed accounts held)."""
        try:
            return controls_from(self.sections.get("controls"))
        except ValueError as exc:
            raise ConfigError(f"{self.source}: {exc}") from None

    @property
    def otlp_endpoint(self) -> str | None:
        """`[telemetry] otlp_endpoint`: the OTLP/HTTP collector traces go to (None: not configured)."""
        value = self.sections.get("telemetry", {}).get("otlp_endpoint")
        return None if value is None else str(value)

    def integration(self, name: str) -> Integration:
        """The named integration; a KeyError listing the configured ones otherwise."""
        try:
            return self.integrations[name]
        except KeyError:
            known = ", ".join(sorted(self.integrations)) or "none"
            raise KeyError(f"integration {name!r} is not configured in {self.source} (configured: {known})") from None

    def __repr__(self) -> str:
        return (
            f"Config(source={self.source!r}, processor={self.processor!r}, kafka={self.kafka!r}, "
            f"integrations={dict(self.integrations)!r}, sections={sorted(self.sections)!r})"
        )


def default_config_path() -> Path:
    """`$DISPERSION_CONFIG`, else `./dispersion.toml`."""
    return Path(os.environ.get(CONFIG_ENV) or "dispersion.toml")


def optional_config_path(explicit: str | None) -> str | None:
    """For commands that also work without a configuration file (`submit`, `status`, `topics`): `explicit`,
    else `$DISPERSION_CONFIG`, else `./dispersion.toml` when it exists, else None."""
    if explicit is not None:
        return explicit
    default = default_config_path()
    return str(default) if os.environ.get(CONFIG_ENV) or default.is_file() else None


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read, resolve (`*_env` keys, `DISPERSION__...` overrides) and validate a configuration file; ConfigError
    naming file, line and key of every problem."""
    file = Path(path)
    data, lines = read_toml(file)
    return _parse(data, file.resolve().parent, os.environ if environ is None else environ, str(file), lines)


def load_kafka_settings(path: str | Path, environ: Mapping[str, str] | None = None) -> KafkaSettings:
    """Only the `[kafka]` table of a configuration file, for commands that need nothing else (`status`,
    `topics`): the integrations' secrets need not be set to read a topic."""
    file = Path(path)
    data, lines = read_toml(file)
    environ = os.environ if environ is None else environ
    problems = Problems(str(file), lines)
    resolved = _resolve({"kafka": data.get("kafka", {})}, environ, problems)
    settings = read_settings(KafkaFileSettings, resolved, environ, problems)
    kafka = _kafka(settings.kafka, problems) if settings else None
    problems.raise_any()
    return kafka or KafkaSettings()


def parse_config(
    data: Mapping[str, Any],
    *,
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    source: str = "<memory>",
) -> Config:
    """Validate an already parsed TOML document (see the module docstring for the layout)."""
    return _parse(data, base_dir or Path.cwd(), os.environ if environ is None else environ, source, None)


def settings_from_config(path: str | None, *, bootstrap: str | None = None) -> KafkaClientSettings:
    """Kafka client settings from a configuration file: `path` (`--config`), else `$DISPERSION_CONFIG`, else
    `./dispersion.toml` when present, else none (`--bootstrap` / the environment alone)."""
    # Only the [kafka] table is read, so the integrations' secrets need not be set to read or create a topic.
    path = optional_config_path(path)
    if path is None:
        return settings_from(bootstrap=bootstrap)
    kafka = load_kafka_settings(path)
    return settings_from(kafka.options, bootstrap=bootstrap, configured=kafka.bootstrap_servers)


# -- building what the commands use ----------------------------------------------------------------------------


def _parse(
    data: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str], source: str, lines: KeyLines | None
) -> Config:
    problems = Problems(source, lines)
    settings = read_settings(FileSettings, _resolve(data, environ, problems), environ, problems)
    config = _config(settings, base_dir, source, problems) if settings else None
    problems.raise_any()
    if config is None:  # unreachable: no config means problems were raised above
        raise ConfigError(f"{source}: unusable configuration")
    return config


def _resolve(data: Mapping[str, Any], environ: Mapping[str, str], problems: Problems) -> dict[str, Any]:
    """The document with `K_env` keys replaced by their variables' values."""
    return {
        name: resolve_env_keys(table, (name,), environ, problems, recursive=name in _RESOLVED_DEEP)
        if isinstance(table, Mapping)
        else table
        for name, table in data.items()
    }


def _config(settings: FileSettings, base_dir: Path, source: str, problems: Problems) -> Config | None:
    integrations = {
        name: _integration(name, table, base_dir, problems) for name, table in settings.integrations.items()
    }
    sections: dict[str, Mapping[str, Any]] = {}
    for name, value in (settings.model_extra or {}).items():
        if isinstance(value, Mapping):
            sections[name] = _plain(value)
        else:
            problems.add((name,), f"must be a table, not {type_name(value)}")
    if "engine" in settings.model_fields_set:
        sections["engine"] = _engine(settings.engine, problems)
    if "exports" in settings.model_fields_set:
        sections["exports"] = _plain(settings.exports)
    if "telemetry" in settings.model_fields_set:
        sections["telemetry"] = _plain(settings.telemetry.model_dump())
    kafka = _kafka(settings.kafka, problems)
    if problems.found:
        return None
    return Config(
        processor=ProcessorSettings(store=settings.processor.store, public_url=settings.processor.public_url),
        kafka=kafka,
        integrations={name: integration for name, integration in integrations.items() if integration},
        source=source,
        sections=sections,
    )


def _plain(value: Any) -> Any:
    """Environment text as `str`, secrets revealed (for the parts that take raw tables)."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value) if isinstance(value, str) else value


def _kafka(table: KafkaTable, problems: Problems) -> KafkaSettings:
    for key in table.model_extra or {}:
        if key not in KNOWN_OPTIONS:
            problems.add(("kafka", key), unknown_key(key, sorted(set(KafkaTable.model_fields) | KNOWN_OPTIONS)))
    options = _plain(table.model_dump(exclude_unset=True))
    options.pop("bootstrap_servers", None)
    return KafkaSettings(table.bootstrap_servers.strip(), options)


def _engine(table: EngineTable, problems: Problems) -> dict[str, Any]:
    for slow, fast in (("poll_max", "poll_first"), ("retry_max", "retry_first")):
        if getattr(table, slow) < getattr(table, fast):
            problems.add(("engine", slow), f"must not be smaller than {fast}")
    values: dict[str, Any] = table.model_dump(exclude_unset=True)
    return values


def _integration(name: str, table: IntegrationTable, base_dir: Path, problems: Problems) -> Integration | None:
    where = ("integrations", name)
    if table.retry.max_delay < table.retry.base_delay:
        problems.add((*where, "retry", "max_delay"), "must not be smaller than base_delay")
    key = _signing_key(table, where, base_dir, problems)
    if key is None:
        return None
    pem, path = key
    return Integration(
        name=name,
        issuer=table.issuer,
        resource_server=table.resource_server.rstrip("/"),
        client_id=table.client_id,
        client_secret=Secret(table.client_secret.get_secret_value()),
        redirect_uri=table.redirect_uri,
        kid=table.kid,
        signing_key_pem=pem,
        signing_key_path=path,
        financial_id=table.financial_id,
        customer_ip=table.customer_ip,
        tpp_name=table.tpp_name,
        token_auth_method=table.token_auth_method,
        grant_parameter=table.grant_parameter,
        assertion_signing=table.assertion_signing,
        assertion_lifetime=table.assertion_lifetime,
        token_refresh_margin=table.token_refresh_margin,
        max_connections=table.max_connections,
        timezone=table.timezone,
        schedule_max_days=table.schedule_max_days,
        timeouts=TimeoutSettings(**table.timeouts.model_dump()),
        retry=RetrySettings(**table.retry.model_dump()),
    )


def _signing_key(
    table: IntegrationTable, where: tuple[str, ...], base_dir: Path, problems: Problems
) -> tuple[Secret, Path | None] | None:
    """The PEM from `signing_key` (inline, usually via signing_key_env) or `signing_key_path`, checked to be an
    RSA key of 2048 bits at least."""
    path: Path | None = None
    if table.signing_key is not None and table.signing_key_path is not None:
        problems.add((*where, "signing_key"), "give either signing_key or signing_key_path, not both")
        return None
    if table.signing_key is not None:
        key = "signing_key"
        pem = table.signing_key.get_secret_value().encode()
    elif table.signing_key_path is not None:
        key = "signing_key_path"
        path = Path(table.signing_key_path).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        try:
            pem = path.read_bytes()
        except OSError as exc:
            problems.add((*where, key), f"cannot read {path} ({exc.strerror or exc})")
            return None
    else:
        problems.add((*where, "signing_key_path"), "is required (or give signing_key_path_env, or signing_key_env)")
        return None
    try:
        private = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        problems.add((*where, key), f"not an unencrypted PEM private key ({exc.__class__.__name__})")
        return None
    if not isinstance(private, rsa.RSAPrivateKey):
        problems.add((*where, key), "must be an RSA private key (PS256 signing)")
        return None
    if private.key_size < 2048:
        problems.add((*where, key), f"RSA key of {private.key_size} bits is too short (2048 at least)")
        return None
    return Secret(pem.decode("ascii")), path


def load_admin_client(path: str | Path, environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """For the commands that call the admin API: its base URL (`[admin] url`, else `[processor] public_url`) and
    the token (`$DISPERSION_ADMIN_TOKEN`, else the variable `[admin] token_env` names), from the file's `[admin]`
    and `[processor]` tables only (the integrations' secrets need not be set)."""
    env = os.environ if environ is None else environ
    file = Path(path)
    data, _ = read_toml(file)
    admin = data.get("admin") or {}
    processor = data.get("processor") or {}
    if not isinstance(admin, dict) or not isinstance(processor, dict):
        raise ConfigError(f"{file}: [admin] and [processor] must be tables")
    url = admin.get("url") or processor.get("public_url") or ProcessorSettings().public_url
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise ConfigError(f"{file}: admin.url: must be an http(s) address")
    token = env.get(ADMIN_TOKEN_ENV)
    variable = admin.get("token_env")
    if not token and isinstance(variable, str) and variable:
        token = env.get(variable)
    return url.rstrip("/"), token or None
