"""`dispersion pay-file` as a process against the sandbox bank process (SQLite and PostgreSQL stores): the
approver follows the printed approval link to the consent page and back to the callback API the command serves
while it waits; the command prints every transaction's result. Also: rejection (exit 1), an invalid batch (exit
2, every bad row listed, nothing stored or sent), `--wait` running out (exit 3) and a rerun that resumes, and a
rerun after the end that only prints (no new bank resource)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from engine_support import batch
from file_flow_support import browser_decide, write_batch
from pain001_support import Block, Tx, oracle_pain001, sap_pain001
from sandbox_process import SandboxProcess, sandbox_calling_back
from store_fixtures import postgres_dsn_or_skip

from processor.store import generate_key
from processor.store.db import connect

IBAN = "GT82TRAJ01020000001210029690"


# The callback API's listening socket, held by the module and handed to every command (`--listen-fd`).
CALLBACK: list[socket.socket] = []


@pytest.fixture(scope="module")
def cli_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """A sandbox whose registered redirect URI points at a port this module holds, where the command serves the
    callback API; file payments complete at once (the per-transaction outcome comes from the accounts' last
    digits)."""
    directory = tmp_path_factory.mktemp("payfile-cli")
    with sandbox_calling_back(directory, "--admin", "--file-payment-delay", "0") as (sandbox, callback):
        CALLBACK[:] = [callback]
        yield sandbox
        CALLBACK.clear()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store the command is configured with: a SQLite file, or a fresh PostgreSQL database (the command
    reads a plain URL, so a schema of the shared test database would not do)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'payfile.sqlite'}"
        return
    dsn = postgres_dsn_or_skip()
    name = f"dispersion_payfile_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield dsn.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def config(cli_sandbox: SandboxProcess, store_url: str, tmp_path: Path) -> str:
    """The configuration `sandbox init` wrote, with the test's store."""
    text = (cli_sandbox.directory / "dispersion.toml").read_text()
    lines = [f'store = "{store_url}"' if line.startswith("store = ") else line for line in text.splitlines()]
    path = tmp_path / "dispersion.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def env() -> dict[str, str]:
    return {**os.environ, "DISPERSION_STORE_KEY": generate_key(), "PYTHONUNBUFFERED": "1"}


async def start(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "processor.cli",
        "pay-file",
        *args,
        "--listen-fd",
        str(CALLBACK[0].fileno()),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        pass_fds=(CALLBACK[0].fileno(),),
    )


async def run(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await start(*args, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def link_of(proc: asyncio.subprocess.Process) -> tuple[str, list[str]]:
    """Read the command's output up to the approval link."""
    assert proc.stdout is not None
    seen: list[str] = []
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).decode()
        if not line:
            err = (await proc.stderr.read()).decode() if proc.stderr else ""
            raise AssertionError(f"the command ended early: {seen} {err}")
        seen.append(line)
        if line.startswith("approval link: "):
            return line.removeprefix("approval link: ").strip(), seen


async def counts(sandbox: SandboxProcess) -> dict[str, int]:
    async with httpx.AsyncClient(base_url=sandbox.base_url) as admin:
        return {k: int(v) for k, v in (await admin.get("/__sandbox/counts")).json().items()}


async def test_pay_file_prints_every_transaction_and_pays_once(
    cli_sandbox: SandboxProcess, config: str, env: dict[str, str], tmp_path: Path
) -> None:
    document = batch()
    batch_id = document["batch_id"]
    path = str(write_batch(tmp_path / "batch.json", document))
    before = await counts(cli_sandbox)

    # --wait runs out while the approver has not acted: status 3, the link is printed, the state is kept.
    code, out, err = await run("--config", config, path, "--wait", "1", env=env)
    assert code == 3, err
    assert f"batch {batch_id}: 3 transactions, control sum 4250.75 GTQ, integration sandbox" in out
    assert f"/approve/file/{batch_id}?t=" in out and "AWAITING_AUTHORIZATION, still running" in out

    # The rerun resumes (no second consent), serves the callback API and waits for the approver.
    proc = await start("--config", config, path, env=env)
    link, seen = await link_of(proc)
    assert f"batch {batch_id} already exists: AWAITING_AUTHORIZATION\n" in seen
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await browser_decide(http, link)
        assert answer.status_code == 200 and "Authorization received" in answer.text
    out_bytes, err_bytes = await asyncio.wait_for(proc.communicate(), timeout=60)
    out = "".join(seen) + out_bytes.decode()
    assert proc.returncode == 4, err_bytes.decode()  # COMPLETED with a failed transfer (the closed account)
    rows = [line.split() for line in out.splitlines() if line.startswith("  ") and "****" in line]
    assert rows == [
        ["0", "****0300", "1500.50", "COMPLETED"],
        ["1", "****0301", "2000.00", "COMPLETED"],
        ["2", "****9902", "750.25", "FAILED", *rows[2][4:]],
    ]
    assert rows[2][4] == "AC04"
    assert "200100300" not in out  # account numbers are masked
    assert f"batch {batch_id}: COMPLETED, file payment fp-" in out and "bank status InitiationCompleted" in out
    assert "summary: 2 settled, 1 rejected" in out
    assert "2 of 3 transfers settled; 1 rejected (AC04)" in out
    after = await counts(cli_sandbox)
    assert after["file_consent"] - before["file_consent"] == 1
    assert after["file_payment"] - before["file_payment"] == 1

    # After the end a rerun only prints the result: nothing new at the bank.
    code, out, err = await run("--config", config, path, env=env)
    assert code == 4, err
    assert f"batch {batch_id} already exists: COMPLETED" in out and "****9902" in out
    assert await counts(cli_sandbox) == after


async def test_rejected_approval_exits_1(
    cli_sandbox: SandboxProcess, config: str, env: dict[str, str], tmp_path: Path
) -> None:
    document = batch()
    path = str(write_batch(tmp_path / "batch.json", document))
    before = await counts(cli_sandbox)
    proc = await start("--config", config, path, env=env)
    link, _ = await link_of(proc)
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await browser_decide(http, link, approve=False)
        assert answer.status_code == 200
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 1, err.decode()
    text = out.decode()
    assert f"batch {document['batch_id']}: REJECTED" in text
    assert "reason: the approver rejected the authorization" in text
    assert (await counts(cli_sandbox))["file_payment"] == before["file_payment"]


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_invalid_batch_exits_2_listing_every_bad_row(
    cli_sandbox: SandboxProcess, config: str, env: dict[str, str], tmp_path: Path
) -> None:
    document = batch(transfers=[("200100300", "-5"), ("200100301", "10.001"), ("200100302", "7"), ("2001-3", "1")])
    document["transactions"][2]["destination_account"]["email"] = "not-an-email"
    path = str(write_batch(tmp_path / "bad.json", document))
    before = await counts(cli_sandbox)
    code, out, _ = await run("--config", config, path, env=env)
    assert code == 2
    assert "INVALID, nothing was stored or sent to the bank" in out
    for index, reason in (
        (0, "non_positive_amount"),
        (1, "too_many_decimals"),
        (2, "malformed_email"),
        (3, "malformed_account_number"),
    ):
        assert any(f"transaction {index}" in line and reason in line for line in out.splitlines()), (index, out)
    assert await counts(cli_sandbox) == before

    shapeless = dict(document, transactions=[{"amount": 1.5}], origin_account="x")
    code, out, _ = await run("--config", config, str(write_batch(tmp_path / "shape.json", shapeless)), env=env)
    assert code == 2 and "origin_account" in out and "transactions[0]" in out

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code, _, err = await run("--config", config, str(broken), env=env)
    assert code == 2 and "not valid JSON" in err


def configure_issuer(config: str, issuer: str) -> None:
    """Point the configuration's (only) integration at another issuer address."""
    lines = Path(config).read_text().splitlines()
    Path(config).write_text("\n".join(f'issuer = "{issuer}"' if x.startswith("issuer = ") else x for x in lines) + "\n")


async def start_processor(config: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """`dispersion processor --role api` (HTTP only: no Kafka needed) on a free port."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "processor.cli", "processor", "--config", config, "--role", "api",
        "--listen", "127.0.0.1:0", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_a_bank_naming_another_issuer_is_refused_before_anything_is_stored(
    cli_sandbox: SandboxProcess, config: str, env: dict[str, str], tmp_path: Path
) -> None:
    # Configured as http://localhost:PORT: the same server answers, but its discovery says 127.0.0.1.
    configure_issuer(config, cli_sandbox.base_url.replace("127.0.0.1", "localhost"))
    path = str(write_batch(tmp_path / "batch.json", batch()))
    before = await counts(cli_sandbox)
    code, out, err = await run("--config", config, path, env=env)
    assert code == 2, (out, err)
    assert "discovery names issuer" in err and "refusing to use this server" in err
    assert "batch " not in out  # refused before the batch was read into the store
    assert await counts(cli_sandbox) == before


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_the_processor_refuses_to_start_on_a_foreign_issuer_but_not_on_a_bank_that_is_down(
    cli_sandbox: SandboxProcess, config: str, env: dict[str, str]
) -> None:
    # http://localhost:1 answers nothing: not a mismatch, so the instance starts and tries the bank later ...
    configure_issuer(config, "http://localhost:1")
    proc = await start_processor(config, env)
    assert proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).decode()
        assert line.startswith("processor ready: "), line
        console = (await asyncio.wait_for(proc.stdout.readline(), timeout=10)).decode()
        # `sandbox init` configured an operator: the processor says where the console is.
        assert re.fullmatch(r"console: http://127\.0\.0\.1:\d+/console/ \(operators: operator\)\n", console), console
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.communicate(), timeout=30)
    # ... while a bank whose discovery names another issuer stops it before it serves anything.
    configure_issuer(config, cli_sandbox.base_url.replace("127.0.0.1", "localhost"))
    proc = await start_processor(config, env)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 2, (out, err)
    assert b"processor ready" not in out and b"refusing to use this server" in err


# -- a scheduled batch ------------------------------------------------------------------------------------------

# The command runs on the wall clock, so "the day comes" by moving the integration's time zone instead: at any
# instant the date at UTC+14 is one or two days after the date at UTC-12. The wait computed at the approval (the
# row's next_action_at, the start of the day at UTC-12) is made due by hand, as a stale schedule would be: the
# payment step itself decides with the zone configured when it runs.
WEST, EAST = "Etc/GMT+12", "Etc/GMT-14"


def make_due(store_url: str, batch_id: str) -> None:
    database = connect(store_url)
    try:
        with database.transaction() as tx:
            tx.execute("UPDATE flows SET next_action_at = ? WHERE batch_id = ?", (datetime.now(UTC), batch_id))
    finally:
        database.close()


def zoned(env: dict[str, str], zone: str) -> dict[str, str]:
    return {**env, "DISPERSION__INTEGRATIONS__SANDBOX__TIMEZONE": zone}


async def test_a_scheduled_batch_is_approved_now_and_paid_only_on_its_day(
    cli_sandbox: SandboxProcess, config: str, env: dict[str, str], tmp_path: Path, store_url: str
) -> None:
    execute_on = ((datetime.now(UTC) - timedelta(hours=12)).date() + timedelta(days=1)).isoformat()
    document = {**batch(), "execute_on": execute_on}
    batch_id = document["batch_id"]
    path = str(write_batch(tmp_path / "batch.json", document))
    before = await counts(cli_sandbox)

    # Tomorrow at UTC-12: consent, upload and approval now; the payment waits for the day.
    proc = await start("--config", config, path, "--wait", "20", env=zoned(env, WEST))
    link, seen = await link_of(proc)
    assert f"control sum 4250.75 GTQ, integration sandbox, to be paid on {execute_on}\n" in "".join(seen)
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await browser_decide(http, link)
        assert answer.status_code == 200 and "Authorization received" in answer.text
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 3, err.decode()
    text = out.decode()
    assert f"authorized; the file payment is scheduled for {execute_on} ({WEST})" in text
    assert f"batch {batch_id}: AUTHORIZED, still running" in text
    assert (await counts(cli_sandbox))["file_payment"] == before["file_payment"]

    # Due by hand but still the day before at UTC-12: the step holds it back; nothing is sent.
    make_due(store_url, batch_id)
    code, out_text, err_text = await run("--config", config, path, "--wait", "3", env=zoned(env, WEST))
    assert code == 3, err_text
    assert f"batch {batch_id}: AUTHORIZED, still running" in out_text and execute_on in out_text
    assert (await counts(cli_sandbox))["file_payment"] == before["file_payment"]

    # A rerun where the day has come (UTC+14) creates the payment, once.
    make_due(store_url, batch_id)
    code, out_text, err_text = await run("--config", config, path, env=zoned(env, EAST))
    assert code == 4, err_text
    assert f"batch {batch_id}: COMPLETED" in out_text
    assert (await counts(cli_sandbox))["file_payment"] == before["file_payment"] + 1


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_a_batch_scheduled_for_a_past_day_exits_2(
    cli_sandbox: SandboxProcess, config: str, env: dict[str, str], tmp_path: Path
) -> None:
    yesterday = (datetime.now(UTC).date() - timedelta(days=1)).isoformat()  # in UTC, the configured zone
    document = {**batch(), "execute_on": yesterday}
    before = await counts(cli_sandbox)
    code, out, _ = await run("--config", config, str(write_batch(tmp_path / "past.json", document)), env=env)
    assert code == 2 and "INVALID, nothing was stored or sent to the bank" in out
    assert f"execute_on {yesterday} is in the past" in out
    assert await counts(cli_sandbox) == before


async def test_a_pain001_with_one_payment_block_is_paid_through_the_same_reader(
    cli_sandbox: SandboxProcess, config: str, env: dict[str, str], tmp_path: Path
) -> None:
    """The processor's own intake (no Kafka) reads a pain.001 with `dispersion submit`'s reader and checks; a
    message of several blocks is refused naming them, a control-sum mismatch with every problem, nothing stored."""
    msg_id = f"ORA-{uuid.uuid4().hex[:10]}"
    today = datetime.now(UTC).date()
    one = tmp_path / "one.xml"
    one.write_bytes(oracle_pain001(msg_id, [Block("RUN-1", today, "100200300", [Tx("O-1", "99.99", IBAN)])]))
    proc = await start("--config", config, str(one), env=env)
    link, seen = await link_of(proc)
    assert f"batch {msg_id}/RUN-1: 1 transactions, control sum 99.99 GTQ, integration sandbox\n" in seen
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await browser_decide(http, link)).status_code == 200
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    assert "****9690" in out.decode() and "COMPLETED" in out.decode()

    two = tmp_path / "two.xml"
    blocks = [
        Block("A", today, "100200300", [Tx("A-1", "1", "1")]),
        Block("B", today, "100200300", [Tx("B-1", "2", "2")]),
    ]
    two.write_bytes(sap_pain001(msg_id + "-2", blocks))
    code, _, err_text = await run("--config", config, str(two), env=env)
    assert code == 2 and f"holds 2 payment blocks ({msg_id}-2/A, {msg_id}-2/B); pay-file pays one batch" in err_text
    odd = tmp_path / "odd.xml"
    odd.write_bytes(sap_pain001(msg_id + "-3", blocks[:1], total="5"))
    code, _, err_text = await run("--config", config, str(odd), env=env)
    assert code == 2 and "GrpHdr/CtrlSum: says 5, the amounts add up to 1" in err_text, err_text
