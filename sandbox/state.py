"""The bank object every handler works on: settings, clients, store, clock, fault plan."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from sandbox.clients import ClientRegistry
from sandbox.clock import Clock, SystemClock
from sandbox.config import SandboxConfig
from sandbox.faults import FaultPlan
from sandbox.store import Store


@dataclass
class Bank:
    """State shared by every route of one sandbox instance."""

    config: SandboxConfig
    clients: ClientRegistry
    store: Store = field(default_factory=Store)
    clock: Clock = field(default_factory=SystemClock)
    faults: FaultPlan = field(default_factory=FaultPlan)

    def now(self) -> datetime:
        """Current time of this bank's clock."""
        return self.clock.now()

    @staticmethod
    def new_uuid() -> str:
        """A random UUID string."""
        return str(uuid.uuid4())

    @staticmethod
    def new_hex(nbytes: int = 16) -> str:
        """A random hex string."""
        return secrets.token_hex(nbytes)

    @staticmethod
    def new_secret() -> str:
        """An opaque, unguessable token value."""
        return secrets.token_urlsafe(32)
