"""What `retry-failed`, `dlq` and `report` share: the admin API's address and token, and one call to it.

The address is `--url`, else `[admin] url`, else `[processor] public_url` of the configuration (`--config`, else
`$DISPERSION_CONFIG`, else `./dispersion.toml`); the token is `$DISPERSION_ADMIN_TOKEN`, else the variable that
`[admin] token_env` names. The token is sent as `Authorization: Bearer ...` and never printed.

Who acts is the token's name (`[admin.tokens.NAME]`), not the user running the command: `--requested-by NAME`
(optional) only asserts it, and the processor refuses the call when the token is someone else's.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from processor.cli.common import CliError
from processor.cli.config import ADMIN_TOKEN_ENV, load_admin_client, optional_config_path
from processor.domain.settings import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--config`, `--url`, `--timeout` (every admin command takes them)."""
    parser.add_argument("--config", help="configuration file (default: $DISPERSION_CONFIG, or ./dispersion.toml)")
    parser.add_argument("--url", help="the processor's address (default: [admin] url, else [processor] public_url)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the answer (default 60)")


def add_requested_by(parser: argparse.ArgumentParser) -> None:
    """`--requested-by NAME`: who the caller says they are; checked against the token's name (a mismatch is
    refused), never taken instead of it."""
    parser.add_argument(
        "--requested-by",
        metavar="NAME",
        help="your name as the processor knows your token (optional: the token's name is recorded; a different"
        " name is refused)",
    )


@dataclass
class AdminClient:
    """Calls to the admin API; `CliError` when it cannot be reached or refuses the token."""

    url: str
    token: str
    timeout: float = 60.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AdminClient:
        """From `--config` / `--url` and the environment."""
        path = optional_config_path(args.config)
        try:
            url, token = load_admin_client(path) if path is not None else ("http://127.0.0.1:8600", None)
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        token = token or os.environ.get(ADMIN_TOKEN_ENV)
        if not token:
            raise CliError(f"no admin token: set ${ADMIN_TOKEN_ENV} (or the variable [admin] token_env names)")
        return cls((args.url or url).rstrip("/"), token, args.timeout)

    def call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None) -> Any:
        """The JSON answer of a 2xx; `AdminRefusal` (status and message) otherwise."""
        answer = self._answer(method, path, params=params, body=body)
        try:
            return answer.json()
        except ValueError:
            return {"error": answer.text[:300]}

    def document(self, path: str, *, params: Mapping[str, Any] | None = None) -> bytes:
        """The body of a 2xx answer to a GET, as sent (an XML document); `AdminRefusal` otherwise."""
        return self._answer("GET", path, params=params).content

    def _answer(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None
    ) -> httpx.Response:
        try:
            answer = httpx.request(
                method,
                f"{self.url}/admin{path}",
                params={k: v for k, v in (params or {}).items() if v is not None},
                json=body,
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=self.timeout,
            )
        except httpx.HTTPError as exc:
            raise CliError(f"the admin API at {self.url} cannot be reached: {exc}") from None
        if answer.status_code < 300:
            return answer
        try:
            document = answer.json()
        except ValueError:
            document = {"error": answer.text[:300]}
        if answer.status_code == 401:
            raise CliError(f"the admin API refused the token: {document.get('error')}")
        raise AdminRefusalError(answer.status_code, str(document.get("error") or document))


class AdminRefusalError(Exception):
    """The admin API answered 4xx/5xx (other than 401) with this message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
