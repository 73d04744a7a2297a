"""Helpers shared by the flow A tests that run outside the in-process rig (the `pay-file` command, the crash
child): the approver's browser over plain HTTP, and batch files."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
from bank_support import _Forms


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
    parser = _Forms()
    parser.feed(page.text)
    button = "approve" if approve else "reject"
    form = next(f for f in parser.forms if button in f["buttons"])
    data = dict(form["fields"])
    name, value = form["buttons"][button]
    if name:
        data[name] = value
    decided = await http.post(urljoin(str(page.url), form["action"]), data=data)
    assert decided.status_code in (302, 303), decided.text
    return await http.get(decided.headers["location"])
