"""Prometheus gauges read from the store when Prometheus scrapes.

Bank calls are measured where they are made (`processor.bank.metrics`); the consumers and the relay keep their
own counters (`consumers.loop`, `producers.relay`).
What lives in the store (flows by state, the outbox backlog) is read when Prometheus scrapes, by
`StoreCollector`, so every instance reports the same shared truth and nothing has to keep gauges in step.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import structlog
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from processor.store import Store, StoreError, StoreTx

log = structlog.get_logger("processor.api.metrics")


def _store_figures(tx: StoreTx) -> dict[str, Any]:
    return {
        "flows": tx.flows.count_by_state(),
        "mandates": tx.mandates.count_by_state(),
        "vrp_payments": tx.vrp_payments.count_by_state(),
        "outbox": tx.outbox.backlog(),
    }


class StoreCollector(Collector):
    """Gauges read from the store at scrape time: batches (flows), mandates and VRP payments by state, and the
    outbox backlog with the age of its oldest event. A store that cannot be read yields no samples (and a log
    line) rather than failing the whole scrape."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the gauges (called by prometheus_client on each scrape)."""
        try:
            figures = self.store.run(_store_figures, write=False)
        except StoreError as exc:
            log.warning("metrics_store_unreadable", error=str(exc))
            return
        for name, help_text, counts in (
            ("dispersion_batches", "Payroll batches (file payment flows) by state", figures["flows"]),
            ("dispersion_vrp_mandates", "VRP mandates by state", figures["mandates"]),
            ("dispersion_vrp_payments", "VRP payments by state", figures["vrp_payments"]),
        ):
            family = GaugeMetricFamily(name, help_text, labels=["state"])
            for state, count in sorted(counts.items()):
                family.add_metric([state], count)
            yield family
        backlog, oldest = figures["outbox"]
        yield GaugeMetricFamily("dispersion_outbox_backlog", "Status events not yet acknowledged by Kafka", backlog)
        age = 0.0 if oldest is None else max(0.0, (datetime.now(UTC) - oldest).total_seconds())
        yield GaugeMetricFamily(
            "dispersion_outbox_oldest_age_seconds", "Age of the oldest unpublished status event (0 when none)", age
        )
