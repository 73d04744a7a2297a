"""The `consent_tokens` table: the authorization-code tokens of each consent (encrypted with the store key),
replaced under a version check when refreshed; reached as `tx.tokens`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from processor.domain.time import utc_ms
from processor.store.crypto import Cipher
from processor.store.db import Tx, to_datetime
from processor.store.work import VersionConflictError


@dataclass(frozen=True)
class ConsentTokens:
    """The authorization-code tokens of one consent (decrypted)."""

    consent_id: str
    integration: str
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    scope: str | None
    expires_at: datetime
    version: int
    created_at: datetime
    updated_at: datetime

    def expires_within(self, now: datetime, seconds: float) -> bool:
        """Whether the access token is expired or will be within `seconds` (refresh it first)."""
        return (self.expires_at - utc_ms(now)).total_seconds() <= seconds


class TokenRepo:
    """The `consent_tokens` table; both tokens are encrypted with the store key."""

    def __init__(self, tx: Tx, cipher: Cipher) -> None:
        self.tx = tx
        self.cipher = cipher

    @staticmethod
    def _context(column: str, consent_id: str) -> str:
        return f"consent_tokens.{column}|{consent_id}"

    def _tokens(self, row: Mapping[str, Any]) -> ConsentTokens:
        consent_id = str(row["consent_id"])
        refresh = row["refresh_token_enc"]
        expires, created, updated = (to_datetime(row[c]) for c in ("expires_at", "created_at", "updated_at"))
        assert expires is not None and created is not None and updated is not None
        return ConsentTokens(
            consent_id=consent_id,
            integration=str(row["integration"]),
            access_token=self.cipher.decrypt(str(row["access_token_enc"]), self._context("access_token", consent_id)),
            refresh_token=None
            if refresh is None
            else self.cipher.decrypt(str(refresh), self._context("refresh_token", consent_id)),
            scope=row["scope"],
            expires_at=expires,
            version=int(row["version"]),
            created_at=created,
            updated_at=updated,
        )

    def _sealed(self, consent_id: str, access_token: str, refresh_token: str | None) -> tuple[str, str | None]:
        return (
            self.cipher.encrypt(access_token, self._context("access_token", consent_id)),
            None
            if refresh_token is None
            else self.cipher.encrypt(refresh_token, self._context("refresh_token", consent_id)),
        )

    def save(
        self,
        consent_id: str,
        *,
        integration: str,
        access_token: str,
        expires_at: datetime,
        now: datetime,
        refresh_token: str | None = None,
        scope: str | None = None,
    ) -> ConsentTokens:
        """Store the tokens of a consent, replacing any stored ones (after the code exchange)."""
        access, refresh = self._sealed(consent_id, access_token, refresh_token)
        now = utc_ms(now)
        row = self.tx.fetchone(
            "INSERT INTO consent_tokens (consent_id, integration, access_token_enc, refresh_token_enc, scope,"
            " expires_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (consent_id) DO UPDATE SET integration = excluded.integration,"
            " access_token_enc = excluded.access_token_enc, refresh_token_enc = excluded.refresh_token_enc,"
            " scope = excluded.scope, expires_at = excluded.expires_at, updated_at = excluded.updated_at,"
            " version = consent_tokens.version + 1 RETURNING *",
            (consent_id, integration, access, refresh, scope, utc_ms(expires_at), now, now),
        )
        assert row is not None
        return self._tokens(row)

    def replace(
        self,
        current: ConsentTokens,
        *,
        access_token: str,
        expires_at: datetime,
        now: datetime,
        refresh_token: str | None = None,
        scope: str | None = None,
    ) -> ConsentTokens:
        """After a refresh: replace the tokens if they are still the version read (`VersionConflictError` if another
        instance refreshed first; then use its tokens). A None refresh token keeps the stored one."""
        access, refresh = self._sealed(current.consent_id, access_token, refresh_token)
        row = self.tx.fetchone(
            "UPDATE consent_tokens SET access_token_enc = ?, refresh_token_enc = COALESCE(?, refresh_token_enc),"
            " scope = COALESCE(?, scope), expires_at = ?, updated_at = ?, version = version + 1"
            " WHERE consent_id = ? AND version = ? RETURNING *",
            (access, refresh, scope, utc_ms(expires_at), utc_ms(now), current.consent_id, current.version),
        )
        if row is None:
            raise VersionConflictError("consent_tokens", current.consent_id, current.version, None)
        return self._tokens(row)

    def get(self, consent_id: str) -> ConsentTokens | None:
        """The decrypted tokens of a consent, or None."""
        row = self.tx.fetchone("SELECT * FROM consent_tokens WHERE consent_id = ?", (consent_id,))
        return None if row is None else self._tokens(row)

    def delete(self, consent_id: str) -> bool:
        """Forget a consent's tokens (e.g. when its flow ends); whether there were any."""
        return self.tx.execute("DELETE FROM consent_tokens WHERE consent_id = ?", (consent_id,)) == 1
