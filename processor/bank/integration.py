"""One bank integration's settings (a `[integrations.NAME]` table of the configuration) for the bank client."""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from pydantic import AfterValidator, Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from processor.domain.schedule import DEFAULT_MAX_DAYS_AHEAD, Calendar
from processor.domain.settings import HttpUrl, NonEmpty, Secret, SecretText, Table, problem

TokenAuthMethod = Literal["private_key_jwt", "client_secret_basic"]
GrantParameter = Literal["grand_type", "grant_type"]
AssertionSigning = Literal["local", "remote"]

TOKEN_AUTH_METHODS: tuple[TokenAuthMethod, ...] = ("private_key_jwt", "client_secret_basic")
GRANT_PARAMETERS: tuple[GrantParameter, ...] = ("grand_type", "grant_type")
ASSERTION_SIGNINGS: tuple[AssertionSigning, ...] = ("local", "remote")


class TimeoutSettings(Table):
    """`[integrations.NAME.timeouts]`: httpx timeouts per phase, in seconds."""

    connect: float = Field(default=5.0, ge=0.001, le=600)
    read: float = Field(default=30.0, ge=0.001, le=600)
    write: float = Field(default=30.0, ge=0.001, le=600)
    pool: float = Field(default=5.0, ge=0.001, le=600)


class RetrySettings(Table):
    """`[integrations.NAME.retry]`: bounds of the bank client's retry policy (processor.bank.retry; seconds
    unless noted)."""

    max_attempts: int = Field(default=5, ge=1, le=20)
    """Tries per call, the first included."""
    base_delay: float = Field(default=0.25, ge=0, le=60)
    max_delay: float = Field(default=8.0, ge=0, le=600)
    max_elapsed: float = Field(default=60.0, ge=0, le=3600)
    max_retry_after: float = Field(default=120.0, ge=0, le=3600)
    """The longest Retry-After the client waits for."""

    @field_validator("max_delay")
    @classmethod
    def _not_below_base(cls, value: float, info: ValidationInfo) -> float:
        if value < info.data.get("base_delay", 0):
            raise problem("must not be smaller than base_delay")
        return value


def _ip(text: str) -> str:
    try:
        ipaddress.ip_address(text.strip())
    except ValueError:
        raise problem(f"must be an IP address, got {text.strip()!r}") from None
    return text.strip()


def _zone(text: str) -> str:
    try:
        ZoneInfo(text.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise problem(f"must be an IANA time zone name such as 'UTC' or 'America/Guatemala', got {text!r}") from None
    return text.strip()


def _rsa_pem(pem: bytes) -> None:
    """Refuses anything but an unencrypted RSA private key of 2048 bits at least (PS256 signing)."""
    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise problem(f"not an unencrypted PEM private key ({exc.__class__.__name__})") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise problem("must be an RSA private key (PS256 signing)")
    if key.key_size < 2048:
        raise problem(f"RSA key of {key.key_size} bits is too short (2048 at least)")


class Integration(Table):
    """`[integrations.NAME]`: one bank (addresses, client credentials, behaviour switches); batches name it in
    `integration`."""

    name: SkipJsonSchema[str] = ""
    issuer: HttpUrl
    """The bank's authorization server."""
    resource_server: Annotated[HttpUrl, AfterValidator(lambda url: url.rstrip("/"))]
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
    customer_ip: Annotated[NonEmpty, AfterValidator(_ip)]
    """x-fapi-customer-ip-address (an IP address)."""
    tpp_name: NonEmpty = "Dispersion"
    token_auth_method: TokenAuthMethod = "private_key_jwt"
    grant_parameter: GrantParameter = "grand_type"
    """The token request's grant field name: grand_type (the spec's spelling) or grant_type."""
    assertion_signing: AssertionSigning = "local"
    """local, or remote (the spec's E2 operation; sends the key over the wire)."""
    assertion_lifetime: int = Field(default=60, ge=5, le=3600)
    token_refresh_margin: int = Field(default=60, ge=0, le=3600)
    max_connections: int = Field(default=16, ge=1, le=1000)
    timezone: Annotated[NonEmpty, AfterValidator(_zone)] = "UTC"
    """IANA time zone whose days a scheduled batch's execute_on names (the payment is made from its midnight)."""
    schedule_max_days: int = Field(default=DEFAULT_MAX_DAYS_AHEAD, ge=0, le=3650)
    """How many days ahead execute_on may be: keep the approval's token renewable on the day."""
    timeouts: TimeoutSettings = TimeoutSettings()
    retry: RetrySettings = RetrySettings()
    _pem: Secret = PrivateAttr()

    @field_validator("signing_key")
    @classmethod
    def _inline_key(cls, pem: Secret | None) -> Secret | None:
        if pem is not None:
            _rsa_pem(pem.reveal().encode())
        return pem

    @field_validator("signing_key_path")
    @classmethod
    def _key_file(cls, path: str | None, info: ValidationInfo) -> str | None:
        if "signing_key" not in info.data:  # refused already
            return path
        if path is None and info.data["signing_key"] is None:
            raise problem("is required (or give signing_key_path_env, or signing_key_env)")
        if path is not None and info.data["signing_key"] is not None:
            raise problem("give either signing_key or signing_key_path, not both")
        if path is not None:
            try:
                _rsa_pem(Path(path).expanduser().read_bytes())
            except OSError as exc:
                raise problem(f"cannot read {path} ({exc.strerror or exc})") from None
        return path

    @model_validator(mode="after")
    def _read_key(self) -> Integration:
        key = self.signing_key or Secret(Path(str(self.signing_key_path)).expanduser().read_text("ascii"))
        self._pem = key
        return self

    @property
    def signing_key_pem(self) -> Secret:
        """The RSA private key's PEM (from `signing_key` or the file `signing_key_path`)."""
        return self._pem

    @property
    def calendar(self) -> Calendar:
        """The integration's calendar for scheduled batches (its time zone, how far ahead they may be)."""
        return Calendar(ZoneInfo(self.timezone), self.schedule_max_days)

    def basic_credential(self) -> Secret:
        """base64(client_id:client_secret), the value after `Basic ` (the spec's BASIC_CREDENTIAL)."""
        raw = f"{self.client_id}:{self.client_secret.reveal()}".encode()
        return Secret(base64.b64encode(raw).decode("ascii"))
