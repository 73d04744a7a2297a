"""Who may do what (docs/operations.md, "Roles"). Pure.

Every person acting on the console or the admin API has a name and one role:

    viewer     reads every page and listing (batches, dead letters, requests, the audit trail), accounts masked
    operator   and asks for things: retries (a corrected retry becomes a request), dead-letter replays
    operator   (also) exports creditor account numbers in clear (camt.054 `accounts=clear`)
    operator   (also) withdraws a batch not yet initiated at the bank
    approver   and approves or declines other people's requests (four eyes, changed-account reviews), and
               confirms a batch held as a possible duplicate payroll
    admin      everything; like anyone, not the approval of their own request

The name recorded for an action is the authenticated one (the console's operator, the admin token's name), never
a field of the request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field

from processor.domain.settings import Table, problem


class Role(StrEnum):
    """A person's role (the `role` key of `[console.operators.NAME]` and `[admin.tokens.NAME]`)."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    APPROVER = "approver"
    ADMIN = "admin"


class Action(StrEnum):
    """What a person asks to do."""

    READ = "read"  # any page, listing, report or the audit trail
    RETRY = "retry"  # retry failed transfers (with corrections: a request that waits for four eyes)
    REPLAY = "replay"  # replay a dead letter
    DECIDE = "decide"  # approve or decline someone else's request
    WITHDRAW = "withdraw"  # withdraw a batch not yet initiated at the bank (issue 18)
    CONFIRM = "confirm"  # confirm that a batch held as a possible duplicate payroll is to be paid (issue 18)
    CLEAR_ACCOUNTS = "read clear accounts"  # creditor account numbers unmasked (camt.054 accounts=clear)


ALLOWED: dict[Action, frozenset[Role]] = {
    Action.READ: frozenset(Role),
    Action.RETRY: frozenset({Role.OPERATOR, Role.APPROVER, Role.ADMIN}),
    Action.REPLAY: frozenset({Role.OPERATOR, Role.APPROVER, Role.ADMIN}),
    Action.DECIDE: frozenset({Role.APPROVER, Role.ADMIN}),
    Action.WITHDRAW: frozenset({Role.OPERATOR, Role.APPROVER, Role.ADMIN}),
    Action.CONFIRM: frozenset({Role.APPROVER, Role.ADMIN}),  # money goes out a second time: an approver says so
    Action.CLEAR_ACCOUNTS: frozenset({Role.OPERATOR, Role.APPROVER, Role.ADMIN}),  # the ledger's export, audited
}


@dataclass(frozen=True)
class Actor:
    """An authenticated person: the name actions are recorded with, and the role that decides what they may do."""

    name: str
    role: Role

    def may(self, action: Action) -> bool:
        """Whether this person's role allows `action`."""
        return self.role in ALLOWED[action]


NAME_PATTERN = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")  # an operator's or a token's name


def _person_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise problem("a name is 1-64 letters, digits or ._@-")
    return name


PersonName = Annotated[str, AfterValidator(_person_name)]  # a key of [console.operators] and [admin.tokens]


@dataclass(frozen=True)
class AdminToken:
    """A personal admin API token: its holder's name (recorded with their actions), its SHA-256 and the role."""

    name: str
    sha256: str = field(repr=False)
    role: Role


class ChangedAccounts(StrEnum):
    """What intake does with a transfer whose destination differs from where its employee was last paid."""

    HOLD = "hold"  # the batch waits for an approver's review before its consent is created
    FLAG = "flag"  # marked in events and pages only
    OFF = "off"


class Controls(Table):
    """`[controls]`: four eyes on corrected retries and the changed-account review."""

    four_eyes: bool = True
    """A corrected retry is approved by someone other than who made it."""
    changed_accounts: ChangedAccounts = Field(default=ChangedAccounts.HOLD, strict=False)
    """hold (an approver reviews it first), flag (marked only) or off."""
    account_history_days: int = Field(default=400, ge=1, le=3660)
    """How far back an employee's last paid account is looked up."""


FREE_FAILURES = 5  # failed sign-ins allowed in a row; the next one locks
FIRST_LOCK_SECONDS, LONGEST_LOCK_SECONDS = 60.0, 3600.0


def lockout_seconds(failures: int) -> float | None:
    """How long a subject (an operator, an address) is locked after `failures` failed sign-ins in a row: none up
    to 5; a minute at the 6th, doubling with each further failure, at most an hour."""
    if failures <= FREE_FAILURES:
        return None
    return min(FIRST_LOCK_SECONDS * 2.0 ** min(failures - FREE_FAILURES - 1, 16), LONGEST_LOCK_SECONDS)
