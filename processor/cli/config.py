"""Reading the deployment's configuration file (TOML) into the settings model `Config`
(processor/cli/config_models.py), once at start-up. docs/configuration.md has the layout, every key and the JSON
Schema (`dispersion config schema`); `dispersion sandbox init DIR` writes a complete example.

Any string key `K` may instead be given as `K_env = "VARIABLE"`, read from the environment (for secrets:
`client_secret_env`, `signing_key_env` holding the PEM itself, `store_env` for a DSN with a password). Any key at
all may be overridden by `DISPERSION__SECTION__KEY` (`DISPERSION__KAFKA__BOOTSTRAP_SERVERS`,
`DISPERSION__INTEGRATIONS__SANDBOX__CLIENT_SECRET`); the environment wins over the file. Errors name the place
and the key (`dispersion.toml:14: integrations.sandbox.kid: must not be empty`, or `environment DISPERSION__...:`
for a value the environment gave). Secrets never appear in a repr or an error.

The line: tomllib gives no positions and pydantic names a key by its path, so once validation has failed the key
is looked up in the file's text (`line_of`): the line of `key =` (or `key_env =`, `key.sub =`) under the header of
its table, else the line of the nearest enclosing table's header. A lookup, not a parser: a key whose name also
starts a line inside a multi-line string before it would be placed there.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le
from pydantic import BaseModel, ValidationError

from processor.cli.config_models import (
    AT_LEAST_ONE_INTEGRATION,
    ENV_PREFIX,
    LOADING,
    AdminClientOnly,
    Config,
    KafkaOnly,
    KeyPath,
    Layered,
    Load,
    ProcessorTable,
)
from processor.domain.settings import ConfigError, EnvText
from processor.kafka.settings import KafkaSettings, KafkaTable, settings_from

__all__ = [
    "Config",
    "ConfigError",
    "ProcessorTable",
    "default_config_path",
    "load_admin_client",
    "load_config",
    "load_kafka_settings",
    "optional_config_path",
    "settings_from_config",
]

CONFIG_ENV = "DISPERSION_CONFIG"
ADMIN_TOKEN_ENV = "DISPERSION_ADMIN_TOKEN"
ENV_SUFFIX = "_env"
M = TypeVar("M", bound=Layered)


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
    return _read(Config, Path(path), os.environ if environ is None else environ)


def load_kafka_settings(path: str | Path, environ: Mapping[str, str] | None = None) -> KafkaTable:
    """Only the `[kafka]` table of a configuration file, for commands that need nothing else (`status`,
    `topics`): the integrations' secrets need not be set to read a topic."""
    return _read(KafkaOnly, Path(path), os.environ if environ is None else environ).kafka


def settings_from_config(path: str | None, *, bootstrap: str | None = None) -> KafkaSettings:
    """Kafka client settings from a configuration file: `path` (`--config`), else `$DISPERSION_CONFIG`, else
    `./dispersion.toml` when present, else none (`--bootstrap` / the environment alone)."""
    path = optional_config_path(path)
    return settings_from(None if path is None else load_kafka_settings(path), bootstrap=bootstrap)


def load_admin_client(path: str | Path, environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """For the commands that call the admin API: its base URL (`[admin] url`, else `[processor] public_url`) and
    the token (`$DISPERSION_ADMIN_TOKEN`, else the variable `[admin] token_env` names). Only `[admin]` and
    `[processor]` are read, and a `K_env` whose variable is not set is passed over: the processor's secrets need
    not be set where an operator runs a command."""
    env = os.environ if environ is None else environ
    settings = _read(AdminClientOnly, Path(path), env, lenient=True)
    token = env.get(ADMIN_TOKEN_ENV) or (settings.admin.token.reveal() if settings.admin.token else None)
    return (settings.admin.url or settings.processor.public_url).rstrip("/"), token or None


# -- reading ---------------------------------------------------------------------------------------------------


def _read(model: type[M], file: Path, environ: Mapping[str, str], *, lenient: bool = False) -> M:
    try:
        text = file.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or ("not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else exc)
        raise ConfigError(f"{file}: cannot read the configuration file ({why})") from None
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise ConfigError(f"{file}{':' + at.group(1) if at else ''}: not valid TOML ({exc})") from None
    if model.model_config.get("extra") == "ignore":  # a part of the file: the other tables' K_env are not read
        data = {name: table for name, table in data.items() if name in model.model_fields}
    problems: list[tuple[KeyPath, str]] = []
    overridden = {
        tuple(name.lower()[len(ENV_PREFIX) :].split("__")) for name in environ if name.upper().startswith(ENV_PREFIX)
    }
    # K_env at every depth of a table a model describes; in `[exports]` and the tables no model describes only at
    # the top: their nested names are their owners'.
    deep = set(model.model_fields) - {"exports"}
    resolved = {
        name: _resolve_env_keys(table, (name,), environ, overridden, problems, deep=name in deep, lenient=lenient)
        if isinstance(table, Mapping)
        else table
        for name, table in data.items()
    }
    load = Load(environ, resolved, file.resolve().parent)
    token = LOADING.set(load)
    try:
        settings = model(**resolved)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            path = tuple(str(part) for part in error["loc"] if part != "[key]")  # a bad name: the name's path
            if not isinstance(error.get("input"), _Failed):
                problems.append((path, _message(model, path, error)))
    finally:
        LOADING.reset(token)
    if problems:
        raise ConfigError(_report(problems, str(file), text.splitlines(), load.overrides))
    settings._source = str(file)
    return settings


class _Failed:
    """Stands for a `K_env` whose variable could not be read (its problem is already recorded)."""


def _resolve_env_keys(
    table: Mapping[str, Any],
    where: KeyPath,
    environ: Mapping[str, str],
    overridden: set[KeyPath],
    problems: list[tuple[KeyPath, str]],
    *,
    deep: bool,
    lenient: bool,
) -> dict[str, Any]:
    """The table with every `K_env = "VAR"` replaced by `K` = $VAR (an `EnvText`), nested tables too when `deep`.
    A `K` that a `DISPERSION__` variable overrides is not looked up: the override wins anyway."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if deep and isinstance(value, Mapping):
            out[key] = _resolve_env_keys(
                value, (*where, key), environ, overridden, problems, deep=True, lenient=lenient
            )
        elif not key.endswith(ENV_SUFFIX):
            out[key] = value
    for key, variable in table.items():
        if not key.endswith(ENV_SUFFIX) or (deep and isinstance(variable, Mapping)):
            continue
        target, path = key[: -len(ENV_SUFFIX)], (*where, key)
        if not target:
            problem = "an `_env` key needs a name before the suffix"
        elif target in table:
            problem = f"give either {target} or {key}, not both"
        elif not isinstance(variable, str) or not variable:
            problem = "must name an environment variable (a non-empty string)"
        elif tuple(part.lower() for part in (*where, target)) in overridden or (lenient and not environ.get(variable)):
            continue
        elif not environ.get(variable):
            problem = f"environment variable {variable} is not set or empty"
        else:
            out[target] = EnvText(environ[variable])
            continue
        problems.append((path, problem))
        out[target] = _Failed()  # the problem is reported once, not again as "is required"
    return out


# -- messages --------------------------------------------------------------------------------------------------


def _walk(model: type[BaseModel], path: KeyPath) -> tuple[Any, Any]:
    """The field info of `path` in `model` (None when unknown) and the type its value has (a model, a dict)."""
    current: Any = model
    info: Any = None
    for part in path:
        if get_origin(current) is dict:
            current, info = get_args(current)[1], None
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return None, None
        info = fields[part]
        current = info.annotation
        if get_origin(current) in (Union, type(int | None)):
            current = next(arg for arg in get_args(current) if arg is not type(None))
    return info, current


def _message(model: type[BaseModel], path: KeyPath, error: Any) -> str:
    """Our wording of a pydantic error (never with a secret's value: only its type is named)."""
    kind, given, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if path == ("integrations",) and kind in ("missing", "too_short"):
        return AT_LEAST_ONE_INTEGRATION
    if kind == "missing":
        return f"is required (or give {path[-1]}{ENV_SUFFIX})"
    if kind in ("too_short", "string_too_short"):
        minimum = ctx.get("min_length", 1)
        return "must not be empty" if minimum == 1 else f"must be at least {minimum} characters"
    if kind == "extra_forbidden":
        known = sorted(getattr(_walk(model, path[:-1])[1], "model_fields", {}))
        close = difflib.get_close_matches(path[-1], known, n=1)
        return f"unknown key{f' (did you mean {close[0]!r}?)' if close else ''}; known keys: {', '.join(known)}"
    if kind in ("model_type", "model_attributes_type", "dict_type", "string_type"):
        what = "a string" if kind == "string_type" else "a table"
        return f"must be {what}, not {'str' if isinstance(given, str) else type(given).__name__}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer, got {given!r}"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return f"must be a number, got {given!r}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, got {given!r}"
    if kind in ("literal_error", "enum"):  # pydantic's "'a', 'b' or 'c'" as a plain list
        return f"must be one of {ctx['expected'].replace(' or ', ', ')}, got {given!r}"
    if kind in ("greater_than", "greater_than_equal", "less_than_equal"):
        metadata = getattr(_walk(model, path)[0], "metadata", [])
        high = next(m.le for m in metadata if isinstance(m, Le))
        low = next(m for m in metadata if isinstance(m, Ge | Gt))
        if isinstance(low, Gt):
            return f"must be more than {low.gt:g} and at most {high:g}, got {given!r}"
        return f"must be between {low.ge:g} and {high:g}, got {given!r}"
    return str(error["msg"])


def _dotted(path: KeyPath) -> str:
    """`integrations.sandbox.timeouts.connect`; a name holding a dot is quoted: `kafka.client."sasl.password"`."""
    return ".".join(part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else f'"{part}"' for part in path)


def _report(
    problems: list[tuple[KeyPath, str]], source: str, lines: list[str], overrides: Mapping[KeyPath, str]
) -> str:
    """Every problem on a line of its own, in file order: `file:line: dotted.key: problem`, or `environment VAR:`
    when the environment gave the value."""

    def where(path: KeyPath) -> str:
        for depth in range(len(path), 0, -1):
            if path[:depth] in overrides:
                return f"environment {overrides[path[:depth]]}"
        line = line_of(lines, path)
        return f"{source}:{line}" if line else source

    ordered = sorted(problems, key=lambda item: line_of(lines, item[0]) or 0)
    return "\n".join(f"{where(path)}{': ' + _dotted(path) if path else ''}: {message}" for path, message in ordered)


_HEADER = re.compile(r"^\s*\[\[?([^\]]+)\]\]?\s*(?:#.*)?$")
_PART = re.compile(r"\"[^\"]*\"|'[^']*'|[^.\s\"']+")


def _header_index(lines: list[str], table: KeyPath) -> int | None:
    """The index of the line `[table]` (or `[[table]]`), -1 for the top of the file; None when there is none."""
    if not table:
        return -1
    for index, line in enumerate(lines):
        header = _HEADER.match(line)
        if header and tuple(part.strip("\"'") for part in _PART.findall(header.group(1))) == table:
            return index
    return None


def line_of(lines: list[str], path: KeyPath) -> int | None:
    """The 1-based line of `path` in a TOML text (see the module docstring); None when nothing of it is there."""
    for depth in range(len(path), 0, -1):
        start = _header_index(lines, path[: depth - 1])
        if start is not None:
            key = re.compile(rf"""^\s*["']?{re.escape(path[depth - 1])}(?:{ENV_SUFFIX})?["']?\s*[.=]""")
            for index in range(start + 1, len(lines)):
                if _HEADER.match(lines[index]):
                    break
                if key.match(lines[index]):
                    return index + 1
        own = _header_index(lines, path[:depth])
        if own is not None:
            return own + 1
    return None
