"""The duplicate-payroll guard, pure: does a new batch pay what another recent batch already pays?

A payroll re-exported under another batch id, or the same file given another `--batch-id`, holds the same
transfers. Each transfer is reduced to a short key of what it pays (destination account and amount by value;
not the concept or the e-mail, which an ERP rewrites freely), and a new batch is compared, as a multiset, with
the keys of every batch of its integration received within the window (`[engine] duplicate_window_days`, 35)
that did not end REJECTED, EXPIRED, INVALID or withdrawn:

    keys = transfer_keys(batch)                                # stored with the flow
    found = best_match(batch, keys, candidates, threshold=0.8)  # candidates: (batch id, received at, keys)
    found.note(currency)  # "300 of 300 transfers (4,143,703.40 GTQ) match batch NOV-A received 2026-11-25T..."

A match of at least `threshold` of the new batch's transfers (80 % by default; every transfer: an exact duplicate)
holds the batch before any bank call until a person confirms it. A batch is never compared with its own retries
(known by their retry records, `Candidate.retry_of`, not by their ids): paying failed transfers again is what they
are for.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Final

from processor.domain.batch import PayrollBatch
from processor.domain.money import money_text
from processor.domain.time import iso_ms

# A submission's header (`dispersion submit --allow-duplicate-of ID`): the batch pays what ID pays on purpose; such
# a batch is not held when its match is that batch. A Kafka header names no authenticated person, so the batch
# records the confirmation as ALLOWED_BY.
ALLOW_DUPLICATE_HEADER: Final = "dispersion-allow-duplicate-of"
ALLOWED_BY: Final = "submit --allow-duplicate-of"
DEFAULT_WINDOW_DAYS: Final = 35
DEFAULT_THRESHOLD: Final = Decimal("0.8")
KEY_HEX: Final = 12  # 48 bits per transfer: collisions between two payrolls' accounts are negligible


def transfer_key(account_number: str, amount: Decimal) -> str:
    """What one transfer pays: destination account and amount by value (`1.5` is `1.50`)."""
    normal = amount.normalize()
    text = f"{account_number}|{format(normal if normal != 0 else Decimal(0), 'f')}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:KEY_HEX]


def batch_keys(batch: PayrollBatch) -> list[str]:
    """The key of every transfer, in batch order."""
    return [transfer_key(t.account_number, t.amount) for t in batch.transactions]


def transfer_keys(batch: PayrollBatch) -> str:
    """The keys as stored with the flow: sorted, space separated."""
    return " ".join(sorted(batch_keys(batch)))


SKETCH_SIZE: Final = 64


def sketch(keys: Iterable[str]) -> list[str]:
    """The batch's `SKETCH_SIZE` smallest distinct keys (a bottom-k sketch). Two batches sharing most transfers
    share sketch keys, so comparing sketches finds the candidates worth comparing in full."""
    return sorted(set(keys))[:SKETCH_SIZE]


@dataclass(frozen=True)
class Candidate:
    """A recent batch to compare with: its id, when it was received, its stored keys, and the batch it retries
    (from its retry record; None for any other batch)."""

    batch_id: str
    received_at: datetime
    keys: str
    retry_of: str | None = None


@dataclass(frozen=True)
class Match:
    """A recent batch paying much of what the new one pays."""

    batch_id: str
    received_at: datetime
    matched: int
    total: int
    amount: Decimal  # the new batch's amount in the matched transfers

    @property
    def exact(self) -> bool:
        """Every transfer of the new batch is in the other one."""
        return self.matched == self.total

    def note(self, currency: str) -> str:
        """The figures, for the status event, the console and `submit`."""
        share = f"{100 * self.matched / self.total:.0f} %" if self.total else "0 %"
        return (
            f"possible duplicate payroll of batch {self.batch_id} (received {iso_ms(self.received_at)}): "
            f"{self.matched:,} of {self.total:,} transfers ({share}, {money_text(self.amount)} {currency}) "
            "pay the same account the same amount"
        )


def best_match(
    batch: PayrollBatch,
    keys: Sequence[str],
    candidates: Iterable[Candidate],
    *,
    threshold: Decimal = DEFAULT_THRESHOLD,
) -> Match | None:
    """The candidate sharing the most transfers with `batch` (as multisets), when that is at least `threshold`
    of the batch's transfers; None otherwise. The batch's own retries are skipped (they pay its failed transfers
    again on purpose)."""
    total = len(keys)
    if total == 0:
        return None
    wanted = Counter(keys)
    best: tuple[int, Candidate] | None = None
    for candidate in candidates:
        if batch.batch_id in (candidate.batch_id, candidate.retry_of):
            continue
        matched = sum((wanted & Counter(candidate.keys.split())).values())
        if matched and (best is None or matched > best[0]):
            best = (matched, candidate)
    if best is None or Decimal(best[0]) < threshold * total:
        return None
    matched, candidate = best
    remaining = Counter(candidate.keys.split())
    amount = Decimal(0)
    for key, transfer in zip(keys, batch.transactions, strict=True):
        if remaining[key] > 0:
            remaining[key] -= 1
            amount += transfer.amount
    return Match(candidate.batch_id, candidate.received_at, matched, total, amount)
