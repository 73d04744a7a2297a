"""Consent documents, shared by the resource routes (which create them) and the authorization server.

Stored shape, for both kinds (`file_consent` and `vrp_consent`), keyed by ConsentId:

    {"client_id": str, "status": str, "created": iso_ms, "updated": iso_ms,
     "data": <the request's Data object as accepted, amounts as Decimal>, "risk": {...},
     ...part-specific fields}

File consent statuses: AwaitingUpload -> AwaitingAuthorisation (file uploaded) -> Authorised (approver)
-> Consumed (payment created), or Rejected. VRP consent: AwaitingAuthorisation -> Authorised | Rejected;
Authorised -> Revoked when the customer revokes it (routes/admin.py), or -> Rejected when they refuse to
re-authenticate it.
"""

from __future__ import annotations

from sandbox.clock import iso_ms
from sandbox.state import Bank
from sandbox.store import Doc

FILE_KIND = "file_consent"
VRP_KIND = "vrp_consent"


def find_consent(bank: Bank, consent_id: str) -> tuple[str, Doc] | None:
    """The consent's kind and document, whichever kind it is."""
    for kind in (FILE_KIND, VRP_KIND):
        doc = bank.store.get(kind, consent_id)
        if doc is not None:
            return kind, doc
    return None


def set_status(bank: Bank, kind: str, consent_id: str, status: str) -> Doc:
    """Move a consent to `status`, stamping `updated`; returns the new document."""
    doc = bank.store.get(kind, consent_id)
    if doc is None:
        raise KeyError(consent_id)
    doc["status"] = status
    doc["updated"] = iso_ms(bank.now())
    bank.store.put(kind, consent_id, doc)
    return doc


def new_consent(
    bank: Bank, kind: str, consent_id: str, client_id: str, status: str, data: Doc, risk: Doc, **extra: object
) -> Doc:
    """Store a new consent of `kind` in `status` (created = updated = now) in the shape above; returns it."""
    now = iso_ms(bank.now())
    doc: Doc = {
        "client_id": client_id,
        "status": status,
        "created": now,
        "updated": now,
        "data": data,
        "risk": risk,
        **extra,
    }
    bank.store.put(kind, consent_id, doc)
    return doc
