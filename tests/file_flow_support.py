"""Helpers shared by the flow A tests that run outside the in-process rig (the `pay-file` command, the crash
child): the approver's browser over plain HTTP, and batch files."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from processor.devtools.approver import decision_post


def _json_default(value: object) -> str:
    if isinstance(value, Decimal):
        return format(value, "f")
    raise TypeError(type(value).__name__)


def write_batch(path: Path, document: dict[str, Any]) -> Path:
    """Write a batch document as JSON (amounts as exact decimal strings)."""
    path.write_text(json.dumps(document, default=_json_default, indent=2))
    return path


async def browser_decide(http: httpx.AsyncClient, link: str, *, approve: bool = True) -> httpx.Response:
    """The approver's browser: our approval link (302 to the bank), the bank's consent page, Approve or Reject,
    and the bank's redirect followed back to our callback API. Returns our API's answer."""
    opened = await http.get(link)
    assert opened.status_code == 302, opened.text
    page = await http.get(opened.headers["location"])
    assert page.status_code == 200, page.text
    target, data = decision_post(str(page.url), page.text, "approve" if approve else "reject")
    decided = await http.post(target, data=data)
    assert decided.status_code in (302, 303), decided.text
    return await http.get(decided.headers["location"])
