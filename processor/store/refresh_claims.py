"""Who may refresh a consent's tokens right now: a short claim on its `consent_tokens` row (migration 6).

    claim = tx.refresh_claims.claim(consent_id, version=read.version, owner=me, now=now, until=now + lease)
    #   CLAIMED: refresh, then save with tokens.replace and release in one transaction
    #   REFRESHED: another instance refreshed since `read` (the version moved): use the stored tokens
    #   BUSY: another instance holds a live claim: wait for its tokens      GONE: no tokens stored any more

A bank that rotates refresh tokens spends the one presented: two instances refreshing one consent at once would
send two grants, and the second is refused (`invalid_grant`). The claim is a compare-and-set on the row's
version and an expiry (a claimer that died frees the row when `until` passes), so one refresh runs at a time per
consent across every instance of every engine sharing the store.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from processor.domain.time import utc_ms
from processor.store.db import Tx, to_datetime


class Claim(Enum):
    """The answer to a refresh claim."""

    CLAIMED = "claimed"
    REFRESHED = "refreshed"
    BUSY = "busy"
    GONE = "gone"


class RefreshClaims:
    """The refresh claims on `consent_tokens` (columns `refresh_owner`, `refresh_until`)."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def claim(self, consent_id: str, *, version: int, owner: str, now: datetime, until: datetime) -> Claim:
        """Claim the refresh of the tokens read at `version`, unless someone refreshed them since or holds a claim
        that has not run out."""
        now = utc_ms(now)
        changed = self.tx.execute(
            "UPDATE consent_tokens SET refresh_owner = ?, refresh_until = ?"
            " WHERE consent_id = ? AND version = ? AND (refresh_until IS NULL OR refresh_until <= ?)",
            (owner, utc_ms(until), consent_id, version, now),
        )
        if changed == 1:
            return Claim.CLAIMED
        row = self.tx.fetchone(
            "SELECT version, refresh_until FROM consent_tokens WHERE consent_id = ?",
            (consent_id,),
        )
        if row is None:
            return Claim.GONE
        if int(row["version"]) != version:
            return Claim.REFRESHED
        return Claim.BUSY

    def held(self, consent_id: str, *, now: datetime) -> bool:
        """Whether someone holds a live claim on the consent's refresh."""
        row = self.tx.fetchone("SELECT refresh_until FROM consent_tokens WHERE consent_id = ?", (consent_id,))
        until = None if row is None else to_datetime(row["refresh_until"])
        return until is not None and until > utc_ms(now)

    def release(self, consent_id: str, *, owner: str) -> bool:
        """Give a claim back (after the refresh, or when it failed); whether `owner` still held it."""
        return (
            self.tx.execute(
                "UPDATE consent_tokens SET refresh_owner = NULL, refresh_until = NULL"
                " WHERE consent_id = ? AND refresh_owner = ?",
                (consent_id, owner),
            )
            == 1
        )
