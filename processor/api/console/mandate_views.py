"""What the console's Mandates pages show (flow B), read in one store transaction: mandates filtered, counted and
paged newest first with their limits and the client-side ledger of the current periods; one mandate with its
payments and its `vrp.status` timeline, and its approval link while it asks for its approver. Creditor accounts
masked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from processor.api.console.views import PAGE_SIZE, ListingPage, status_counts
from processor.domain.kinds import Kind
from processor.domain.time import iso_ms
from processor.domain.vrp_states import Mandate
from processor.engine.authorization import approval_link
from processor.engine.vrp_views import (
    ASKING,
    MandateView,
    TimelineEntry,
    mandate_status,
    mandate_timeline,
    mandate_view,
    mandate_views,
)
from processor.store import StoreTx, VrpPayment
from processor.store.vrp import MandateFilter

# Every status the filter offers, and the stored states each covers.
MANDATE_STATUS_STATES: Mapping[str, tuple[str, ...]] = {
    status: tuple(s.value for s in Mandate if mandate_status(s.value) == status)
    for status in dict.fromkeys(mandate_status(s.value) for s in Mandate)
}


@dataclass(frozen=True)
class MandatesPage(ListingPage[MandateView]):
    """The Mandates page (`now`: the moment of the ledger shown)."""

    now: str = ""


def mandates_page(tx: StoreTx, wanted: MandateFilter, page: int, now: datetime) -> MandatesPage:
    """One page of mandates matching the filter, each with its ledger at `now`, and the counts per status."""
    rows = tx.mandates.listing(wanted, offset=page * PAGE_SIZE, limit=PAGE_SIZE + 1)
    counts, total = status_counts(tx.mandates.state_counts(wanted), mandate_status, wanted.states)
    views = mandate_views(tx, rows[:PAGE_SIZE], now)
    return MandatesPage(views, counts, total, tx.mandates.integrations(), len(rows) > PAGE_SIZE, iso_ms(now))


@dataclass(frozen=True)
class MandatePage:
    """The Mandate page."""

    view: MandateView
    payments: list[VrpPayment]
    timeline: list[TimelineEntry]
    approval_url: str | None
    deadline: str | None
    terminal: bool
    now: str


def mandate_page(tx: StoreTx, mandate_id: str, *, public_url: str, now: datetime) -> MandatePage | None:
    """The mandate, its payments (newest first) and timeline; the approval link only while it asks its approver."""
    mandate = tx.mandates.get(mandate_id)
    if mandate is None:
        return None
    asking = mandate.state in ASKING and mandate.consent_id is not None
    link = approval_link(public_url, Kind.MANDATE, mandate_id, mandate.approval_token) if asking else None
    deadline = mandate.authorization_deadline
    return MandatePage(
        mandate_view(tx, mandate, now),
        list(reversed(tx.vrp_payments.for_mandate(mandate_id))),
        mandate_timeline(tx, mandate_id),
        link,
        iso_ms(deadline) if asking and deadline is not None else None,
        mandate.state in (Mandate.REVOKED, Mandate.REJECTED, Mandate.EXPIRED, Mandate.INVALID),
        iso_ms(now),
    )
