"""What an authorization-server endpoint answers: status, body and headers, before any web framework."""

from __future__ import annotations

from dataclasses import dataclass, field

from sandbox.errors import OAuthError, PlainTextError

JSON = "application/json"
TEXT = "text/plain"
# Token and PAR answers carry secrets: never cached (RFC 6749 section 5.1).
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


@dataclass(frozen=True)
class OAuthAnswer:
    """An endpoint's answer: `body` is a JSON value (media type JSON) or a string (plain text)."""

    status: int
    body: object
    headers: dict[str, str] = field(default_factory=dict)
    media_type: str = JSON

    @classmethod
    def json(cls, body: object, headers: dict[str, str] | None = None) -> OAuthAnswer:
        """A 200 JSON answer."""
        return cls(200, body, dict(headers or {}))

    @classmethod
    def text(cls, body: str, status: int = 200) -> OAuthAnswer:
        """A plain-text answer."""
        return cls(status, body, {}, TEXT)

    @classmethod
    def of_error(cls, exc: OAuthError | PlainTextError) -> OAuthAnswer:
        """The spec's shape of an error: `{error, error_description}`, or plain text for message-signature."""
        if isinstance(exc, PlainTextError):
            return cls.text(exc.text, exc.status)
        return cls(exc.status, exc.body(), dict(exc.headers))
