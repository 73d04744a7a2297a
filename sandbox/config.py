"""Run-time settings of the sandbox bank: lifetimes (spec defaults), delays, limits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SandboxConfig:
    """Everything tunable per run. Lifetimes default to the spec's Limits table."""

    base_url: str = "http://127.0.0.1:8700"
    financial_id: str = "0015800001041RHAAY"
    client_credentials_ttl: int = 600
    auth_code_token_ttl: int = 432000
    refresh_token_ttl: int = 30 * 24 * 3600
    par_ttl: int = 300
    code_ttl: int = 60
    assertion_max_lifetime: int = 3600
    # A client assertion's iat may be at most this old: assertions are made for one request, not kept.
    assertion_max_age: int = 300
    clock_skew: int = 30
    file_payment_delay: float = 2.0
    vrp_delay: float = 1.0
    # A file of max_transactions transfers is about 41 MB of JSON and A1 carries it whole (SupplementaryData).
    max_body_bytes: int = 64 * 1024 * 1024
    max_transactions: int = 100_000
    callback_timeout: float = 5.0
    admin: bool = False
    db_path: str | None = None

    @property
    def issuer(self) -> str:
        """Issuer address: the base address (issuer and resource server share it)."""
        return self.base_url.rstrip("/")
