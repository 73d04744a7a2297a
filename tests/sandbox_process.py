"""Run the sandbox bank as a real `dispersion sandbox` process on loopback, for e2e tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


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


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class SandboxProcess:
    """A running sandbox and the files `dispersion sandbox init` wrote for it."""

    base_url: str
    directory: Path
    process: subprocess.Popen[bytes]
    log_path: Path

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
        return self.log_path.read_text(errors="replace")


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
    directory: Path, *args: str, port: int | None = None, init_args: tuple[str, ...] = ()
) -> Iterator[SandboxProcess]:
    """Start `dispersion sandbox` (after `sandbox init` when the directory has no clients file); stop it after."""
    port = port or free_port()
    base_url = f"http://127.0.0.1:{port}"
    if not (directory / "clients.json").exists():
        init_sandbox_dir(directory, "--sandbox-url", base_url, *init_args)
    log_path = directory / f"sandbox-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "processor.cli",
                "sandbox",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--clients",
                str(directory / "clients.json"),
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    sandbox = SandboxProcess(base_url, directory, proc, log_path)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sandbox exited with {proc.returncode}:\n{sandbox.log()}")
            try:
                httpx.get(f"{base_url}/openapi.json", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sandbox did not answer:\n{sandbox.log()}") from None
                time.sleep(0.1)
        yield sandbox
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
