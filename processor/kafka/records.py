"""The payroll batch as the `payroll.batches` Avro record (docs/kafka.md) built from the engine's parsed
`processor.domain.batch.PayrollBatch`. The decoded record is itself a valid input of
`processor.domain.batch.batch_from_dict` (same field names), so the other direction needs no code. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from processor.domain.batch import PayrollBatch
from processor.domain.money import cents


def batch_record(batch: PayrollBatch, *, source: str | None = None) -> dict[str, Any]:
    """A parsed batch as the `payroll.batches` Avro record (amounts stay `Decimal`, with two decimals)."""
    return {
        "batch_id": batch.batch_id,
        "integration": batch.integration,
        "file_reference": batch.file_reference,
        "origin_account": {
            "account_number": batch.origin.number,
            "account_type": batch.origin.type,
            "currency": batch.origin.currency,
        },
        "transactions": [
            {
                "destination_account": {
                    "account_number": item.account_number,
                    "account_type": item.account_type,
                    "currency": item.currency,
                    "email": item.email,
                },
                "amount": cents(item.amount),  # 1.500 -> 1.50: the Avro decimal has scale 2
                "concept": item.concept,
                "employee_reference": item.employee_reference,
            }
            for item in batch.transactions
        ],
        "requested_at": batch.requested_at,
        "source": source if source is not None else batch.source,
        "execute_on": batch.execute_on,
    }
