"""Finding an employee's transfers (issue 20): "EMP-0018 was not paid" answered by employee reference, the last
digits of the account or the amount, with each transfer's final outcome across its payroll's retries.

The store narrows the batches by a substring of their text; every transfer of those is then checked exactly here
(the reference case-insensitively, the account's last digits, the amount as a decimal), so a concept or an e-mail
that happens to hold the digits does not count. Accounts are shown masked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from processor.domain.masking import mask_account
from processor.domain.money import money_text
from processor.domain.time import iso_ms
from processor.engine.ledger import payroll_of
from processor.store import StoreTx
from processor.store.money import MoneyReads
from processor.store.values import load_json

MAX_BATCHES = 200


@dataclass(frozen=True)
class Wanted:
    """What to look for; given fields must all match. `text` (the console's search box) matches an employee
    reference containing it, an account ending in it (4 digits or more) or an amount equal to it."""

    employee: str | None = None
    account_last: str | None = None
    amount: Decimal | None = None
    text: str | None = None

    def terms(self) -> list[str]:
        """Substrings a matching batch's text must hold (one of them)."""
        if self.employee:
            return [self.employee]
        if self.account_last:
            return [self.account_last]
        if self.amount is not None:
            return [str(int(self.amount))]
        return [self.text] if self.text else []

    def matches(self, item: Mapping[str, Any]) -> bool:
        """Whether one transfer of a batch is what is wanted."""
        reference = str(item.get("employee_reference") or "").lower()
        account = item.get("destination_account")
        number = str(account.get("account_number") or "") if isinstance(account, Mapping) else ""
        amount = _decimal(item.get("amount"))
        if self.text:
            text = self.text.strip()
            by_account = text.isdigit() and len(text) >= 4 and number.endswith(text)
            by_amount = _decimal(text.replace(",", "")) is not None and amount == _decimal(text.replace(",", ""))
            return text.lower() in reference or by_account or by_amount
        if self.employee and self.employee.lower() != reference:
            return False
        if self.account_last and not number.endswith(self.account_last):
            return False
        return not (self.amount is not None and amount != self.amount)


def _decimal(value: object) -> Decimal | None:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return amount if amount.is_finite() else None


def find_transfers(tx: StoreTx, wanted: Wanted, *, limit: int = 50) -> list[dict[str, Any]]:
    """The transfers of original batches matching `wanted`, newest batch first, at most `limit`: batch, number,
    employee, masked account, amount and currency, and the final outcome (`PAID` and by which batch,
    `OUTSTANDING`, `IN_PROGRESS`, `NOT_PAID`)."""
    found: list[dict[str, Any]] = []
    for batch_id, text, created in MoneyReads(tx.raw).containing(wanted.terms(), limit=MAX_BATCHES):
        document = load_json(text)
        items = document.get("transactions") if isinstance(document, dict) else None
        if not isinstance(items, list):
            continue
        hits = [(i, item) for i, item in enumerate(items) if isinstance(item, Mapping) and wanted.matches(item)]
        if not hits:
            continue
        payroll = payroll_of(tx, batch_id)
        origin = document.get("origin_account")
        currency = str(origin.get("currency") or "") if isinstance(origin, Mapping) else ""
        for index, item in hits:
            outcome = payroll.outcomes.get(index) if payroll else None
            account = item.get("destination_account")
            found.append(
                {
                    "batch_id": batch_id,
                    "index": index,
                    "employee_reference": item.get("employee_reference"),
                    "account": mask_account(account.get("account_number") if isinstance(account, Mapping) else None),
                    "amount": money_text(_decimal(item.get("amount")) or Decimal(0)),
                    "currency": currency,
                    "outcome": outcome.final if outcome else None,
                    "by": outcome.by if outcome else None,
                    "reason": outcome.reason if outcome else None,
                    "execute_on": document.get("execute_on") if isinstance(document.get("execute_on"), str) else None,
                    "created_at": iso_ms(created),
                }
            )
            if len(found) >= limit:
                return found
    return found
