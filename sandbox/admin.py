"""Placeholder: routes of this part are being written."""

from __future__ import annotations

from starlette.routing import BaseRoute

from sandbox.state import Bank


def routes(bank: Bank) -> list[BaseRoute]:
    """The routes of this part."""
    return []
