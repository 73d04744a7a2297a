"""One started `BankClient` per configured integration, shared by the engine's steps and the callback API."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from processor.bank import BankClient
from processor.config import Integration


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
        self._lock = asyncio.Lock()

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
        async with self._lock:
            client = self._clients.get(name)
            if client is None:
                client = await BankClient.start(integration, **self._options)
                self._clients[name] = client
            return client

    async def aclose(self) -> None:
        """Close every started client."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
