"""The per-consent authorization-code tokens every flow pays with (A3, B2): one copy of the refresh.

    token = await access_token(ctx, bank, consent_id)               # refreshed first when about to expire
    token = await access_token(ctx, bank, consent_id, force=True)   # the bank refused it: refresh now

The tokens live encrypted per consent (`tx.tokens`, stored by the callback's code exchange). A token that
expires within the integration's `token_refresh_margin` is refreshed with the refresh grant first and replaced
atomically (`tokens.replace`, compare-and-set on its version): when another instance refreshed first, the
winner's tokens are used.
"""

from __future__ import annotations

from processor.bank import BankClient, BankError
from processor.bank.errors import Disposition, describe, disposition
from processor.engine.context import EngineContext
from processor.store import StoreTx, VersionConflictError


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
    try:
        fresh = await bank.refresh(tokens.refresh_token)
    except BankError as exc:
        if disposition(exc) is not Disposition.REFUSE:
            raise
        raise TokenUnavailableError(
            f"the refresh grant for consent {consent_id} was refused ({describe(exc)}); "
            "the consent must be authorised again"
        ) from exc
    if fresh.consent_id is not None and fresh.consent_id != consent_id:
        raise TokenUnavailableError(f"the refreshed token names consent {fresh.consent_id}, not {consent_id}")
    stored = tokens

    def save(tx: StoreTx) -> str:
        try:
            return tx.tokens.replace(
                stored,
                access_token=fresh.access_token,
                expires_at=fresh.expires_at,
                now=ctx.clock.now(),
                refresh_token=fresh.refresh_token,
                scope=fresh.scope or None,
            ).access_token
        except VersionConflictError:
            winner = tx.tokens.get(consent_id)
            if winner is None:
                raise TokenUnavailableError(f"the tokens of consent {consent_id} were deleted meanwhile") from None
            return winner.access_token

    return await ctx.store.arun(save)
