"""The two error shapes of the spec, as exceptions the app renders.

SandboxError
├── OAuthError      -> {"error", "error_description"}          (token, PAR, authorization URL)
├── ResourceError   -> {"Code", "Message", "Errors": [...]}    (resource server)
└── PlainTextError  -> text/plain body                         (message-signature)
"""

from __future__ import annotations

from dataclasses import dataclass, field


class SandboxError(Exception):
    """Base of every error the sandbox answers with on purpose (each subclass carries `status`)."""


@dataclass
class OAuthError(SandboxError):
    """An OAuth 2.0 error body."""

    error: str
    description: str
    status: int = 400
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, str]:
        """The JSON body of the error."""
        return {"error": self.error, "error_description": self.description}


@dataclass
class ErrorDetail:
    """One entry of a resource error's `Errors` list."""

    error_code: str
    message: str
    path: str | None = None

    def body(self) -> dict[str, str]:
        """The JSON form of the entry; `Path` only when known."""
        out = {"ErrorCode": self.error_code, "Message": self.message}
        if self.path is not None:
            out["Path"] = self.path
        return out


@dataclass
class ResourceError(SandboxError):
    """A resource-server error body."""

    status: int
    code: str
    message: str
    errors: list[ErrorDetail] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, object]:
        """The JSON body of the error; an empty detail list gets one entry repeating the code."""
        details = self.errors or [ErrorDetail(self.code, self.message)]
        return {"Code": self.code, "Message": self.message, "Errors": [d.body() for d in details]}


@dataclass
class PlainTextError(SandboxError):
    """A plain-text error (the message-signature operation answers this way)."""

    text: str
    status: int = 400


def invalid_format(message: str, path: str | None = None) -> ResourceError:
    """400 `UK.OBIE.Resource.InvalidFormat`, message starting with `invalid_message_format`."""
    text = f"invalid_message_format: {message}"
    return ResourceError(
        400, "UK.OBIE.Resource.InvalidFormat", text, [ErrorDetail("UK.OBIE.Resource.InvalidFormat", text, path)]
    )


def field_invalid(message: str, path: str | None = None) -> ResourceError:
    """400 `UK.OBIE.Field.Invalid`, message starting with `incorrect_records`."""
    text = f"incorrect_records: {message}"
    return ResourceError(400, "UK.OBIE.Field.Invalid", text, [ErrorDetail("UK.OBIE.Field.Invalid", text, path)])


def not_found(what: str, path: str | None = None) -> ResourceError:
    """400 `UK.OBIE.Resource.NotFound` (also used for another client's resources)."""
    text = f"resource_not_found: {what}"
    return ResourceError(400, "UK.OBIE.Resource.NotFound", text, [ErrorDetail("UK.OBIE.Resource.NotFound", text, path)])


def header_missing(header: str, message: str) -> ResourceError:
    """401 `UK.OBIE.Header.Missing` for an absent required header."""
    return ResourceError(
        401 if header == "Authorization" else 400,
        "UK.OBIE.Header.Missing",
        message,
        [ErrorDetail("UK.OBIE.Header.Missing", message, header)],
    )


def header_invalid(header: str, message: str, status: int = 400) -> ResourceError:
    """`UK.OBIE.Header.Invalid` naming the offending header."""
    return ResourceError(
        status, "UK.OBIE.Header.Invalid", message, [ErrorDetail("UK.OBIE.Header.Invalid", message, header)]
    )


def fails_control_parameters(field_name: str, message: str) -> ResourceError:
    """400 `UK.OBIE.Rules.FailsControlParameters` naming the VRP control parameter breached."""
    return ResourceError(
        400,
        "UK.OBIE.Rules.FailsControlParameters",
        message,
        [ErrorDetail("UK.OBIE.Rules.FailsControlParameters", message, field_name)],
    )


def invalid_consent_status(message: str) -> ResourceError:
    """400 `UK.OBIE.Resource.InvalidConsentStatus`: the consent is not in a state that allows this."""
    return ResourceError(
        400,
        "UK.OBIE.Resource.InvalidConsentStatus",
        message,
        [ErrorDetail("UK.OBIE.Resource.InvalidConsentStatus", message, None)],
    )
