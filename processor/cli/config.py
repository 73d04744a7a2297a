"""The deployment's configuration file (TOML), parsed and validated once at start-up.

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

Any string key `K` may instead be given as `K_env = "VARIABLE"`, read from the environment (for secrets:
`client_secret_env`, `signing_key_env` holding the PEM itself, `store_env` for a DSN with a password).
Errors name the offending key (`integrations.sandbox.client_secret: ...`). Secrets never appear in a repr.
"""

from __future__ import annotations

import difflib
import hashlib
import ipaddress
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast
from urllib.parse import urlsplit, urlunsplit

from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from processor.bank.integration import (
    ASSERTION_SIGNINGS,
    GRANT_PARAMETERS,
    TOKEN_AUTH_METHODS,
    AssertionSigning,
    GrantParameter,
    Integration,
    RetrySettings,
    TimeoutSettings,
    TokenAuthMethod,
)
from processor.domain.settings import ConfigError, Secret
from processor.engine.settings import EngineSettings, engine_settings
from producers.kafka import KafkaSettings as KafkaClientSettings
from producers.kafka import settings_from

CONFIG_ENV = "DISPERSION_CONFIG"
ENV_SUFFIX = "_env"


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
_ADMIN_KEYS = {"token_sha256", "token", "url"}
_HEX64 = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class AdminSettings:
    """The `[admin]` table: the admin API's token as its SHA-256 (`token_sha256 = "..."`, or `token_env = "VAR"`
    whose value is hashed here) and, for the commands that call it, `url` (default: `[processor] public_url`)."""

    token_sha256: str | None = None
    url: str | None = None
    token: Secret | None = None  # only when given through token_env (the commands send it)

    def __repr__(self) -> str:
        return f"AdminSettings(configured={self.token_sha256 is not None}, url={self.url!r})"


def admin_settings(raw: Mapping[str, Any] | None, *, source: str = "<memory>") -> AdminSettings:
    """Validate an (env-resolved) `[admin]` table; ConfigError naming the key."""
    if not raw:
        return AdminSettings()
    for key in raw:
        if key not in _ADMIN_KEYS:
            raise ConfigError(f"{source}: admin.{key}: unknown key (known: token_sha256, token_env, url)")
    digest, token, url = raw.get("token_sha256"), raw.get("token"), raw.get("url")
    if digest is not None and token is not None:
        raise ConfigError(f"{source}: admin: give token_sha256 or token_env, not both")
    if digest is not None and (not isinstance(digest, str) or len(digest) != 64 or set(digest.lower()) - _HEX64):
        raise ConfigError(f"{source}: admin.token_sha256: must be 64 hex digits (sha256sum of the token)")
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        raise ConfigError(f"{source}: admin.token_env: the token must be at least 16 characters")
    if url is not None and (not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https")):
        raise ConfigError(f"{source}: admin.url: must be an http(s) address")
    if token is not None:
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
    return AdminSettings(
        digest.lower() if isinstance(digest, str) else None, url, Secret(token) if token is not None else None
    )


@dataclass(frozen=True)
class Config:
    """The whole file. Unknown top-level tables are kept, raw, in `sections` for the parts that own them."""

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


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the configuration file ({exc.strerror or exc})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML ({exc})") from None


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read, resolve (`*_env` keys) and validate a configuration file; ConfigError on any problem."""
    file = Path(path)
    return parse_config(_read_toml(file), base_dir=file.resolve().parent, environ=environ, source=str(file))


def load_kafka_settings(path: str | Path, environ: Mapping[str, str] | None = None) -> KafkaSettings:
    """Only the `[kafka]` table of a configuration file, for commands that need nothing else (`status`,
    `topics`): the integrations' secrets need not be set to read a topic."""
    file = Path(path)
    reader = _Reader(str(file), file.resolve().parent, os.environ if environ is None else environ)
    return reader.kafka(_read_toml(file).get("kafka", {}))


def parse_config(
    data: Mapping[str, Any],
    *,
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    source: str = "<memory>",
) -> Config:
    """Validate an already parsed TOML document (see the module docstring for the layout)."""
    reader = _Reader(source, base_dir or Path.cwd(), os.environ if environ is None else environ)
    return reader.config(data)


_INTEGRATION_KEYS = {
    "issuer",
    "resource_server",
    "client_id",
    "client_secret",
    "redirect_uri",
    "kid",
    "signing_key_path",
    "signing_key",
    "financial_id",
    "customer_ip",
    "tpp_name",
    "token_auth_method",
    "grant_parameter",
    "assertion_signing",
    "assertion_lifetime",
    "token_refresh_margin",
    "max_connections",
    "timeouts",
    "retry",
}
_TIMEOUT_KEYS = {"connect", "read", "write", "pool"}
_RETRY_KEYS = {"max_attempts", "base_delay", "max_delay", "max_elapsed", "max_retry_after"}
_PROCESSOR_KEYS = {"store", "public_url"}
_STORE_SCHEMES = ("sqlite", "postgresql", "postgres")


class _Reader:
    """Walks the parsed TOML, resolving `*_env` keys and raising ConfigError naming the dotted key."""

    def __init__(self, source: str, base_dir: Path, environ: Mapping[str, str]) -> None:
        self.source = source
        self.base_dir = base_dir
        self.environ = environ

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigError(f"{self.source}: {key}: {problem}")

    # -- tables and env resolution -------------------------------------------------------------------------

    def table(self, value: object, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, f"must be a table, not {type(value).__name__}")
        return self.resolve_env(cast(dict[str, Any], value), where)

    def resolve_env(self, table: dict[str, Any], where: str) -> dict[str, Any]:
        """Replace every `K_env = "VAR"` by `K = <value of VAR>`."""
        out = {k: v for k, v in table.items() if not k.endswith(ENV_SUFFIX)}
        for key, var in table.items():
            if not key.endswith(ENV_SUFFIX):
                continue
            target = key[: -len(ENV_SUFFIX)]
            dotted = f"{where}.{key}"
            if not target:
                self.fail(dotted, "an `_env` key needs a name before the suffix")
            if target in table:
                self.fail(dotted, f"give either {target} or {key}, not both")
            if not isinstance(var, str) or not var:
                self.fail(dotted, "must name an environment variable (a non-empty string)")
            value = self.environ.get(var)
            if value is None or value == "":
                self.fail(dotted, f"environment variable {var} is not set or empty")
            out[target] = value
        return out

    def reject_unknown(self, table: Mapping[str, Any], allowed: set[str], where: str) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.fail(f"{where}.{key}", f"unknown key{hint}")

    # -- scalars -------------------------------------------------------------------------------------------

    def string(self, table: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
        if key not in table:
            if default is None:
                self.fail(f"{where}.{key}", f"is required (or give {key}{ENV_SUFFIX})")
            return default
        value = table[key]
        if not isinstance(value, str):
            self.fail(f"{where}.{key}", f"must be a string, not {type(value).__name__}")
        return value

    def nonempty(self, table: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
        value = self.string(table, key, where, default)
        if not value.strip():
            self.fail(f"{where}.{key}", "must not be empty")
        return value

    def url(self, table: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
        value = self.nonempty(table, key, where, default)
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self.fail(f"{where}.{key}", f"must be an absolute http(s) address, got {value!r}")
        if parts.query or parts.fragment:
            self.fail(f"{where}.{key}", "must not carry a query or fragment")
        return value

    def choice(self, table: Mapping[str, Any], key: str, where: str, options: tuple[str, ...]) -> str:
        value = self.string(table, key, where, options[0])
        if value not in options:
            self.fail(f"{where}.{key}", f"must be one of {', '.join(repr(o) for o in options)}, got {value!r}")
        return value

    def number(
        self, table: Mapping[str, Any], key: str, where: str, default: float, *, minimum: float, maximum: float
    ) -> float:
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.fail(f"{where}.{key}", f"must be a number of seconds, got {value!r}")
        if not minimum <= value <= maximum:
            self.fail(f"{where}.{key}", f"must be between {minimum:g} and {maximum:g}, got {value!r}")
        return float(value)

    def integer(
        self, table: Mapping[str, Any], key: str, where: str, default: int, *, minimum: int, maximum: int
    ) -> int:
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{where}.{key}", f"must be an integer, got {value!r}")
        if not minimum <= value <= maximum:
            self.fail(f"{where}.{key}", f"must be between {minimum} and {maximum}, got {value!r}")
        return value

    # -- sections ------------------------------------------------------------------------------------------

    def config(self, data: Mapping[str, Any]) -> Config:
        sections = {k: v for k, v in data.items() if k not in ("processor", "kafka", "integrations")}
        extra: dict[str, Mapping[str, Any]] = {}
        for name, value in sections.items():
            extra[name] = self.table(value, name)
        integrations_raw = self.table(data.get("integrations", {}), "integrations")
        if not integrations_raw:
            self.fail("integrations", "at least one [integrations.NAME] table is required")
        integrations = {name: self.integration(name, raw) for name, raw in integrations_raw.items()}
        return Config(
            processor=self.processor(data.get("processor", {})),
            kafka=self.kafka(data.get("kafka", {})),
            integrations=integrations,
            source=self.source,
            sections=extra,
        )

    def processor(self, raw: object) -> ProcessorSettings:
        table = self.table(raw, "processor")
        self.reject_unknown(table, _PROCESSOR_KEYS, "processor")
        defaults = ProcessorSettings()
        store = self.nonempty(table, "store", "processor", defaults.store)
        scheme = urlsplit(store).scheme.split("+")[0]
        if scheme not in _STORE_SCHEMES:
            self.fail("processor.store", f"must be a sqlite:/// or postgresql:// address, got {redact_url(store)!r}")
        return ProcessorSettings(
            store=store, public_url=self.url(table, "public_url", "processor", defaults.public_url)
        )

    def kafka(self, raw: object) -> KafkaSettings:
        table = self.table(raw, "kafka")
        servers = self.string(table, "bootstrap_servers", "kafka", "")
        return KafkaSettings(servers.strip(), {k: v for k, v in table.items() if k != "bootstrap_servers"})

    def integration(self, name: str, raw: object) -> Integration:
        where = f"integrations.{name}"
        table = self.table(raw, where)
        self.reject_unknown(table, _INTEGRATION_KEYS, where)
        customer_ip = self.nonempty(table, "customer_ip", where)
        try:
            ipaddress.ip_address(customer_ip.strip())
        except ValueError:
            self.fail(f"{where}.customer_ip", f"must be an IP address, got {customer_ip!r}")
        key_pem, key_path = self.signing_key(table, where)
        return Integration(
            name=name,
            issuer=self.url(table, "issuer", where),
            resource_server=self.url(table, "resource_server", where).rstrip("/"),
            client_id=self.nonempty(table, "client_id", where),
            client_secret=Secret(self.nonempty(table, "client_secret", where)),
            redirect_uri=self.url(table, "redirect_uri", where),
            kid=self.nonempty(table, "kid", where),
            signing_key_pem=key_pem,
            signing_key_path=key_path,
            financial_id=self.nonempty(table, "financial_id", where),
            customer_ip=customer_ip.strip(),
            tpp_name=self.nonempty(table, "tpp_name", where, "Dispersion"),
            token_auth_method=cast(TokenAuthMethod, self.choice(table, "token_auth_method", where, TOKEN_AUTH_METHODS)),
            grant_parameter=cast(GrantParameter, self.choice(table, "grant_parameter", where, GRANT_PARAMETERS)),
            assertion_signing=cast(
                AssertionSigning, self.choice(table, "assertion_signing", where, ASSERTION_SIGNINGS)
            ),
            assertion_lifetime=self.integer(table, "assertion_lifetime", where, 60, minimum=5, maximum=3600),
            token_refresh_margin=self.integer(table, "token_refresh_margin", where, 60, minimum=0, maximum=3600),
            max_connections=self.integer(table, "max_connections", where, 16, minimum=1, maximum=1000),
            timeouts=self.timeouts(table.get("timeouts", {}), f"{where}.timeouts"),
            retry=self.retry(table.get("retry", {}), f"{where}.retry"),
        )

    def signing_key(self, table: Mapping[str, Any], where: str) -> tuple[Secret, Path | None]:
        """The PEM from `signing_key` (inline, usually via signing_key_env) or `signing_key_path`."""
        if "signing_key" in table and "signing_key_path" in table:
            self.fail(f"{where}.signing_key", "give either signing_key or signing_key_path, not both")
        path: Path | None = None
        if "signing_key" in table:
            key = "signing_key"
            pem = self.nonempty(table, "signing_key", where).encode()
        else:
            key = "signing_key_path"
            path = Path(self.nonempty(table, "signing_key_path", where)).expanduser()
            if not path.is_absolute():
                path = self.base_dir / path
            try:
                pem = path.read_bytes()
            except OSError as exc:
                self.fail(f"{where}.{key}", f"cannot read {path} ({exc.strerror or exc})")
        try:
            private = load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            self.fail(f"{where}.{key}", f"not an unencrypted PEM private key ({exc.__class__.__name__})")
        if not isinstance(private, rsa.RSAPrivateKey):
            self.fail(f"{where}.{key}", "must be an RSA private key (PS256 signing)")
        if private.key_size < 2048:
            self.fail(f"{where}.{key}", f"RSA key of {private.key_size} bits is too short (2048 at least)")
        return Secret(pem.decode("ascii")), path

    def timeouts(self, raw: object, where: str) -> TimeoutSettings:
        table = self.table(raw, where)
        self.reject_unknown(table, _TIMEOUT_KEYS, where)
        d = TimeoutSettings()
        return TimeoutSettings(
            connect=self.number(table, "connect", where, d.connect, minimum=0.001, maximum=600),
            read=self.number(table, "read", where, d.read, minimum=0.001, maximum=600),
            write=self.number(table, "write", where, d.write, minimum=0.001, maximum=600),
            pool=self.number(table, "pool", where, d.pool, minimum=0.001, maximum=600),
        )

    def retry(self, raw: object, where: str) -> RetrySettings:
        table = self.table(raw, where)
        self.reject_unknown(table, _RETRY_KEYS, where)
        d = RetrySettings()
        settings = RetrySettings(
            max_attempts=self.integer(table, "max_attempts", where, d.max_attempts, minimum=1, maximum=20),
            base_delay=self.number(table, "base_delay", where, d.base_delay, minimum=0, maximum=60),
            max_delay=self.number(table, "max_delay", where, d.max_delay, minimum=0, maximum=600),
            max_elapsed=self.number(table, "max_elapsed", where, d.max_elapsed, minimum=0, maximum=3600),
            max_retry_after=self.number(table, "max_retry_after", where, d.max_retry_after, minimum=0, maximum=3600),
        )
        if settings.max_delay < settings.base_delay:
            self.fail(f"{where}.max_delay", "must not be smaller than base_delay")
        return settings


def settings_from_config(path: str | None, *, bootstrap: str | None = None) -> KafkaClientSettings:
    """Kafka client settings from a configuration file: `path` (`--config`), else `$DISPERSION_CONFIG`, else
    `./dispersion.toml` when present, else none (`--bootstrap` / the environment alone)."""
    # Only the [kafka] table is read, so the integrations' secrets need not be set to read or create a topic.
    path = optional_config_path(path)
    if path is None:
        return settings_from(bootstrap=bootstrap)
    kafka = load_kafka_settings(path)
    return settings_from(kafka.options, bootstrap=bootstrap, configured=kafka.bootstrap_servers)


def load_admin_client(path: str | Path, environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """For the commands that call the admin API: its base URL (`[admin] url`, else `[processor] public_url`) and
    the token (`$DISPERSION_ADMIN_TOKEN`, else the variable `[admin] token_env` names), from the file's `[admin]`
    and `[processor]` tables only (the integrations' secrets need not be set)."""
    env = os.environ if environ is None else environ
    file = Path(path)
    data = _read_toml(file)
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
