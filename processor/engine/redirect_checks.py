"""Checks on what the bank hands us for the approver's browser, both ways (pure; used by `authorization.py`).

- **The approval URL (E5)** is where our approval link redirects the approver. A hostile or compromised resource
  server could answer E5 with any URL and so turn our link (published on `dispersion.status`, trusted by the
  approver) into an open redirect to a phishing page. The URL must therefore be the authorization endpoint that
  the bank's discovery names, followed by a query, and carry the `request_uri` we just pushed, exactly once.
- **The redirect back** names its issuer (`iss`, RFC 9207). When present it must be the integration's issuer
  (a mix-up attack sends one bank's code to another bank's state). When the bank's discovery says it sends `iss`
  (`authorization_response_iss_parameter_supported`), a redirect without it is refused as well: an attacker
  strips it to slip past the first check.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qs, urlsplit


def approval_url_problem(url: str, authorization_endpoint: str, request_uri: str) -> str | None:
    """Why `url` (E5's answer) must not be followed, or None when it is the bank's authorization endpoint
    (discovery's `authorization_endpoint`, byte for byte, then `?` or, when the endpoint has a query, `&`)
    carrying our `request_uri` once."""
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        return "the authorization URL contains blanks or control characters"
    joiner = "&" if "?" in authorization_endpoint else "?"
    if not authorization_endpoint or not url.startswith(authorization_endpoint + joiner):
        return "the authorization URL is not at the authorization endpoint of the bank's discovery"
    parts = urlsplit(url)
    if parts.fragment:
        return "the authorization URL carries a fragment"
    found = parse_qs(parts.query, keep_blank_values=True).get("request_uri", [])
    if found != [request_uri]:
        return "the authorization URL does not carry the request_uri we pushed"
    return None


def issuer_problem(params: Mapping[str, str], issuer: str, *, iss_required: bool) -> tuple[str, str] | None:
    """(code, message) when the redirect's `iss` is not `issuer`, or is missing while `iss_required` (the
    bank's discovery says it always sends it); None when it passes."""
    iss = params.get("iss")
    if iss is None:
        if iss_required:
            return "missing_iss", "The authorization response does not name its issuer (iss)."
        return None
    if iss != issuer:
        return "issuer_mismatch", "The authorization response comes from another issuer."
    return None
