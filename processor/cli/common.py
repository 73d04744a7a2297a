"""What the commands share: exit codes, the error a command prints, its logging, the engine it opens, and the
callback API it serves on a bound socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import uvicorn
from starlette.types import ASGIApp

from processor.api.callback import callback_app
from processor.bank import IssuerMismatch
from processor.cli.config import Config, default_config_path, load_config
from processor.cli.logs import configure_logging
from processor.domain.settings import ConfigError
from processor.engine.assembly import Engine, build_engine
from processor.store import Store, load_cipher

DONE, ENDED, USAGE, WAITING = 0, 1, 2, 3


class CliError(Exception):
    """A problem the command reports in one line (exit 2)."""


def configure_command_logging(verbose: bool) -> None:
    """The command's own output goes to stdout; the engine's log lines to stderr (console form, redacted like the
    processor's), warnings only unless verbose."""
    configure_logging("console", level=logging.INFO if verbose else logging.WARNING)


def listen_address(value: str) -> tuple[str, int]:
    """(host, port) from `HOST:PORT` or a URL (its default port when none is given)."""
    if "://" in value:
        parts = urlsplit(value)
        return parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--listen must be HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (bound before anything starts, so a taken port fails fast and clearly)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def inherited(fd: int) -> socket.socket:
    """The listening socket a starter passed as file descriptor `fd` (`--listen-fd`: it held the port, so no other
    program could take it between choosing and serving); `OSError` when `fd` is no open socket."""
    return socket.socket(fileno=fd)


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling: the command's handler stops every part, in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Leave the signals to the command."""
        yield


@contextlib.asynccontextmanager
async def serving(app: ASGIApp, sock: socket.socket) -> AsyncIterator[QuietServer]:
    """Serve `app` on a bound socket for the duration of the block; stopped (and the socket closed) after it."""
    server = QuietServer(uvicorn.Config(app, log_level="warning", lifespan="off", log_config=None))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn offers no "started" event)
            await asyncio.sleep(0.02)
        if task.done():
            task.result()
        yield server
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, timeout=10)
        sock.close()


@contextlib.asynccontextmanager
async def open_engine(config_path: Path | None, *, verify: bool = True) -> AsyncIterator[tuple[Config, Store, Engine]]:
    """The configuration, the store and the assembled engine of a command; a bank whose discovery names another
    issuer stops it (CliError) when `verify`."""
    config = load_config(config_path or default_config_path())
    store = Store.open(config.processor.store, cipher=load_cipher())
    try:
        engine = build_engine(config, store)
        try:
            if verify:
                await engine.verify_banks()
            yield config, store, engine
        except IssuerMismatch as exc:
            raise CliError(str(exc)) from None
        finally:
            await engine.aclose()
    finally:
        store.close()


LISTEN_FD_HELP = "serve the callback API on this inherited listening socket instead (a starter that holds the port)"


@contextlib.asynccontextmanager
async def callback_api(
    engine: Engine, config: Config, listen: str | None, *, serve: bool, listen_fd: int | None = None
) -> AsyncIterator[None]:
    """Serve the callback API (approval links and the redirect) while waiting, unless told not to or the
    address is taken (then another process presumably serves it on the same store); on the inherited socket
    `listen_fd` when given."""
    if not serve:
        yield
        return
    if listen_fd is not None:
        async with serving(callback_app(engine), inherited(listen_fd)):
            yield
        return
    try:
        host, port = listen_address(listen or config.public_url)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    try:
        sock = bind(host, port)
    except OSError as exc:
        print(f"note: cannot serve the callback API on {host}:{port} ({exc.strerror}); expecting another process to")
        yield
        return
    async with serving(callback_app(engine), sock):
        yield
