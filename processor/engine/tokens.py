"""The per-consent authorization-code tokens every flow pays with (A3, B2): one copy of the refresh.

    token = await access_token(ctx, bank, consent_id)               # refreshed first when about to expire
    token = await access_token(ctx, bank, consent_id, force=True)   # the bank refused it: refresh now

The tokens live encrypted per consent (`tx.tokens`, stored by the callback's code exchange). A token that
expires within the integration's `token_refresh_margin` is refreshed with the refresh grant first.

**One refresh at a time per consent, across instances.** A bank that rotates refresh tokens spends the one
presented, so of two grants sent at once the second is refused (`invalid_grant`). Before the grant the refresher
claims the consent's token row (`tx.refresh_claims`, a compare-and-set on the tokens' version with an expiry of
`REFRESH_CLAIM_SECONDS`); whoever finds it claimed waits for the winner's tokens and uses them. The new tokens
replace the old ones and the claim is released in one transaction. Should two grants still cross (a claim that ran
out under a very slow bank), the refused one re-reads the store and uses the winner's tokens: losing a race never
ends a payment REJECTED or FAILED.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from processor.bank import BankClient, BankError
from processor.bank.errors import Disposition, describe, disposition
from processor.engine.context import EngineContext
from processor.store import ConsentTokens, StoreTx, VersionConflictError
from processor.store.refresh_claims import Claim

log = structlog.get_logger("processor.engine.tokens")

# A claim runs out after this long (its holder died or hangs): another instance may then refresh. Longer than a
# refresh grant takes with the bank client's retries, shorter than a flow's lease.
REFRESH_CLAIM_SECONDS = 60.0
_FIRST_WAIT = 0.02
_LONGEST_WAIT = 0.5
_REFUSED_GRACE = 2.0  # seconds a refused refresh waits for a crossing grant's tokens before giving up


class TokenUnavailableError(LookupError):
    """No usable authorization-code token for the consent: none stored, or the refresh grant was refused. The
    consent must be authorised again."""


async def access_token(ctx: EngineContext, bank: BankClient, consent_id: str, *, force: bool = False) -> str:
    """The consent's access token, refreshed first when it expires within the integration's
    `token_refresh_margin`, or when `force` (the bank refused it). `TokenUnavailableError` when there is none
    or the bank refuses the refresh grant; a transient failure of the refresh raises the bank's error."""
    tokens = await ctx.store.arun(lambda tx: tx.tokens.get(consent_id), write=False)
    if tokens is None:
        raise TokenUnavailableError(f"no tokens are stored for consent {consent_id}")
    margin = float(bank.integration.token_refresh_margin)
    if not force and not tokens.expires_within(ctx.clock.now(), margin):
        return tokens.access_token
    if tokens.refresh_token is None:
        raise TokenUnavailableError(f"the token of consent {consent_id} expired and there is no refresh token")
    owner = secrets.token_hex(8)
    theirs = await _claim(ctx, tokens, owner)
    if theirs is not None:  # another instance refreshed meanwhile
        return theirs.access_token
    try:
        fresh = await bank.refresh(tokens.refresh_token)
    except BankError as exc:
        await ctx.store.arun(lambda tx: tx.refresh_claims.release(consent_id, owner=owner))
        if disposition(exc) is not Disposition.REFUSE:
            raise
        winner = await _refreshed_by_another(ctx, tokens)
        if winner is not None:  # our refresh token was spent by a grant that crossed ours
            log.info("refresh refused after another instance refreshed; using its token", consent_id=consent_id)
            return winner.access_token
        raise TokenUnavailableError(
            f"the refresh grant for consent {consent_id} was refused ({describe(exc)}); "
            "the consent must be authorised again"
        ) from exc
    if fresh.consent_id is not None and fresh.consent_id != consent_id:
        await ctx.store.arun(lambda tx: tx.refresh_claims.release(consent_id, owner=owner))
        raise TokenUnavailableError(f"the refreshed token names consent {fresh.consent_id}, not {consent_id}")

    def save(tx: StoreTx) -> str:
        try:
            saved = tx.tokens.replace(
                tokens,
                access_token=fresh.access_token,
                expires_at=fresh.expires_at,
                now=ctx.clock.now(),
                refresh_token=fresh.refresh_token,
                scope=fresh.scope or None,
            )
        except VersionConflictError:
            winner = tx.tokens.get(consent_id)
            if winner is None:
                raise TokenUnavailableError(f"the tokens of consent {consent_id} were deleted meanwhile") from None
            return winner.access_token
        tx.refresh_claims.release(consent_id, owner=owner)
        return saved.access_token

    return await ctx.store.arun(save)


async def _claim(ctx: EngineContext, tokens: ConsentTokens, owner: str) -> ConsentTokens | None:
    """Claim the refresh of `tokens` (None: ours to do), or wait while another instance holds the claim and
    return the tokens it stored. After `REFRESH_CLAIM_SECONDS` of waiting the refresh is made unclaimed."""
    consent_id = tokens.consent_id
    started = time.monotonic()
    wait = _FIRST_WAIT
    while True:
        claim = await ctx.store.arun(_claim_at(tokens, owner, ctx.clock.now()))
        if claim is Claim.CLAIMED:
            return None
        if claim is Claim.GONE:
            raise TokenUnavailableError(f"the tokens of consent {consent_id} were deleted meanwhile")
        if claim is Claim.REFRESHED:
            current = await ctx.store.arun(lambda tx: tx.tokens.get(consent_id), write=False)
            if current is None:
                raise TokenUnavailableError(f"the tokens of consent {consent_id} were deleted meanwhile")
            return current
        if time.monotonic() - started >= REFRESH_CLAIM_SECONDS:
            log.warning("another instance's token refresh takes too long; refreshing anyway", consent_id=consent_id)
            return None
        await asyncio.sleep(wait)
        wait = min(wait * 2, _LONGEST_WAIT)


async def _refreshed_by_another(ctx: EngineContext, tokens: ConsentTokens) -> ConsentTokens | None:
    """After a refused refresh: the tokens another instance stored since `tokens` were read (waiting while it
    holds a live claim, or `_REFUSED_GRACE` seconds: its refresh is under way), or None when nobody did."""
    consent_id = tokens.consent_id
    started = time.monotonic()
    wait = _FIRST_WAIT
    while True:
        current, held = await ctx.store.arun(_read_with_claim(consent_id, ctx.clock.now()), write=False)
        if current is None:
            return None
        if current.version != tokens.version:
            return current
        waited = time.monotonic() - started
        # A grant that crossed ours without a claim (one that ran out) may still be storing its tokens: a moment.
        if (not held and waited >= _REFUSED_GRACE) or waited >= REFRESH_CLAIM_SECONDS:
            return None
        await asyncio.sleep(wait)
        wait = min(wait * 2, _LONGEST_WAIT)


def _read_with_claim(consent_id: str, now: datetime) -> Callable[[StoreTx], tuple[ConsentTokens | None, bool]]:
    def read(tx: StoreTx) -> tuple[ConsentTokens | None, bool]:
        return tx.tokens.get(consent_id), tx.refresh_claims.held(consent_id, now=now)

    return read


def _claim_at(tokens: ConsentTokens, owner: str, now: datetime) -> Callable[[StoreTx], Claim]:
    until = now + timedelta(seconds=REFRESH_CLAIM_SECONDS)

    def claim(tx: StoreTx) -> Claim:
        return tx.refresh_claims.claim(tokens.consent_id, version=tokens.version, owner=owner, now=now, until=until)

    return claim
