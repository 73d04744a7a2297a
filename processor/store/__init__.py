"""The processor's durable SQL store (SQLite or PostgreSQL): flows, side effects, secrets, VRP, outbox.

Start at `Store` (`processor.store.session`); the design is described in docs/store.md.
"""

from processor.store.auth_attempts import AuthAttempt, Consumed, ConsumeOutcome
from processor.store.crypto import Cipher, StoreKeyError, generate_key, load_cipher, new_secret_token
from processor.store.db import ConstraintError, Database, StoreBusyError, StoreError, Tx, connect
from processor.store.flows import Flow
from processor.store.outbox import (
    Adoption,
    Handover,
    NewEvent,
    OutboxEvent,
    StatusConflictError,
    StatusEvent,
)
from processor.store.schema import MIGRATIONS, MigrationError, migrate
from processor.store.session import Store, StoreTx
from processor.store.side_effects import (
    EffectStatus,
    Operation,
    SideEffect,
    SideEffectMismatchError,
    new_idempotency_key,
)
from processor.store.tokens import ConsentTokens
from processor.store.vrp import VrpMandate, VrpPayment
from processor.store.work import Created, NotFoundError, VersionConflictError

__all__ = [
    "MIGRATIONS",
    "Adoption",
    "AuthAttempt",
    "Cipher",
    "ConsentTokens",
    "ConstraintError",
    "ConsumeOutcome",
    "Consumed",
    "Created",
    "Database",
    "EffectStatus",
    "Flow",
    "Handover",
    "MigrationError",
    "NewEvent",
    "NotFoundError",
    "Operation",
    "OutboxEvent",
    "SideEffect",
    "SideEffectMismatchError",
    "StatusConflictError",
    "StatusEvent",
    "Store",
    "StoreBusyError",
    "StoreError",
    "StoreKeyError",
    "StoreTx",
    "Tx",
    "VersionConflictError",
    "VrpMandate",
    "VrpPayment",
    "connect",
    "generate_key",
    "load_cipher",
    "migrate",
    "new_idempotency_key",
    "new_secret_token",
]
