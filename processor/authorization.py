"""Authorization machinery shared by every flow kind: the stable approval link, PAR, and the redirect callback.

A flow kind ("file" for file payments, "mandate" for VRP mandates) plugs in by registering an object that
satisfies `AuthorizationHooks`:

    kinds = FlowKinds()
    kinds.register("file", FileAuthorizationHooks())
    kinds.register("mandate", MandateAuthorizationHooks())      # processor/engine/vrp_flow.py

The hooks are synchronous and run inside a store transaction (`tx`) opened by this module, so the flow's
state change, its outbox event and (for `on_authorized`) the stored tokens commit together or not at all.
They must touch nothing but the store (the transaction may be repeated on a busy database).

Sequence (see docs/engine.md):

    approver opens  GET {public_url}/approve/{kind}/{flow_id}?t=<approval token>
      -> hooks.consent_for(tx, flow_id): token, deadline, still awaiting?          (else a refusal page)
      -> new auth attempt: state (256 bits) + PKCE verifier (encrypted), committed
      -> E4 PAR (fresh request_uri every time), E5 authorization URL
      -> 302 to the bank
    bank redirects  GET {redirect_uri path}?code&state&iss   (or ?error=access_denied&state)
                    POST {redirect_uri path} {"redirect_url": "..."}
      -> consume state (single use, unexpired); check iss == the integration's issuer when present
      -> the flow must still await authorization of the attempt's consent (else no exchange)
      -> E6 code exchange -> tokens stored encrypted + hooks.on_authorized(...) in one transaction
      -> error=access_denied -> hooks.on_rejected(...)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable
from urllib.parse import quote

from processor.store import StoreTx

# The store's `auth_attempts.flow_kind` column knows two values; registry kinds map onto them.
_STORE_FLOW_KIND = {"file": "file", "mandate": "vrp", "vrp": "vrp"}


@dataclass(frozen=True)
class PendingAuthorization:
    """What the authorization machinery needs to know about one flow, as its kind's hook reads it.

    - `integration`: the bank integration (configuration section) the flow uses.
    - `consent_id`: the bank's consent awaiting authorization (None while it does not exist yet).
    - `approval_token`: the unguessable token of the flow's approval link (compared in constant time here).
    - `deadline`: when the approval link stops working (None: no deadline).
    - `awaiting`: True only while the flow waits for its approver; any other state (not yet ready, already
      authorised, rejected, expired, ended) makes the link refuse and the callback skip the token exchange.
    - `state`: the flow's state name, shown on refusal pages and in logs.
    """

    integration: str
    consent_id: str | None
    approval_token: str = field(repr=False)
    deadline: datetime | None
    awaiting: bool
    state: str


@runtime_checkable
class AuthorizationHooks(Protocol):
    """What a flow kind provides to the authorization machinery. Every method runs inside the transaction
    `tx` opened by the caller and must only use the store through it (no I/O, no bank calls)."""

    def consent_for(self, tx: StoreTx, flow_id: str) -> PendingAuthorization | None:
        """Read the flow: its integration, consent, approval token, deadline and whether it still awaits
        authorization. None when no such flow exists."""
        ...

    def on_authorized(self, tx: StoreTx, flow_id: str, consent_id: str, *, now: datetime) -> None:
        """The approver authorised `consent_id` and its tokens are stored (same transaction). Move the flow
        on (e.g. to AUTHORIZED, publishing its status event) and make it due for the worker. Called at most
        once per flow while it awaits authorization; it may raise to roll everything back (e.g. the flow
        changed concurrently), in which case the tokens are not stored either."""
        ...

    def on_rejected(self, tx: StoreTx, flow_id: str, reason: str, *, now: datetime) -> None:
        """The approver refused (`error=access_denied` or another OAuth error on the redirect; `reason` says
        which). End the flow (e.g. REJECTED, publishing its status event). Called only while it awaits
        authorization."""
        ...


class UnknownFlowKindError(KeyError):
    """No hooks are registered for a kind."""


class FlowKinds:
    """The registry of flow kinds: kind name (as it appears in approval links) -> hooks."""

    def __init__(self) -> None:
        self._hooks: dict[str, AuthorizationHooks] = {}

    def register(self, kind: str, hooks: AuthorizationHooks) -> None:
        """Register (or replace) the hooks of `kind` ("file" or "mandate")."""
        if kind not in _STORE_FLOW_KIND:
            raise ValueError(f"unknown flow kind {kind!r}; known: {sorted(_STORE_FLOW_KIND)}")
        self._hooks[kind] = hooks

    def hooks(self, kind: str) -> AuthorizationHooks:
        """The hooks of `kind`; `UnknownFlowKindError` when none are registered."""
        try:
            return self._hooks[kind]
        except KeyError:
            raise UnknownFlowKindError(kind) from None

    def __contains__(self, kind: object) -> bool:
        return kind in self._hooks

    def __iter__(self) -> Iterator[str]:
        return iter(self._hooks)


def store_flow_kind(kind: str) -> str:
    """The `auth_attempts.flow_kind` value of a registry kind ("file" -> "file", "mandate" -> "vrp")."""
    return _STORE_FLOW_KIND[kind]


def registry_kind(store_kind: str) -> str:
    """The registry kind of a stored attempt's `flow_kind` ("vrp" -> "mandate")."""
    return "mandate" if store_kind == "vrp" else store_kind


def approval_link(public_url: str, kind: str, flow_id: str, approval_token: str) -> str:
    """The stable approval link of a flow, published as `authorization_url` in its status event:
    `{public_url}/approve/{kind}/{flow_id}?t={approval_token}` (flow id and token URL-quoted)."""
    base = public_url.rstrip("/")
    return f"{base}/approve/{quote(kind, safe='')}/{quote(flow_id, safe='')}?t={quote(approval_token, safe='')}"
