"""Signing in and out of the console (issue 19 point 5): lockout with back-off per operator and per address, sessions
kept server-side, every attempt in the audit trail.

- Each failed sign-in counts against the operator's name and against the client's address; after 5 in a row either
  is locked for a minute, doubling with every further failure up to an hour (`processor.domain.roles`). While
  locked, even the right password is refused (429) without being checked. A successful sign-in clears both counts.
  Attempts for one name or from one address are checked one at a time in a process, so a burst sent in parallel
  is counted as it would be one by one.
- A session is a signed cookie and a row in the store (by the hash of its id): signing out ends the row, so a copied
  cookie is dead at once; a session also ends when the operator's password in the configuration changes (its row
  holds a fingerprint of the password it was made with).
- Failures, locks, sign-ins and sign-outs are logged with the operator and the address, and recorded in the audit
  trail.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from processor.api.console.auth import ConsoleAuth, Operator
from processor.domain.roles import lockout_seconds
from processor.domain.text import printable
from processor.domain.time import iso_ms
from processor.store import Store, StoreTx

log = structlog.get_logger("processor.api.console")


@dataclass(frozen=True)
class Attempt:
    """How a sign-in went: the new session's cookie (signed in), or the time a lock lasts until (locked), or
    neither (wrong name or password)."""

    cookie: str | None = None
    locked_until: datetime | None = None


def _subjects(name: str, address: str) -> tuple[str, str]:
    return f"operator:{name}", f"address:{address}"


def _audit(
    tx: StoreTx, action: str, name: str, auth: ConsoleAuth, now: datetime, address: str, **detail: object
) -> None:
    person = auth.operators.get(name)
    tx.audit.record(
        action,
        actor=printable(name),
        role=None if person is None else person.role.value,
        now=now,
        detail={"via": "console", **detail},
        address=address,
    )


class Turns:
    """Attempts for one operator or from one address, one at a time in this process (striped locks: a bounded
    number, whatever names are tried), so ten wrong passwords sent at once count one after the other and the
    sixth already finds the lock. One per console app (its locks belong to the event loop that serves it)."""

    def __init__(self, stripes: int = 64) -> None:
        self.locks = tuple(asyncio.Lock() for _ in range(stripes))

    def of(self, name: str, address: str) -> list[asyncio.Lock]:
        """The locks to hold, always in the same order (no two attempts wait for each other's second lock)."""
        return [self.locks[i] for i in sorted({hash(s) % len(self.locks) for s in _subjects(name, address)})]


async def sign_in(
    store: Store, auth: ConsoleAuth, turns: Turns, name: str, password: str, *, address: str, now: datetime
) -> Attempt:
    """Check a sign-in (see the module docstring); an `Attempt`."""
    async with contextlib.AsyncExitStack() as held:
        for lock in turns.of(name, address):
            await held.enter_async_context(lock)
        return await _attempt(store, auth, name, password, address=address, now=now)


async def _attempt(
    store: Store, auth: ConsoleAuth, name: str, password: str, *, address: str, now: datetime
) -> Attempt:
    subjects = _subjects(name, address)
    locks = await store.arun(lambda tx: [tx.sign_in_failures.get(s) for s in subjects], write=False)
    until = max((lock.locked_until for lock in locks if lock.locked_until and lock.locked_until > now), default=None)
    shown = printable(name)
    if until is not None:
        log.warning("console_sign_in_locked", operator=shown, address=address, until=iso_ms(until))
        await store.arun(lambda tx: _audit(tx, "sign_in_refused", name, auth, now, address, locked_until=iso_ms(until)))
        return Attempt(locked_until=until)
    if not await asyncio.to_thread(auth.check_password, name, password):
        return await _failed(store, auth, name, address=address, now=now)
    cookie = auth.new_session(name)
    operator = auth.session(cookie)
    assert operator is not None

    def start(tx: StoreTx) -> None:
        for subject in subjects:
            tx.sign_in_failures.clear(subject)
        expires = now + timedelta(seconds=auth.session_seconds)
        tx.sessions.start(operator.session_sha256, name, auth.stamp(name), now=now, expires=expires)
        tx.sessions.forget_expired(now=now)
        _audit(tx, "sign_in", name, auth, now, address)

    await store.arun(start)
    log.info("console_signed_in", operator=name, address=address)
    return Attempt(cookie=cookie)


async def _failed(store: Store, auth: ConsoleAuth, name: str, *, address: str, now: datetime) -> Attempt:
    def count(tx: StoreTx) -> tuple[int, datetime | None]:
        worst, locked = 0, None
        for subject in _subjects(name, address):
            failures = tx.sign_in_failures.get(subject).failures + 1
            seconds = lockout_seconds(failures)
            until = None if seconds is None else now + timedelta(seconds=seconds)
            tx.sign_in_failures.failed(subject, now=now, locked_until=until)
            worst = max(worst, failures)
            locked = max(filter(None, (locked, until)), default=None)
        detail = {"failures": worst, "locked_until": None if locked is None else iso_ms(locked)}
        _audit(tx, "sign_in_failed", name, auth, now, address, **detail)
        return worst, locked

    failures, locked = await store.arun(count)
    log.warning(
        "console_sign_in_refused",
        operator=printable(name),
        address=address,
        failures=failures,
        locked_until=None if locked is None else iso_ms(locked),
    )
    return Attempt()


async def session_alive(store: Store, auth: ConsoleAuth, operator: Operator, *, now: datetime) -> bool:
    """Whether the operator's session is still open in the store (not signed out, same password, not expired)."""
    stamp = auth.stamp(operator.name)
    return await store.arun(
        lambda tx: tx.sessions.active(operator.session_sha256, operator.name, stamp, now=now), write=False
    )


async def sign_out(store: Store, operator: Operator, *, address: str, now: datetime) -> None:
    """End the operator's session in the store (a copied cookie is dead from now on) and record it."""

    def end(tx: StoreTx) -> None:
        tx.sessions.end(operator.session_sha256, now=now)
        tx.audit.record(
            "sign_out",
            actor=operator.name,
            role=operator.role.value,
            now=now,
            detail={"via": "console"},
            address=address,
        )

    await store.arun(end)
    log.info("console_signed_out", operator=operator.name, address=address)
