"""The sandbox's state: JSON documents by kind and id, in memory or in a SQLite file.

Every handler runs on one event loop and store calls never await, so a read-modify-write inside one
handler is atomic without locks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

from sandbox.jsonutil import dumps, loads

Doc = dict[str, Any]


def _copy(value: Any) -> Any:
    """A copy of a stored (parsed) JSON value: objects and arrays copied, the rest (immutable) shared. The same
    value a new parse of its text would give, at a fraction of the cost of that round trip on every read."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


class Store:
    """Documents keyed by (kind, id). `path=None` keeps them in memory only."""

    def __init__(self, path: str | None = None) -> None:
        self._memory: dict[str, dict[str, Doc]] = {}
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS docs (kind TEXT NOT NULL, id TEXT NOT NULL, doc TEXT NOT NULL,"
                " PRIMARY KEY (kind, id))"
            )

    def get(self, kind: str, key: str) -> Doc | None:
        """Return a copy of the document, or None."""
        if self._db is None:
            doc = self._memory.get(kind, {}).get(key)
            return _copy(doc) if doc is not None else None
        row = self._db.execute("SELECT doc FROM docs WHERE kind=? AND id=?", (kind, key)).fetchone()
        return loads(row[0]) if row else None

    def put(self, kind: str, key: str, doc: Doc) -> None:
        """Insert or replace a document (stored as a copy)."""
        text = dumps(doc)
        if self._db is None:
            # Kept as parsed from its text, so a read gives exactly what a read of the SQLite file would.
            self._memory.setdefault(kind, {})[key] = loads(text)
            return
        self._db.execute("INSERT OR REPLACE INTO docs (kind, id, doc) VALUES (?, ?, ?)", (kind, key, text.decode()))

    def add(self, kind: str, key: str, doc: Doc) -> bool:
        """Insert a document only if the key is new; return whether it was inserted."""
        if self.get(kind, key) is not None:
            return False
        self.put(kind, key, doc)
        return True

    def delete(self, kind: str, key: str) -> None:
        """Remove a document if present."""
        if self._db is None:
            self._memory.get(kind, {}).pop(key, None)
            return
        self._db.execute("DELETE FROM docs WHERE kind=? AND id=?", (kind, key))

    def items(self, kind: str) -> Iterator[tuple[str, Doc]]:
        """Every (id, document) of a kind."""
        if self._db is None:
            for key, doc in list(self._memory.get(kind, {}).items()):
                yield key, _copy(doc)
            return
        for key, text in self._db.execute("SELECT id, doc FROM docs WHERE kind=?", (kind,)).fetchall():
            yield key, loads(text)

    def count(self, kind: str) -> int:
        """How many documents of a kind exist."""
        if self._db is None:
            return len(self._memory.get(kind, {}))
        row = self._db.execute("SELECT COUNT(*) FROM docs WHERE kind=?", (kind,)).fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the SQLite file, if any."""
        if self._db is not None:
            self._db.close()
            self._db = None
