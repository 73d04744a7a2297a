"""The project's logical topic names: the only copy (a deployment may rename them physically in `[kafka.topics]`)."""

from __future__ import annotations

from typing import Final

BATCHES_TOPIC: Final = "payroll.batches"
STATUS_TOPIC: Final = "dispersion.status"
DLQ_TOPIC: Final = "payroll.batches.dlq"
VRP_MANDATES_TOPIC: Final = "vrp.mandates"
VRP_PAYMENTS_TOPIC: Final = "vrp.payments"
VRP_STATUS_TOPIC: Final = "vrp.status"
TRANSFERS_TOPIC: Final = "dispersion.transfers"
ALL_TOPICS: Final = (
    BATCHES_TOPIC,
    STATUS_TOPIC,
    DLQ_TOPIC,
    VRP_MANDATES_TOPIC,
    VRP_PAYMENTS_TOPIC,
    VRP_STATUS_TOPIC,
    TRANSFERS_TOPIC,
)
