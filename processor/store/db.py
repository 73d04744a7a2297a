"""A thin adapter over sqlite3 and psycopg 3: one interface for both engines.

    db = connect("sqlite:////var/lib/dispersion/flows.db")     # or "sqlite://:memory:"
    db = connect("postgresql://user:pw@host:5432/dbname")
    with db.transaction() as tx:                                # commit on success, rollback on error
        row = tx.fetchone("SELECT * FROM flows WHERE batch_id = ?", (batch_id,))

What it normalises:

- URLs, read as SQLAlchemy does: `sqlite:///relative/path.db` (relative to the working directory),
  `sqlite:////absolute/path.db`, `sqlite://:memory:` (or `sqlite://`); `postgresql://` or `postgres://`
  handed to libpq unchanged (plus an optional `schema`, which sets `search_path`).
- Parameters are always written `?` (qmark); for PostgreSQL they are rewritten to `%s` (outside quoted
  literals) and a literal `%` is escaped.
- Values: `datetime` must be timezone-aware and is stored in UTC truncated to milliseconds (ISO 8601 text
  `YYYY-MM-DDTHH:MM:SS.mmmZ` on SQLite, which sorts like the instant it names; `TIMESTAMPTZ(3)` on
  PostgreSQL). `Decimal` goes to SQLite as text and to PostgreSQL as NUMERIC. Rows come back as dicts;
  `to_datetime` / `to_decimal` turn either engine's representation back into Python values.
- Transactions: SQLite opens `BEGIN IMMEDIATE` for writers (the write lock is taken up front, so two writers
  never deadlock on a lock upgrade; waits are bounded by the busy timeout) and runs in WAL mode with
  `synchronous=FULL` (a commit survives power loss: a recorded idempotency key must not vanish after the
  bank call it guards). PostgreSQL runs READ COMMITTED with explicit `BEGIN`/`COMMIT`; callers lock rows
  with `SELECT ... FOR UPDATE [SKIP LOCKED]` where `tx.dialect == "postgresql"`.
- Errors: constraint violations raise `ConstraintError`, a busy/locked database `StoreBusyError`, everything else
  from the driver `StoreError` (the driver exception is chained).

Connections come from a small pool; a transaction holds one connection from `BEGIN` to `COMMIT`, so a
`Database` can be shared by threads. Calls block: an asyncio caller runs them with `asyncio.to_thread` or
accepts the short block (each transaction is a few statements on an indexed row).
"""

from __future__ import annotations

import queue
import re
import sqlite3
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Literal

import psycopg
import psycopg.errors
from psycopg.rows import dict_row

from processor.domain.settings import redact_url
from processor.domain.time import iso_ms, utc_ms
from processor.store.observe import Observer

Dialect = Literal["sqlite", "postgresql"]
_PG_RETRYABLE = (
    psycopg.errors.LockNotAvailable,
    psycopg.errors.QueryCanceled,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
)
Row = dict[str, Any]
Params = Sequence[object]

MIN_SQLITE = (3, 35, 0)  # RETURNING and UPDATE ... FROM


class StoreError(Exception):
    """Base of every error the store raises on purpose."""


class ConstraintError(StoreError):
    """A constraint (unique, foreign key, check, not null) refused a write."""


class StoreBusyError(StoreError):
    """The transaction was rolled back because of contention, so running it again is safe: SQLite stayed
    locked past the busy timeout, or PostgreSQL hit its lock timeout, a deadlock or a serialization failure."""


class ConfigurationError(StoreError):
    """The store URL or settings are unusable."""


@dataclass(frozen=True)
class Target:
    """Where a `Database` points: the engine and how to reach it (secrets kept out of `repr`)."""

    dialect: Dialect
    location: str  # SQLite path or ":memory:"; PostgreSQL conninfo URL
    schema: str | None = None

    def __repr__(self) -> str:
        return f"Target({self.dialect}, {redact_url(self.location)}, schema={self.schema})"


_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def parse_url(url: str, schema: str | None = None) -> Target:
    """Parse a store URL: `sqlite://<path>`, `sqlite://:memory:`, `postgresql://...` or `postgres://...`."""
    if schema is not None and not _SCHEMA_NAME.match(schema):
        raise ConfigurationError(f"invalid schema name {schema!r}")
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        if schema is not None:
            raise ConfigurationError("a schema applies to PostgreSQL only")
        if rest in ("", ":memory:", "/:memory:"):
            return Target("sqlite", ":memory:")
        if not rest.startswith("/") or rest == "/":
            raise ConfigurationError(
                "sqlite URL must be sqlite:///relative/path.db, sqlite:////absolute/path.db or sqlite://:memory:"
            )
        return Target("sqlite", rest[1:])  # as SQLAlchemy: three slashes relative, four absolute
    if url.startswith(("postgresql://", "postgres://")):
        return Target("postgresql", url, schema)
    raise ConfigurationError(f"unsupported store URL {redact_url(url)!r} (use sqlite://... or postgresql://...)")


# -- values -----------------------------------------------------------------------------------------------------


def to_datetime(value: object) -> datetime | None:
    """A stored timestamp (SQLite text or PostgreSQL datetime) as an aware UTC datetime; None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return utc_ms(value if value.tzinfo is not None else value.replace(tzinfo=UTC))
    if isinstance(value, str):
        return utc_ms(datetime.fromisoformat(value))
    raise TypeError(f"not a stored timestamp: {type(value).__name__}")


def to_decimal(value: object) -> Decimal | None:
    """A stored amount (SQLite text or PostgreSQL NUMERIC) as a Decimal; None stays None. Floats are refused."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return value
    if isinstance(value, str | int) and not isinstance(value, bool):
        try:
            return Decimal(value)
        except InvalidOperation:
            raise StoreError(f"stored amount {value!r} is not a decimal") from None
    raise TypeError(f"not a stored amount: {type(value).__name__}")


def _sqlite_param(value: object) -> object:
    if isinstance(value, datetime):
        return iso_ms(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        raise TypeError("floats are not stored; use Decimal")
    return value


# The kinds of value `_pg_param` changes (a datetime, to whole milliseconds in UTC) or refuses (a float).
_PG_CONVERTED = (datetime, float)


def _pg_param(value: object) -> object:
    if not isinstance(value, _PG_CONVERTED):
        return value
    if isinstance(value, float):
        raise TypeError("floats are not stored; use Decimal")
    return utc_ms(value)


def _pg_column(values: Sequence[object]) -> list[object]:
    """`_pg_param` of each value of one column, looked at once per kind of value in it: a column of 100 texts went
    from 5.7 to 1.6 us (the completion writes about 16 such columns; `benchmarks/hot_checks.py`)."""
    if any(issubclass(kind, _PG_CONVERTED) for kind in set(map(type, values))):
        return [_pg_param(value) for value in values]
    return list(values)


_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|\?|%")


@lru_cache(maxsize=512)
def qmark_to_pyformat(sql: str) -> str:
    """Rewrite `?` placeholders as `%s` and escape `%`, leaving quoted literals and comments untouched."""

    def swap(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        return token

    return _TOKEN.sub(swap, sql)


# -- transactions -----------------------------------------------------------------------------------------------


class Tx:
    """One open transaction. Use the `?` placeholder style on both engines."""

    def __init__(
        self, dialect: Dialect, conn: sqlite3.Connection | psycopg.Connection[Row], *, read_only: bool = False
    ) -> None:
        self.dialect: Dialect = dialect
        self._conn = conn
        # A read (`transaction(write=False)`) runs plain SELECTs only: on PostgreSQL they run outside a transaction
        # block (see `Database._pg_tx`), where a write or a row lock would not be held with the rest.
        self.read_only = read_only
        # A value of many megabytes went through this PostgreSQL connection (a 100,000-transfer batch or its
        # report): libpq keeps its buffers at the largest size they reached, so the pool closes the connection
        # after the transaction instead of keeping them.
        self.oversized = False
        self.observer: Observer | None = None  # set by `Store.transaction` (see processor.store.observe)

    def _run(self, sql: str, params: Params) -> tuple[list[Row] | None, int]:
        if self.read_only and not _plain_select(sql):
            raise StoreError(f"a read-only transaction runs SELECTs without row locks only: {sql.split(None, 1)[0]}")
        with _driver_errors():
            if isinstance(self._conn, sqlite3.Connection):
                cur = self._conn.execute(sql, [_sqlite_param(p) for p in params])
                rows = cur.fetchall() if cur.description is not None else None
                return rows, cur.rowcount
            values = [_pg_param(p) for p in params]
            if not self.oversized and _any_large(values):
                self.oversized = True
            pcur = self._conn.execute(qmark_to_pyformat(sql), values)
            # Whether the statement returned rows, from the result's status: `description` would build a column
            # object per column each time (about 9 us for 14 columns, on every statement: `benchmarks/hot_checks.py`).
            result = pcur.pgresult
            prows = pcur.fetchall() if result is not None and result.status == _TUPLES_OK else None
            if prows and not self.oversized and any(_any_large(row.values()) for row in prows):
                self.oversized = True
            return prows, pcur.rowcount

    def execute(self, sql: str, params: Params = ()) -> int:
        """Run a statement; return the number of rows it changed (-1 when the driver cannot tell)."""
        return self._run(sql, params)[1]

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        """Run one statement once per row of parameters: on PostgreSQL in one round trip (psycopg's pipeline
        mode), the statement parsed once, where a statement per row was a round trip each."""
        if not rows:
            return
        self._refuse_write()
        with _driver_errors():
            if isinstance(self._conn, sqlite3.Connection):
                self._conn.executemany(sql, [[_sqlite_param(p) for p in row] for row in rows])
                return
            values = [[_pg_param(p) for p in row] for row in rows]
            if not self.oversized and any(_any_large(row) for row in values):
                self.oversized = True
            with self._conn.cursor() as cursor:
                cursor.executemany(qmark_to_pyformat(sql), values)

    def insert_many(
        self, table: str, columns: Mapping[str, str], rows: Sequence[Params], *, conflict: str = ""
    ) -> None:
        """`INSERT INTO table (columns)` of every row, then `conflict` (an `ON CONFLICT` clause without parameters;
        rows of one call must not conflict with each other). `columns` maps each column to its PostgreSQL type
        (an array of NULLs has none of its own). On PostgreSQL one statement: each column's values
        as one array, bound in binary, unnested by the server; a row per statement in one pipeline
        (`executemany`) cost about 3x the client CPU for 100 rows (benchmarks/store_lists.py). On SQLite an
        `executemany`."""
        if not rows:
            return
        self._refuse_write()
        names = ", ".join(columns)
        if isinstance(self._conn, sqlite3.Connection):
            marks = ", ".join("?" for _ in columns)
            self.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks}){conflict}", rows)  # noqa: S608
            return
        with _driver_errors():
            arrays = [_pg_column(column) for column in zip(*rows, strict=True)]
            if not self.oversized and any(_any_large(column) for column in arrays):
                self.oversized = True
            # The % of a conflict clause is escaped as `qmark_to_pyformat` escapes it.
            tail = conflict.replace("%", "%%")
            unnested = ", ".join(f"%b::{kind}[]" for kind in columns.values())
            self._conn.execute(f"INSERT INTO {table} ({names}) SELECT * FROM unnest({unnested}){tail}", arrays)  # noqa: S608

    def _refuse_write(self) -> None:
        if self.read_only:
            raise StoreError("a read-only transaction runs SELECTs without row locks only")

    def among(self, column: str, values: Sequence[object]) -> tuple[str, list[object]]:
        """`column` is one of `values` (at least one), as SQL and its parameters. On PostgreSQL `column = ANY(?)`
        with the values as one array: the statement's text is the same for any number of values, so psycopg
        converts it once and the server prepares it once, where an IN list of 100 placeholders was converted and
        parsed on every run; on SQLite an IN list."""
        if not values:
            raise ValueError("an IN list needs at least one value")
        if isinstance(self._conn, sqlite3.Connection):
            return f"{column} IN {in_clause(values)}", list(values)
        return f"{column} = ANY(?)", [list(values)]

    def sent_in_pieces(self, text: str) -> bool:
        """Whether `set_text` sends `text` in pieces (PostgreSQL, over `LARGE_VALUE`): a row that is to hold it is
        then inserted with an empty text, and the text set after."""
        return not isinstance(self._conn, sqlite3.Connection) and len(text) > LARGE_VALUE

    def set_text(self, table: str, column: str, key_column: str, key: object, text: str) -> int:
        """`UPDATE table SET column = text WHERE key_column = key`; the number of rows changed.

        On PostgreSQL a text over `LARGE_VALUE` is not one statement parameter: psycopg encodes it whole and libpq
        copies that into its output buffer, 25 + 32 MiB at once for a 100,000-transfer batch's 23 MB. It goes
        instead `TEXT_PIECE` characters at a time through `COPY` (binary format: no escaping) into a temporary
        table, which the UPDATE reads; at most a piece of it is ever encoded."""
        self._refuse_write()
        if isinstance(self._conn, sqlite3.Connection) or not self.sent_in_pieces(text):
            return self.execute(f"UPDATE {table} SET {column} = ? WHERE {key_column} = ?", (text, key))  # noqa: S608
        encoding = self._conn.info.encoding  # COPY reads text in the client's encoding (UTF-8 unless set otherwise)
        size = len(text) if text.isascii() else sum(len(piece) for piece in _pieces(text, encoding))
        with _driver_errors():
            # A temporary table (the role needs PostgreSQL's TEMP privilege, which PUBLIC has by default) emptied at
            # the end of the transaction, named in pg_temp so no table of the schema can stand in for it.
            self._conn.execute(
                "CREATE TEMPORARY TABLE IF NOT EXISTS pending_text (body TEXT NOT NULL) ON COMMIT DELETE ROWS"
            )
            with self._conn.cursor() as cursor:
                with cursor.copy("COPY pg_temp.pending_text (body) FROM STDIN (FORMAT BINARY)") as copy:
                    # The binary COPY format: signature, flags, header extension; one row of one field (its length,
                    # then its bytes); the trailer.
                    copy.write(_COPY_SIGNATURE + struct.pack("!iihi", 0, 0, 1, size))
                    for piece in _pieces(text, encoding):
                        copy.write(piece)
                    copy.write(struct.pack("!h", -1))
                changed = cursor.execute(
                    f"UPDATE {table} SET {column} = (SELECT body FROM pg_temp.pending_text)"  # noqa: S608
                    f" WHERE {key_column} = %s",
                    (key,),
                ).rowcount
                cursor.execute("DELETE FROM pg_temp.pending_text")
        return changed

    def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        """Run a query (or a statement with RETURNING) and return every row as a dict."""
        rows, _ = self._run(sql, params)
        return rows or []

    def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        """The first row of a query, or None."""
        rows = self.fetchall(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params: Params = ()) -> Any:
        """The first column of the first row, or None."""
        row = self.fetchone(sql, params)
        return next(iter(row.values())) if row else None


LARGE_VALUE = 4 * 1024 * 1024
TEXT_PIECE = 1 << 18
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def _pieces(text: str, encoding: str) -> Iterator[bytes]:
    """`text` encoded, `TEXT_PIECE` characters at a time (a piece never splits a character)."""
    for start in range(0, len(text), TEXT_PIECE):
        yield text[start : start + TEXT_PIECE].encode(encoding)


@contextmanager
def _driver_errors() -> Iterator[None]:
    """The drivers' exceptions as ours."""
    try:
        yield
    except (sqlite3.IntegrityError, psycopg.errors.IntegrityError) as exc:
        raise ConstraintError(str(exc).splitlines()[0]) from exc
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreBusyError(str(exc)) from exc
        raise StoreError(str(exc)) from exc
    except _PG_RETRYABLE as exc:
        raise StoreBusyError(str(exc).splitlines()[0]) from exc
    except (sqlite3.Error, psycopg.Error) as exc:
        raise StoreError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc


_ROW_LOCKS = re.compile(r"\bFOR\s+(UPDATE|SHARE|NO\s+KEY\s+UPDATE|KEY\s+SHARE)\b", re.IGNORECASE)


def _plain_select(sql: str) -> bool:
    """Whether `sql` is a SELECT that locks no row (a WITH may hide a write: not one)."""
    return sql.lstrip()[:6].upper() == "SELECT" and _ROW_LOCKS.search(sql) is None


_SIZED = (str, bytes)
_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK


def _any_large(values: Iterable[object]) -> bool:
    """Whether a text or bytes value over `LARGE_VALUE` is among `values`. A plain loop: it runs over every
    parameter and every value read (a relay round reads about 1,000): a generator calling a function per value
    cost 110 us a round, `any()` over an inline generator 62, this loop 49 (`benchmarks/hot_checks.py`)."""
    for value in values:  # noqa: SIM110
        if isinstance(value, _SIZED) and len(value) > LARGE_VALUE:
            return True
    return False


def _dict_factory(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Row:
    return {col[0]: value for col, value in zip(cursor.description, row, strict=True)}


class Database:
    """A pool of connections to one database, handing out transactions."""

    def __init__(self, target: Target, *, pool_size: int = 4, busy_timeout_ms: int = 15_000) -> None:
        self.target = target
        self.dialect: Dialect = target.dialect
        self.busy_timeout_ms = busy_timeout_ms
        # An in-memory SQLite database exists once per connection, so it gets exactly one.
        memory = target.dialect == "sqlite" and target.location == ":memory:"
        self._max = 1 if memory else max(1, pool_size)
        self._idle: queue.LifoQueue[sqlite3.Connection | psycopg.Connection[Row]] = queue.LifoQueue()
        self._opened = 0
        self._lock = threading.Lock()
        self._closed = False
        if target.dialect == "sqlite" and sqlite3.sqlite_version_info < MIN_SQLITE:
            raise ConfigurationError(f"SQLite {sqlite3.sqlite_version} is too old; 3.35 or newer is needed")
        self._idle.put(self._open())  # fail fast on a bad URL or an unreachable server
        self._opened = 1

    def __repr__(self) -> str:
        return f"Database({self.target!r})"

    def _wal(self, conn: sqlite3.Connection) -> None:
        """Switch a new SQLite connection's file to WAL. Switching needs the file to itself, and SQLite answers
        "database is locked" at once, without its busy handler, while another connection opening the same new file
        holds it (instances starting together): try again within the busy timeout, then fail as a busy store."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if not ("locked" in str(exc) or "busy" in str(exc)):
                    raise StoreError(str(exc)) from exc
                if time.monotonic() >= deadline:
                    conn.close()
                    raise StoreBusyError(str(exc)) from exc
            time.sleep(0.02)

    def _open(self) -> sqlite3.Connection | psycopg.Connection[Row]:
        if self.target.dialect == "sqlite":
            conn = sqlite3.connect(
                self.target.location,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # the pool hands a connection to one thread at a time
            )
            conn.row_factory = _dict_factory
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            if self.target.location != ":memory:":
                self._wal(conn)
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            return conn
        # Lock waits are bounded like SQLite's busy timeout, so a stuck holder surfaces as StoreBusyError.
        options = f"-c timezone=UTC -c lock_timeout={int(self.busy_timeout_ms)}"
        if self.target.schema:
            options += f" -c search_path={self.target.schema}"
        try:
            pconn = psycopg.connect(self.target.location, autocommit=True, row_factory=dict_row, options=options)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {redact_url(self.target.location)}: {exc}") from None
        # Every transaction block begins READ COMMITTED whatever the server's or role's default: the claims (SKIP
        # LOCKED) and the reads, whose SELECTs run each on its own (`_pg_tx`), are written for it.
        pconn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        return pconn

    def _acquire(self) -> sqlite3.Connection | psycopg.Connection[Row]:
        if self._closed:
            raise StoreError("database is closed")
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            grow = self._opened < self._max
            if grow:
                self._opened += 1
        if grow:
            try:
                return self._open()
            except BaseException:
                with self._lock:
                    self._opened -= 1
                raise
        try:
            return self._idle.get(timeout=self.busy_timeout_ms / 1000)
        except queue.Empty:
            raise StoreBusyError(f"no free connection within {self.busy_timeout_ms} ms") from None

    def _release(self, conn: sqlite3.Connection | psycopg.Connection[Row], healthy: bool) -> None:
        if healthy and not self._closed:
            self._idle.put(conn)
            return
        with self._lock:
            self._opened -= 1
        with suppress(Exception):  # a broken connection may fail to close; it is dropped either way
            conn.close()

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """Open a transaction: commit when the block ends, roll back when it raises.

        `write=False` is a read: its statements must be SELECTs without row locks (`StoreError` otherwise). On
        SQLite it is a deferred transaction, which never waits for writers in WAL mode; on PostgreSQL its SELECTs
        run without BEGIN and COMMIT, each on its own snapshot as at READ COMMITTED in a block.
        """
        conn = self._acquire()
        healthy = True
        opened: list[Tx] = []
        try:
            if isinstance(conn, sqlite3.Connection):
                yield from self._sqlite_tx(conn, write)
            else:
                yield from self._pg_tx(conn, opened, write)
        except BaseException:
            healthy = not _is_broken(conn)
            raise
        finally:
            self._release(conn, healthy and not any(tx.oversized for tx in opened))

    def _sqlite_tx(self, conn: sqlite3.Connection, write: bool) -> Iterator[Tx]:
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.OperationalError as exc:
            raise StoreBusyError(str(exc)) from exc
        try:
            yield Tx("sqlite", conn, read_only=not write)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise (
                StoreBusyError(str(exc)) if isinstance(exc, sqlite3.OperationalError) else StoreError(str(exc))
            ) from exc

    def _pg_tx(self, conn: psycopg.Connection[Row], opened: list[Tx], write: bool) -> Iterator[Tx]:
        try:
            if not write:
                # A read's SELECTs run each on its own (the connection is in autocommit): in a transaction block at
                # READ COMMITTED each would take its own snapshot too, so only BEGIN's and COMMIT's round trips go
                # (2 of a read's 3; 5.7 reads per month-end batch: docs/benchmarks.md, tenth pass).
                tx = Tx("postgresql", conn, read_only=True)
                opened.append(tx)
                yield tx
                return
            with conn.transaction():
                tx = Tx("postgresql", conn)
                opened.append(tx)
                yield tx
        except psycopg.errors.IntegrityError as exc:  # raised at COMMIT by deferred constraints
            raise ConstraintError(str(exc).splitlines()[0]) from exc
        except _PG_RETRYABLE as exc:
            raise StoreBusyError(str(exc).splitlines()[0]) from exc
        except psycopg.Error as exc:
            raise StoreError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc

    def close(self) -> None:
        """Close every idle connection; connections in use close when their transaction ends."""
        self._closed = True
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                break
            with self._lock:
                self._opened -= 1
            conn.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_broken(conn: sqlite3.Connection | psycopg.Connection[Row]) -> bool:
    if isinstance(conn, sqlite3.Connection):
        return False
    return bool(conn.closed or conn.broken)


def connect(url: str, *, schema: str | None = None, pool_size: int = 4, busy_timeout_ms: int = 15_000) -> Database:
    """Open a `Database` for a store URL (see the module docstring). `schema` sets PostgreSQL's search_path."""
    return Database(parse_url(url, schema), pool_size=pool_size, busy_timeout_ms=busy_timeout_ms)


def in_clause(values: Sequence[object]) -> str:
    """`(?, ?, ...)` for an IN list of this many values (at least one)."""
    if not values:
        raise ValueError("an IN list needs at least one value")
    return "(" + ", ".join("?" for _ in values) + ")"
