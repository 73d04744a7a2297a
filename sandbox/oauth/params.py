"""Form-parameter rules shared by the token and PAR endpoints."""

from __future__ import annotations

from sandbox.consents import VRP_KIND
from sandbox.errors import OAuthError

AWAITING = "AwaitingAuthorisation"
AUTHORISED = "Authorised"
REVOKED = "Revoked"


def may_authorise(kind: str, status: str) -> bool:
    """Whether an approver may decide on a consent: one awaiting authorisation, or an authorised VRP consent being
    re-authenticated (its customer signs in again so the client gets new tokens; the consent and its limits stay)."""
    return status == AWAITING or (kind == VRP_KIND and status == AUTHORISED)


def missing(form: dict[str, str], names: tuple[str, ...]) -> None:
    """400 invalid_request naming every required parameter that is absent or empty."""
    absent = [name for name in names if not form.get(name)]
    if absent:
        raise OAuthError("invalid_request", f"missing required parameter: {', '.join(absent)}")


def consent_id_of_scope(scope: str) -> str:
    """The consent id of a PAR scope `payments:<consent_id> openid` (order free); 400 invalid_scope otherwise."""
    tokens = scope.split()
    named = [t.removeprefix("payments:") for t in tokens if t.startswith("payments:")]
    others = sorted(t for t in tokens if not t.startswith("payments:"))
    if len(named) != 1 or not named[0] or others != ["openid"]:
        raise OAuthError("invalid_scope", "scope must be 'payments:<consent_id> openid'")
    return named[0]


def grant_type_of(form: dict[str, str]) -> str:
    """The grant, from `grand_type` (the spec's spelling) or `grant_type`; both must agree when both are sent."""
    grand, grant = form.get("grand_type"), form.get("grant_type")
    if grand and grant and grand != grant:
        raise OAuthError("invalid_request", "grand_type and grant_type are both present and differ")
    value = grand or grant
    if not value:
        raise OAuthError("invalid_request", "missing required parameter: grand_type (or grant_type)")
    return value
