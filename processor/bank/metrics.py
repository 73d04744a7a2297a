"""Prometheus metrics of the bank client: how long each exchange with the bank takes, and what fails."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

BANK_CALL_SECONDS = Histogram(
    "dispersion_bank_call_seconds",
    "Duration of one HTTP exchange with the bank, by operation and outcome (HTTP status class or transport error)",
    ["operation", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
BANK_CALL_ERRORS = Counter(
    "dispersion_bank_call_errors_total",
    "Bank exchanges that did not succeed, by operation and error class (each attempt counts)",
    ["operation", "error"],
)


def status_class(status: int) -> str:
    """`2xx`, `4xx`, ... for a metric label (one series per class, not per status)."""
    return f"{status // 100}xx"
