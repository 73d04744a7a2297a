"""One started `BankClient` per configured integration, shared by the engine's steps and the callback API."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import structlog

from processor.bank import BankClient, BankError, IssuerMismatch
from processor.bank.integration import Integration

log = structlog.get_logger("processor.engine.banks")


class UnknownIntegrationError(KeyError):
    """A flow names an integration the configuration does not hold."""


class BankPool:
    """Bank clients by integration name, started (discovery, issuer check) on first use and kept.

    `client_options` go to every `BankClient` (tests pass the sandbox's manual clock, an instant sleep, ...).
    """

    def __init__(self, integrations: Mapping[str, Integration], **client_options: Any) -> None:
        self.integrations = dict(integrations)
        self._options = client_options
        self._clients: dict[str, BankClient] = {}
        # One lock per integration: a bank that hangs in discovery must not hold up the others.
        self._locks: dict[str, asyncio.Lock] = {}

    def integration(self, name: str) -> Integration:
        """The configured integration; `UnknownIntegrationError` otherwise."""
        try:
            return self.integrations[name]
        except KeyError:
            raise UnknownIntegrationError(name) from None

    async def get(self, name: str) -> BankClient:
        """The started client of an integration (discovery runs once; an `IssuerMismatch` surfaces here)."""
        client = self._clients.get(name)
        if client is not None:
            return client
        integration = self.integration(name)
        async with self._locks.setdefault(name, asyncio.Lock()):
            client = self._clients.get(name)
            if client is None:
                client = await BankClient.start(integration, **self._options)
                self._clients[name] = client
            return client

    async def verify(self, *, wait: float = 15.0) -> dict[str, str]:
        """Start every integration's client now (discovery and the issuer check) instead of on first use.

        Raises `IssuerMismatch` when a bank's discovery names another issuer: the caller must refuse to start.
        The banks are checked at the same time. A bank that cannot be reached within `wait` seconds (or answers
        with another error) does not stop the caller: its client starts on first use, and the flows that need it
        wait and retry. Returns those integrations with the reason, also logged as warnings.
        """
        names = list(self.integrations)
        # All banks at once, so the whole check waits at most `wait` seconds however many are down.
        results = await asyncio.gather(
            *(asyncio.wait_for(self.get(name), wait) for name in names), return_exceptions=True
        )
        unreachable: dict[str, str] = {}
        for name, result in zip(names, results, strict=True):
            if isinstance(result, IssuerMismatch):
                raise result
            if isinstance(result, TimeoutError):
                unreachable[name] = f"no discovery answer within {wait:g} s"
            elif isinstance(result, BankError):
                unreachable[name] = str(result)
            elif isinstance(result, BaseException):
                raise result
        for name, reason in unreachable.items():
            log.warning("bank not reachable at start; will retry on first use", integration=name, reason=reason)
        return unreachable

    async def aclose(self) -> None:
        """Close every started client."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
