"""One bank integration's settings (a `[integrations.NAME]` table of the configuration) for the bank client."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo

from processor.domain.schedule import DEFAULT_MAX_DAYS_AHEAD, Calendar
from processor.domain.settings import Secret

TokenAuthMethod = Literal["private_key_jwt", "client_secret_basic"]
GrantParameter = Literal["grand_type", "grant_type"]
AssertionSigning = Literal["local", "remote"]

TOKEN_AUTH_METHODS: tuple[TokenAuthMethod, ...] = ("private_key_jwt", "client_secret_basic")
GRANT_PARAMETERS: tuple[GrantParameter, ...] = ("grand_type", "grant_type")
ASSERTION_SIGNINGS: tuple[AssertionSigning, ...] = ("local", "remote")


@dataclass(frozen=True)
class TimeoutSettings:
    """httpx timeouts per phase, in seconds."""

    connect: float = 5.0
    read: float = 30.0
    write: float = 30.0
    pool: float = 5.0


@dataclass(frozen=True)
class RetrySettings:
    """Bounds of the retry policy (see processor.bank.retry)."""

    max_attempts: int = 5
    base_delay: float = 0.25
    max_delay: float = 8.0
    max_elapsed: float = 60.0
    max_retry_after: float = 120.0


@dataclass(frozen=True)
class Integration:
    """One bank integration: addresses, client credentials and behaviour switches."""

    name: str
    issuer: str
    resource_server: str
    client_id: str
    client_secret: Secret
    redirect_uri: str
    kid: str
    signing_key_pem: Secret
    financial_id: str
    customer_ip: str
    tpp_name: str = "Dispersion"
    token_auth_method: TokenAuthMethod = "private_key_jwt"
    grant_parameter: GrantParameter = "grand_type"
    assertion_signing: AssertionSigning = "local"
    assertion_lifetime: int = 60
    token_refresh_margin: int = 60
    max_connections: int = 16
    signing_key_path: Path | None = None
    timeouts: TimeoutSettings = field(default_factory=TimeoutSettings)
    retry: RetrySettings = field(default_factory=RetrySettings)
    timezone: str = "UTC"  # IANA name: the days of scheduled batches (execute_on) are this zone's days
    schedule_max_days: int = DEFAULT_MAX_DAYS_AHEAD

    @property
    def calendar(self) -> Calendar:
        """The integration's calendar for scheduled batches (its time zone, how far ahead they may be)."""
        return Calendar(ZoneInfo(self.timezone), self.schedule_max_days)

    def basic_credential(self) -> Secret:
        """base64(client_id:client_secret), the value after `Basic ` (the spec's BASIC_CREDENTIAL)."""
        raw = f"{self.client_id}:{self.client_secret.reveal()}".encode()
        return Secret(base64.b64encode(raw).decode("ascii"))
