"""`dispersion vrp mandate | pay | status` as processes against the sandbox bank process: the approver follows the
printed approval link to the consent page and back to the callback API the command serves while it waits."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sandbox_process import SandboxProcess, sandbox_calling_back

from processor.devtools.approver import decision_post
from processor.store import generate_key

# The callback API's listening socket, held by the module and handed to `vrp mandate` (`--listen-fd`).
CALLBACK: list[socket.socket] = []
CREDITOR = {"identification": "08080021325698", "name": "Savings pot"}


@pytest.fixture(scope="module")
def cli_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """A sandbox whose registered redirect URI points at a port this module holds, where `vrp mandate` serves the
    callback API (`--listen-fd`)."""
    directory = tmp_path_factory.mktemp("vrp-cli")
    with sandbox_calling_back(directory, "--admin", "--vrp-delay", "0") as (sandbox, callback):
        CALLBACK[:] = [callback]
        config = directory / "dispersion.toml"
        basic = config.read_text().replace(
            'token_auth_method = "private_key_jwt"', 'token_auth_method = "client_secret_basic"'
        )
        config.write_text(basic)
        yield sandbox
        CALLBACK.clear()


async def dispersion(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    fd = CALLBACK[0].fileno()
    serves = args[:2] == ("vrp", "mandate")  # the command that serves the callback API while it waits
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "processor.cli",
        *args,
        *(("--listen-fd", str(fd)) if serves else ()),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        pass_fds=(fd,) if serves else (),
    )


async def run(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await dispersion(*args, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def approve(http: httpx.AsyncClient, link: str) -> httpx.Response:
    """The approver's browser: our link, the bank's consent page, Approve, the redirect back to the CLI."""
    opened = await http.get(link)
    assert opened.status_code == 302, opened.text
    page = await http.get(opened.headers["location"])
    target, data = decision_post(str(page.url), page.text, "approve")
    decided = await http.post(target, data=data)
    assert decided.status_code in (302, 303), decided.text
    return await http.get(decided.headers["location"])


def write_json(path: Path, document: dict[str, object]) -> Path:
    path.write_text(json.dumps(document))
    return path


def payment_request(payment_id: str, amount: str, end_to_end_id: str) -> dict[str, object]:
    """A payment under the mandate M-CLI-1."""
    return {
        "payment_id": payment_id,
        "mandate_id": "M-CLI-1",
        "amount": amount,
        "currency": "GBP",
        "end_to_end_id": end_to_end_id,
    }


async def authorize_mandate(config: str, mandate_file: Path, env: dict[str, str]) -> None:
    """`vrp mandate` prints the approval link and waits; the approver follows it; the command ends AUTHORIZED."""
    proc = await dispersion("vrp", "mandate", "--config", config, str(mandate_file), "--wait", "90", env=env)
    assert proc.stdout is not None
    link = None
    seen: list[str] = []
    while link is None:
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).decode()
        assert line, f"the command ended early: {seen} {(await proc.stderr.read()).decode() if proc.stderr else ''}"
        seen.append(line)
        if line.startswith("approval link: "):
            link = line.removeprefix("approval link: ").strip()
    assert "/approve/mandate/M-CLI-1?t=" in link
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await approve(http, link)
        assert answer.status_code == 200 and "Authorization received" in answer.text
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    assert "mandate M-CLI-1: AUTHORIZED (consent vrp-" in out.decode()


async def check_status(config: str, env: dict[str, str]) -> None:
    """`vrp status` lists the mandate and both payments; `--json` gives the whole history in order."""
    code, out_text, _ = await run("vrp", "status", "--config", config, "M-CLI-1", env=env)
    assert code == 0
    assert "mandate M-CLI-1: AUTHORIZED" in out_text and "P-CLI-1: COMPLETED 250.00 GBP obvrp-" in out_text
    assert "P-CLI-2: REFUSED 300.01 GBP" in out_text
    code, out_text, _ = await run("vrp", "status", "--config", config, "M-CLI-1", "--json", env=env)
    statuses = [json.loads(line)["status"] for line in out_text.splitlines()]
    assert statuses == [
        "AUTHORIZATION_REQUIRED",
        "AUTHORIZED",
        "PAYMENT_PENDING",
        "PAYMENT_COMPLETED",
        "LIMIT_EXCEEDED",
    ]


async def test_mandate_then_payments_from_the_command_line(cli_sandbox: SandboxProcess, tmp_path: Path) -> None:
    env = {**os.environ, "DISPERSION_STORE_KEY": generate_key(), "PYTHONUNBUFFERED": "1"}
    config = str(cli_sandbox.directory / "dispersion.toml")
    now = datetime.now(UTC)
    mandate = {
        "mandate_id": "M-CLI-1",
        "currency": "GBP",
        "creditor_account": CREDITOR,
        "max_individual_amount": "300.00",
        "periodic_limits": [{"amount": "1000.00", "period_type": "Month", "period_alignment": "Calendar"}],
        "valid_from": (now - timedelta(days=1)).isoformat(),
        "valid_to": (now + timedelta(days=90)).isoformat(),
        "reference": "SWEEP-CLI",
    }
    mandate_file = write_json(tmp_path / "mandate.json", mandate)
    await authorize_mandate(config, mandate_file, env)

    again = await run("vrp", "mandate", "--config", config, str(mandate_file), env=env)
    assert again[0] == 0 and "already exists: AUTHORIZED" in again[1]

    payment = write_json(tmp_path / "payment.json", payment_request("P-CLI-1", "250.00", "E2E-CLI-1"))
    code, out_text, err_text = await run("vrp", "pay", "--config", config, str(payment), env=env)
    assert code == 0, err_text
    assert "payment P-CLI-1: COMPLETED, 250.00 GBP, domestic VRP obvrp-" in out_text
    assert "bank status AcceptedSettlementCompleted" in out_text

    too_much = write_json(tmp_path / "too-much.json", payment_request("P-CLI-2", "300.01", "E2E-CLI-2"))
    code, out_text, _ = await run("vrp", "pay", "--config", config, str(too_much), env=env)
    assert code == 1 and "payment P-CLI-2: REFUSED" in out_text and "MaximumIndividualAmount" in out_text

    repeat = await run("vrp", "pay", "--config", config, str(payment), env=env)
    assert repeat[0] == 0 and "already exists: COMPLETED" in repeat[1]
    assert "differs" not in repeat[1]  # the rerun's requested_at is another moment: still the same instruction

    await check_status(config, env)
    async with httpx.AsyncClient(base_url=cli_sandbox.base_url) as admin:
        counts = (await admin.get("/__sandbox/counts")).json()
    assert counts["vrp_consent"] == 1 and counts["domestic_vrp"] == 1


async def test_bad_input_is_refused_with_status_2(cli_sandbox: SandboxProcess, tmp_path: Path) -> None:
    env = {**os.environ, "DISPERSION_STORE_KEY": generate_key()}
    config = str(cli_sandbox.directory / "dispersion.toml")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code, _, err = await run("vrp", "pay", "--config", config, str(broken), env=env)
    assert code == 2 and "not valid JSON" in err
    nameless = tmp_path / "nameless.json"
    nameless.write_text(json.dumps({"currency": "GBP"}))
    code, _, err = await run("vrp", "mandate", "--config", config, str(nameless), "--no-wait", env=env)
    assert code == 2 and "mandate_id: is required" in err
