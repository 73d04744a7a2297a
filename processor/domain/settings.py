"""What every settings table shares: the error that names a bad key, a secret that never prints, and the base
model of a configuration table (processor/cli/config.py reads the file into these models)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

# `://user:` and the password after it: to the first `@` (a raw `/` in it included), then on through any further
# `@` that comes before the next `/`, `?` or `#` (a raw `@` in it).
_PASSWORD_IN_URL = re.compile(r"(://[^:/@]*:)[^@]*@(?:[^@/?#]*@)*")


class ConfigError(ValueError):
    """The configuration is unusable; the message names the file and the key."""


class Secret(SecretStr):
    """A string that must never be printed: its repr and str are masked; `reveal()` gives the value."""

    def reveal(self) -> str:
        """The secret value, for the one place that needs it (a header, a signature)."""
        return self.get_secret_value()

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


class EnvText(str):
    """A value read from an environment variable (a `DISPERSION__...` override or a `K_env` key): text, which a
    table converts to the key's type, where a file's value must already have its TOML type."""


def problem(message: str) -> PydanticCustomError:
    """A validation error whose message is shown as is (after `file:line: dotted.key: `)."""
    return PydanticCustomError("config", message)


def redact_url(url: str) -> str:
    """The URL with any password in its user part replaced by `***` (for DSNs in logs, reprs and errors).

    Read as text, not parsed: the host keeps its case, brackets and any list of hosts (`h1:5432,h2:5432`), and a
    password with a raw `/` or `@` in it is hidden whole."""
    return _PASSWORD_IN_URL.sub(r"\1***@", url)


def _filled(value: Any) -> Any:
    text = value.get_secret_value() if isinstance(value, SecretStr) else value
    if not text.strip():
        raise problem("must not be empty")
    return value


def _http(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise problem(f"must be an absolute http(s) address, got {redact_url(text)!r}")
    if parts.query or parts.fragment:
        raise problem("must not carry a query or fragment")
    return text


NonEmpty = Annotated[str, Field(min_length=1), AfterValidator(_filled)]
SecretText = Annotated[Secret, Field(min_length=1), AfterValidator(_filled)]
HttpUrl = Annotated[
    str,
    Field(min_length=1, json_schema_extra={"format": "uri", "pattern": "^https?://"}),
    AfterValidator(_filled),
    AfterValidator(_http),
]

_WORDS = {"true": True, "1": True, "false": False, "0": False}


def _from_text(kind: Any, text: str) -> Any:
    """Environment text as `kind` (bool, int, float); the text itself when it is not one (refused afterwards)."""
    word = text.strip()
    try:
        if kind is bool:
            return _WORDS.get(word.lower(), text)
        if kind in (int, float):
            return kind(word)
    except ValueError:
        return text
    return str(text)


class Table(BaseModel):
    """A table of the configuration: strict types (a file's `"60"` is not a number), unknown keys refused,
    docstrings under the fields become the JSON Schema's descriptions."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        hide_input_in_errors=True,
        use_attribute_docstrings=True,
        validate_default=True,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _environment_text(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, EnvText) or info.field_name is None:
            return value
        kind = cls.model_fields[info.field_name].annotation
        if get_origin(kind) in (Union, type(int | None)):
            kind = next((arg for arg in get_args(kind) if arg is not type(None)), kind)
        return _from_text(kind, value)
