"""Registered clients, read from the clients file (format in DESIGN.md, "Sandbox")."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Client:
    """One registered client application (a payment initiation provider)."""

    client_id: str
    client_secret: str
    redirect_uris: tuple[str, ...]
    kid: str
    public_key_pem: str
    callback_url: str | None = None
    name: str = ""

    def basic_credential(self) -> str:
        """base64(client_id:client_secret), the value after `Basic `."""
        return base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()


@dataclass
class ClientRegistry:
    """Lookup of clients by id."""

    clients: dict[str, Client] = field(default_factory=dict)

    def get(self, client_id: str) -> Client | None:
        """The client with that id, if registered."""
        return self.clients.get(client_id)

    @classmethod
    def from_json(cls, data: object) -> ClientRegistry:
        """Build from the parsed clients file, refusing malformed entries with a clear message."""
        if not isinstance(data, dict) or not isinstance(data.get("clients"), list):
            raise ValueError('clients file must be a JSON object {"clients": [...]}')
        out: dict[str, Client] = {}
        for i, raw in enumerate(data["clients"]):
            if not isinstance(raw, dict):
                raise ValueError(f"clients[{i}] must be an object")
            missing = [
                k for k in ("client_id", "client_secret", "redirect_uris", "kid", "public_key_pem") if k not in raw
            ]
            if missing:
                raise ValueError(f"clients[{i}] lacks {', '.join(missing)}")
            uris = raw["redirect_uris"]
            if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
                raise ValueError(f"clients[{i}].redirect_uris must be a non-empty list of strings")
            client = Client(
                client_id=str(raw["client_id"]),
                client_secret=str(raw["client_secret"]),
                redirect_uris=tuple(uris),
                kid=str(raw["kid"]),
                public_key_pem=str(raw["public_key_pem"]),
                callback_url=str(raw["callback_url"]) if raw.get("callback_url") else None,
                name=str(raw.get("name", raw["client_id"])),
            )
            if client.client_id in out:
                raise ValueError(f"clients[{i}]: duplicate client_id {client.client_id}")
            out[client.client_id] = client
        return cls(out)

    @classmethod
    def load(cls, path: str | Path) -> ClientRegistry:
        """Read a clients file."""
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
