"""What the store lets a caller watch without knowing how: an `Observer` is told of every transaction and of
every outbox event appended, and may give headers to store with the event (the composition layer's tracing
puts the W3C trace context there; processor/cli/telemetry.py). The store imports nothing of the observer's
library: it opens the observer's context managers and keeps the header text it is given.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol


class Observer(Protocol):
    """Watches the store's work (set as `Store.observer`)."""

    def transaction(self, *, write: bool, dialect: str) -> AbstractContextManager[object]:
        """Entered around one transaction (each attempt of `Store.run`)."""
        ...

    def event(self, *, topic: str, key: str, status: str | None) -> AbstractContextManager[dict[str, str]]:
        """Entered around appending one outbox event; yields headers to store with it (the caller's own
        headers win over these)."""
        ...
