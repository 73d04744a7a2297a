"""Where the configuration's values come from, and where a wrong one was written.

- The TOML file: parsed by `tomllib`, then every `K_env = "VAR"` replaced by `K` = the variable's value.
- The environment: `DISPERSION__SECTION__KEY` (`__` between levels, any case) overrides any key of the file,
  through pydantic-settings' `EnvSettingsSource`; the environment wins over the file.
- Errors: `file:line: dotted.key: problem`, or `environment DISPERSION__...: dotted.key: problem` for a value the
  environment gave. `KeyLines` finds the line, since tomllib reports no positions for the values it parsed.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsError
from pydantic_settings.sources.utils import parse_env_vars

from processor.domain.settings import ConfigError

ENV_PREFIX = "DISPERSION__"
ENV_DELIMITER = "__"
ENV_SUFFIX = "_env"
AT_LEAST_ONE_INTEGRATION = "at least one [integrations.NAME] table is required"
KeyPath = tuple[str, ...]

# Tables whose keys are free names the environment cannot spell (`"security.protocol"`, `"payroll.batches"`):
# an override's `_` stands for the `.` of the name (`DISPERSION__KAFKA__CLIENT__SASL_PASSWORD` is `sasl.password`).
DOTTED_NAME_TABLES: frozenset[KeyPath] = frozenset({("kafka", "client"), ("kafka", "topics")})

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"' + r"|'[^']*'"
_KEY = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*\[\[?\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGNMENT = re.compile(rf"^\s*({_DOTTED})\s*=\s*(.*)$")
_PART = re.compile(_KEY)


class EnvText(str):
    """A value read from an environment variable (an override or a `K_env` key): text, which the models' checks
    convert to the key's type, where a file's value must already have it."""


def _split_key(dotted: str) -> KeyPath:
    return tuple(part.strip("\"'") for part in _PART.findall(dotted))


class KeyLines:
    """The line of each table header and key in a TOML text.

    tomllib returns plain dicts without positions, and pydantic reports a key's path, not its place in the file;
    so the text is scanned once for `[table]` headers and `key =` lines (skipping the inside of multi-line
    strings, such as an inline PEM). A key without a line of its own (a missing key, a key in an inline table)
    takes the line of the nearest table that has one.
    """

    def __init__(self, text: str) -> None:
        self.lines: dict[KeyPath, int] = {}
        table: KeyPath = ()
        closing: str | None = None  # the delimiter of the multi-line string we are in
        for number, line in enumerate(text.splitlines(), start=1):
            if closing is not None:
                if closing in line:
                    closing = None
                continue
            header = _HEADER.match(line)
            if header:
                table = _split_key(header.group(1))
                self.lines.setdefault(table, number)
                continue
            assignment = _ASSIGNMENT.match(line)
            if assignment:
                key = table + _split_key(assignment.group(1))
                for depth in range(len(table) + 1, len(key) + 1):
                    self.lines.setdefault(key[:depth], number)
                value = assignment.group(2)
                for quotes in ('"""', "'''"):
                    if value.startswith(quotes) and value.count(quotes) == 1:
                        closing = quotes

    def line(self, path: KeyPath) -> int | None:
        """The line of `path`, else of its nearest enclosing table; None when none of them is in the text."""
        for depth in range(len(path), 0, -1):
            if path[:depth] in self.lines:
                return self.lines[path[:depth]]
        return None

    def alias(self, path: KeyPath, written_as: KeyPath) -> None:
        """`path` was written as `written_as` (a `K_env` key): errors about it point there."""
        if written_as in self.lines:
            self.lines[path] = self.lines[written_as]


def dotted(path: KeyPath) -> str:
    """`integrations.sandbox.timeouts.connect`; a name holding a dot is quoted: `kafka.client."sasl.password"`."""
    return ".".join(part if re.fullmatch(_BARE, part) else f'"{part}"' for part in path)


@dataclass
class Problems:
    """Problems found so far, each with its path; raised together, each line naming file, line and key."""

    source: str
    lines: KeyLines | None
    found: list[tuple[KeyPath, str]] = field(default_factory=list)
    overrides: dict[KeyPath, str] = field(default_factory=dict)  # path -> DISPERSION__ variable that set it

    def add(self, path: KeyPath, message: str) -> None:
        """Record one problem of the key at `path`."""
        self.found.append((path, message))

    def where(self, path: KeyPath) -> str:
        """`file:line`, `file` (nothing to point at), or `environment VAR` for an overridden value."""
        for depth in range(len(path), 0, -1):
            variable = self.overrides.get(path[:depth])
            if variable:
                return f"environment {variable}"
        line = self.lines.line(path) if self.lines else None
        return f"{self.source}:{line}" if line else self.source

    def raise_any(self) -> None:
        """ConfigError listing every problem (in file order), if there is one."""
        if not self.found:
            return
        order = {path: self.lines.line(path) or 0 for path, _ in self.found} if self.lines else {}
        found = sorted(self.found, key=lambda item: order.get(item[0], 0))
        raise ConfigError(
            "\n".join(
                self.where(path) + (f": {dotted(path)}" if path else "") + f": {message}" for path, message in found
            )
        )


def read_toml(file: Path) -> tuple[dict[str, Any], KeyLines]:
    """The parsed file and its key lines; ConfigError (with the line tomllib names) when unreadable or invalid."""
    import tomllib

    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the configuration file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: cannot read the configuration file (not UTF-8 text)") from None
    try:
        return tomllib.loads(text), KeyLines(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        where = f"{file}:{at.group(1)}" if at else str(file)
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None


# -- `K_env = "VAR"` -------------------------------------------------------------------------------------------


def override_paths(environ: Mapping[str, str]) -> set[KeyPath]:
    """The (lower-case) paths that `DISPERSION__...` variables set."""
    prefix = ENV_PREFIX.lower()
    return {
        tuple(name.lower()[len(prefix) :].split(ENV_DELIMITER))
        for name in environ
        if name.lower().startswith(prefix) and len(name) > len(prefix)
    }


def resolve_env_keys(
    table: Mapping[str, Any],
    where: KeyPath,
    environ: Mapping[str, str],
    problems: Problems,
    *,
    recursive: bool,
) -> dict[str, Any]:
    """The table with every `K_env = "VAR"` replaced by `K` = $VAR (an `EnvText`), nested tables too when
    `recursive`. A `K` that a `DISPERSION__` variable overrides is not looked up: the override wins anyway."""
    overridden = override_paths(environ)
    out: dict[str, Any] = {}
    for key, value in table.items():
        if recursive and isinstance(value, Mapping):
            out[key] = resolve_env_keys(value, (*where, key), environ, problems, recursive=True)
        elif not key.endswith(ENV_SUFFIX):
            out[key] = value
    for key, variable in table.items():
        if not key.endswith(ENV_SUFFIX) or (recursive and isinstance(variable, Mapping)):
            continue
        target = key[: -len(ENV_SUFFIX)]
        path = (*where, key)
        if problems.lines:
            problems.lines.alias((*where, target), path)
        if not target:
            problems.add(path, "an `_env` key needs a name before the suffix")
        elif target in table:
            problems.add(path, f"give either {target} or {key}, not both")
        elif not isinstance(variable, str) or not variable:
            problems.add(path, "must name an environment variable (a non-empty string)")
        elif tuple(part.lower() for part in (*where, target)) in overridden:
            continue
        elif not environ.get(variable):
            problems.add(path, f"environment variable {variable} is not set or empty")
        else:
            out[target] = EnvText(environ[variable])
            continue
        out[target] = _FAILED  # the problem is reported once, not again as "is required"
    return out


class _Failed:
    """Stands for a `K_env` whose variable could not be read (its problem is already recorded)."""


_FAILED = _Failed()


# -- the environment -------------------------------------------------------------------------------------------


@dataclass
class _Load:
    environ: Mapping[str, str]
    problems: Problems


_CURRENT: ContextVar[_Load | None] = ContextVar("dispersion_config_load", default=None)


class EnvironmentSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping (tests pass their own), with three additions:
    names the file already has are matched as it spells them (`[integrations.Sandbox]`), tables no model
    describes are read too, and each text value is an `EnvText` whose variable is recorded for messages."""

    def __init__(self, settings_cls: type[BaseSettings], file: Mapping[str, Any]) -> None:
        # Outside read_settings (a model built directly) the process environment is read, problems unreported.
        self.load = _CURRENT.get() or _Load(os.environ, Problems("<environment>", None))
        self.file = file
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self.load.environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        prefix = self.env_prefix.lower()
        for name, value in self.env_vars.items():  # tables other parts own: not fields, read here
            parts = name[len(prefix) :].split(ENV_DELIMITER) if name.startswith(prefix) else []
            if not parts or not parts[0] or parts[0] in self.settings_cls.model_fields or value is None:
                continue
            if len(parts) == 1:  # not a table: refused by the caller, named by its variable
                data[parts[0]] = value
            else:
                node = data.setdefault(parts[0], {})
                for part in parts[1:-1]:
                    node = node.setdefault(part, {}) if isinstance(node, dict) else node
                if isinstance(node, dict):
                    node[parts[-1]] = value
        return self._mark(data, self.file, ())

    def _mark(self, values: Mapping[str, Any], file: Any, path: KeyPath) -> dict[str, Any]:
        """`values` with keys spelled as in the file and text leaves as `EnvText` (recorded as overrides)."""
        spelled = {key.lower(): key for key in file} if isinstance(file, Mapping) else {}
        if path in DOTTED_NAME_TABLES:
            spelled.update({key.lower().replace(".", "_"): key for key in file} if isinstance(file, Mapping) else {})
        out: dict[str, Any] = {}
        for key, value in values.items():
            name = spelled.get(key.lower(), key.replace("_", ".") if path in DOTTED_NAME_TABLES else key)
            variable = ENV_PREFIX + ENV_DELIMITER.join((*path, key)).upper()
            inner = file.get(name) if isinstance(file, Mapping) else None
            if isinstance(value, Mapping):
                if inner is None:  # a table only the environment gives: what it lacks is asked of the environment
                    self.load.problems.overrides[(*path, name)] = f"{variable}{ENV_DELIMITER}..."
                out[name] = self._mark(value, inner, (*path, name))
            else:
                self.load.problems.overrides[(*path, name)] = variable
                out[name] = EnvText(value) if isinstance(value, str) else value
        return out


class FileSource(PydanticBaseSettingsSource):
    """The file's values (already read and `K_env`-resolved), below the environment."""

    def __init__(self, settings_cls: type[BaseSettings], data: Mapping[str, Any]) -> None:
        super().__init__(settings_cls)
        self.data = dict(data)

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        """Unused: the whole table is returned by `__call__`."""
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.data


class LayeredSettings(BaseSettings):
    """A settings model whose sources are the environment over the file given to `read_settings`."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Environment first (it wins), then the file (passed as the init values); no dotenv, no secrets dir."""
        file = getattr(init_settings, "init_kwargs", {})
        return EnvironmentSource(settings_cls, file), FileSource(settings_cls, file)


M = TypeVar("M", bound=LayeredSettings)


@contextmanager
def _loading(load: _Load) -> Iterator[None]:
    token = _CURRENT.set(load)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def read_settings(model: type[M], data: Mapping[str, Any], environ: Mapping[str, str], problems: Problems) -> M | None:
    """`model` validated from the file's `data` under the environment's overrides; None when problems were
    recorded (each with its key and place)."""
    try:
        with _loading(_Load(environ, problems)):
            settings = model(**data)
    except SettingsError as exc:  # a table given as one variable whose text is not JSON
        field_name = re.search(r'field "([^"]+)"', str(exc))
        name = field_name.group(1) if field_name else ""
        problems.overrides[(name,)] = ENV_PREFIX + name.upper()
        problems.add((name,), f"must be a table written as JSON ({exc.__cause__ or exc})")
        return None
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            path = tuple(str(part) for part in error["loc"])
            if not _is_failed_env(data, path):
                problems.add(path, _message(model, path, error))
        return None
    return settings if not problems.found else None


def _is_failed_env(data: Mapping[str, Any], path: KeyPath) -> bool:
    node: Any = data
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return isinstance(node, _Failed)


def _message(model: type[BaseModel], path: KeyPath, error: Any) -> str:
    """Our wording of a pydantic error (never with the input value: it may be a secret)."""
    kind = error["type"]
    if kind == "config":
        return str(error["msg"])
    if kind == "missing":
        if path == ("integrations",):
            return AT_LEAST_ONE_INTEGRATION
        return f"is required (or give {path[-1]}{ENV_SUFFIX})"
    if kind == "extra_forbidden":
        return unknown_key(path[-1], known_keys(model, path[:-1]))
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a table, not {type_name(error['input'])}"
    if kind == "string_type":
        return f"must be a string, not {type_name(error['input'])}"
    return str(error["msg"])


def type_name(value: Any) -> str:
    """The TOML-ish type of a value for messages (environment text is a `str`)."""
    return "str" if isinstance(value, str) else type(value).__name__


def unknown_key(key: str, known: list[str]) -> str:
    """`unknown key (did you mean 'store'?); known keys: public_url, store`."""
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{hint}; known keys: {', '.join(known)}"


def known_keys(model: type[BaseModel], path: KeyPath) -> list[str]:
    """The keys the table at `path` of `model` accepts (walking fields, dict values by name)."""
    current: Any = model
    for part in path:
        fields = getattr(current, "model_fields", None)
        if fields is not None and part in fields:
            current = fields[part].annotation
        current = _table_type(current)
    fields = getattr(current, "model_fields", {})
    return sorted(fields)


def _table_type(annotation: Any) -> Any:
    """The model inside `X | None`, `Annotated[dict[str, X], ...]` or `dict[str, X]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = get_args(annotation)
    if get_origin(annotation) is dict and args:
        return _table_type(args[-1])
    for arg in args:
        found = _table_type(arg)
        if found is not None:
            return found
    return None
