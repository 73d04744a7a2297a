"""Run the sandbox bank as a real `dispersion sandbox` process on loopback, for e2e tests."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.devtools.processes import Child, answers, eventually, listening_socket, port_of, spawn

SANDBOX = [sys.executable, "-m", "processor.cli", "sandbox"]


def openapi_example(path: str) -> Any:
    """The valid request example the OpenAPI document gives for `POST path` (a fresh copy, amounts as Decimal)."""
    from sandbox.openapi import build_document

    operation = build_document("http://127.0.0.1")["paths"][path]["post"]
    return operation["requestBody"]["content"]["application/json"]["examples"]["valid"]["value"]


def file_consent_example() -> Any:
    """The document's valid A1 body (its FileHash computed from its payload)."""
    return openapi_example("/open-banking/v3.1/pisp/file-payment-consents")


def vrp_consent_example() -> Any:
    """The document's valid B1 body."""
    return openapi_example("/open-banking/v3.1/pisp/domestic-vrp-consents")


@dataclass
class SandboxProcess(Child):
    """A running `dispersion sandbox` process and the files `dispersion sandbox init` wrote for it."""

    base_url: str
    directory: Path

    @property
    def client(self) -> dict[str, Any]:
        """The first registered client of the clients file."""
        data = json.loads((self.directory / "clients.json").read_text())
        return dict(data["clients"][0])

    @property
    def config(self) -> dict[str, Any]:
        """The processor configuration written by `sandbox init`."""
        return tomllib.loads((self.directory / "dispersion.toml").read_text())

    @property
    def signing_key_pem(self) -> bytes:
        """The client's private key."""
        return (self.directory / "signing-key.pem").read_bytes()

    def log(self) -> str:
        """What the process printed so far."""
        return self.output()


def init_sandbox_dir(directory: Path, *extra: str) -> None:
    """`dispersion sandbox init DIR` in a subprocess."""
    subprocess.run(
        [sys.executable, "-m", "processor.cli", "sandbox", "init", str(directory), *extra],
        check=True,
        capture_output=True,
        timeout=60,
    )


@contextmanager
def running_sandbox(
    directory: Path, *args: str, sock: socket.socket | None = None, init_args: tuple[str, ...] = ()
) -> Iterator[SandboxProcess]:
    """Start `dispersion sandbox` (after `sandbox init` when the directory has no clients file) on `sock` (a
    listening socket held since its port was chosen: `listening_socket()`, e.g. to restart on the same port;
    a fresh one by default); stop it by pid after."""
    with contextlib.ExitStack() as own:
        if sock is None:
            sock = own.enter_context(listening_socket())
        port = port_of(sock)
        base_url = f"http://127.0.0.1:{port}"
        if not (directory / "clients.json").exists():
            init_sandbox_dir(directory, "--sandbox-url", base_url, *init_args)
        argv = [*SANDBOX, "--clients", str(directory / "clients.json"), "--listen-fd", str(sock.fileno()), *args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        child = spawn("sandbox", argv, directory / f"sandbox-{port}.log", env=env, pass_fds=(sock.fileno(),))
    try:
        eventually(lambda: answers(f"{base_url}/openapi.json"), what="sandbox answer", timeout=30, child=child)
        yield SandboxProcess(child.name, child.process, child.log_path, base_url, directory)
    finally:
        child.stop(timeout=10)


@contextmanager
def sandbox_calling_back(directory: Path, *args: str) -> Iterator[tuple[SandboxProcess, socket.socket]]:
    """A sandbox whose registered redirect URI is on a port held here: a command serves the callback API there on
    the held socket (`--listen-fd`)."""
    with listening_socket() as callback:
        redirect = f"http://127.0.0.1:{port_of(callback)}/callback"
        with running_sandbox(directory, *args, init_args=("--redirect-uri", redirect)) as sandbox:
            yield sandbox, callback
