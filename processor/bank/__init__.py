"""The processor's bank client: configuration-driven, typed, retried, one exception tree.

- `client.BankClient`: every operation of the spec (E1-E6, refresh, A1-A5, report-file, B1-B3, domestic VRP read);
  the transport, retries and the client's tokens in `client`, the operations by flow in `file_payments`,
  `vrp_payments` and `authorization` (over `calls.BankCalls`)
- `errors`: the exception tree (drawn in its docstring) and the mapping of both error shapes
- `retry`: the pure retry policy (backoff with jitter, Retry-After, bounds)
- `auth`: client assertions, PKCE and `state`
- `models`: the typed results
"""

from __future__ import annotations

from processor.bank.auth import Pkce, new_pkce, new_state
from processor.bank.client import BankClient, new_idempotency_key
from processor.bank.errors import BankError, BankHTTPError, IssuerMismatch, ProtocolError, TransportError
from processor.bank.models import (
    Discovery,
    DomesticVrp,
    FileConsent,
    FilePayment,
    FilePaymentReport,
    FileUpload,
    Money,
    ParResponse,
    ReportLine,
    TokenResponse,
    VrpConsent,
)
from processor.bank.retry import RetryDecision, RetryPolicy

__all__ = [
    "BankClient",
    "BankError",
    "BankHTTPError",
    "Discovery",
    "DomesticVrp",
    "FileConsent",
    "FilePayment",
    "FilePaymentReport",
    "FileUpload",
    "IssuerMismatch",
    "Money",
    "ParResponse",
    "Pkce",
    "ProtocolError",
    "ReportLine",
    "RetryDecision",
    "RetryPolicy",
    "TokenResponse",
    "TransportError",
    "VrpConsent",
    "new_idempotency_key",
    "new_pkce",
    "new_state",
]
