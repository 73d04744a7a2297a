"""Values every settings table shares: the error that names a bad key, and a secret that never prints."""

from __future__ import annotations


class ConfigError(ValueError):
    """The configuration is unusable; the message names the file and the key."""


class Secret:
    """A string that must never be printed: its repr and str are masked; `reveal()` gives the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value, for the one place that needs it (a header, a signature)."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)
