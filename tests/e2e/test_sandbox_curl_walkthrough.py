"""The by-hand path of docs/sandbox.md (curl, jq, openssl) against a real `dispersion sandbox` process.

What a newcomer runs or copies is tested as shipped: docs/walkthrough.sh drives flow A with private_key_jwt and
flow B with Basic to their final statuses, once with `--admin` (the script moves the bank's clock) and once
without (it waits for the processing delays, as a newcomer's sandbox does); and the step-by-step shell blocks of
docs/sandbox.md ("Drive both flows by hand with curl") run in order, as written, in one bash session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from sandbox_process import running_sandbox

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "walkthrough.sh"
GUIDE = ROOT / "docs" / "sandbox.md"
TOOLS = ("bash", "curl", "jq", "openssl", "base64")


@pytest.fixture(scope="module")
def tools() -> None:
    """The command-line tools the walkthrough uses; skipped locally when one is missing, an error in CI."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not missing:
        return
    message = f"the curl walkthrough needs {', '.join(missing)} (apt-get install {' '.join(missing)})"
    if os.environ.get("DISPERSION_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{message}; required in CI (DISPERSION_REQUIRE_BROWSER=1)")
    pytest.skip(message)


def _env(tmp_path: Path) -> dict[str, str]:
    """The environment of the script: a `dispersion` on PATH that is this interpreter's project."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "dispersion"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m processor.cli "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "DISPERSION"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(base_url: str, directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), base_url, str(directory)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.usefixtures("tools")
@pytest.mark.parametrize("admin", [True, False], ids=["admin-clock", "real-delays"])
def test_walkthrough_drives_both_flows(tmp_path: Path, admin: bool) -> None:
    directory = tmp_path / "sandbox-dev"
    args = ["--file-payment-delay", "2", "--vrp-delay", "1"] if admin else ["--file-payment-delay", "1"]
    with running_sandbox(directory, *(["--admin"] if admin else []), *args) as sandbox:
        result = _run(sandbox.base_url, directory, _env(tmp_path))
        out = result.stdout + result.stderr
        failure = f"walkthrough exited {result.returncode}:\n{out}\n--- sandbox log:\n{sandbox.log()}"
        assert result.returncode == 0, failure
        if admin:
            # Exactly one file payment and one domestic VRP exist: the two over-limit VRPs were refused, not stored.
            counts = httpx.get(f"{sandbox.base_url}/__sandbox/counts", timeout=5).json()
            assert counts["file_consent"] == 1 and counts["file_payment"] == 1
            assert counts["vrp_consent"] == 1 and counts["domestic_vrp"] == 1

    lines = result.stdout.splitlines()
    summary = lines[lines.index("######## Summary") + 1 :]
    flow_a = next(line for line in summary if "flow A:" in line)
    flow_b = next(line for line in summary if "flow B:" in line)
    assert "InitiationCompleted" in flow_a and "Consumed" in flow_a
    assert "AcceptedSettlementCompleted" in flow_b and "Authorised" in flow_b
    assert "UK.OBIE.Rules.FailsControlParameters" in flow_b
    # Both over-limit payments name the breached parameter, and the file's closed account shows in the report.
    assert "FailsControlParameters at Data.ControlParameters.MaximumIndividualAmount.Amount" in out
    assert "FailsControlParameters at Data.ControlParameters.PeriodicLimits[1]" in out
    assert "Rejected AC04" in out and "settled 2, rejected 1" in out
    assert ("advance the bank's clock" in out) is admin
    assert "walkthrough: both flows completed" in out
    # Secrets never printed: the client secret, the Basic credential and the private key stay out of the output.
    client = json.loads((directory / "clients.json").read_text())["clients"][0]
    assert client["client_secret"] not in out
    assert "PRIVATE KEY" not in out


@pytest.mark.usefixtures("tools")
def test_walkthrough_stops_at_the_first_unexpected_status(tmp_path: Path) -> None:
    directory = tmp_path / "sandbox-dev"
    with running_sandbox(directory) as sandbox:
        wrong = tmp_path / "wrong-secret"
        shutil.copytree(directory, wrong)
        clients = json.loads((wrong / "clients.json").read_text())
        clients["clients"][0]["client_secret"] = "not-the-secret"
        (wrong / "clients.json").write_text(json.dumps(clients))
        result = _run(sandbox.base_url, wrong, _env(tmp_path))
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "GET /.well-known/openid-configuration: expected HTTP 200, got 400" in out
    assert "invalid_client" in out
    assert "Flow A" not in out  # nothing after the failed step ran


def guide_script(base_url: str, directory: Path) -> str:
    """The shell blocks of the guide's walkthrough section, in order, pointed at this sandbox and directory."""
    text = GUIDE.read_text()
    section = text.split("<!-- walkthrough:begin -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) >= 10, "the walkthrough section lost its shell blocks"
    script = "\n".join(blocks)
    assert "http://127.0.0.1:8700" in script and "DIR=./sandbox-dev" in script
    return script.replace("http://127.0.0.1:8700", base_url).replace("DIR=./sandbox-dev", f"DIR={directory}")


@pytest.mark.usefixtures("tools")
def test_guide_commands_run_as_written(tmp_path: Path) -> None:
    directory = tmp_path / "sandbox-dev"
    work = tmp_path / "work"
    work.mkdir()
    with running_sandbox(directory, "--admin") as sandbox:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", guide_script(sandbox.base_url, directory)],
            cwd=work,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=240,
        )
        out = result.stdout + result.stderr
        assert result.returncode == 0, f"guide commands failed:\n{out}\n--- sandbox log:\n{sandbox.log()}"
        counts = httpx.get(f"{sandbox.base_url}/__sandbox/counts", timeout=5).json()
    # The statuses the guide's comments promise, in the order the steps print them.
    printed = [line for line in result.stdout.splitlines() if re.fullmatch(r"[A-Za-z]+", line)]
    assert printed == ["InitiationCompleted", "Consumed", "AcceptedSettlementCompleted", "Authorised"]
    assert "state matches" in result.stdout
    assert '"ReasonCode":"AC04"' in result.stdout
    assert "UK.OBIE.Rules.FailsControlParameters" in result.stdout and "HTTP 400" in result.stdout
    assert counts["file_payment"] == 1 and counts["domestic_vrp"] == 1


def test_file_hash_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`dispersion sandbox file-hash`: the sandbox's own hash, references blanked, payload checked."""
    from sandbox.cli import main
    from sandbox.filecheck import payload_hash
    from sandbox.jsonutil import loads

    tx = (
        '{"originAccount": {"accountNumber": "100200300", "accountType": "MONETARY", "currency": "GTQ"},'
        ' "destinationAccount": {"accountNumber": "200100300", "accountType": "SAVINGS", "currency": "GTQ",'
        ' "email": "ana@example.com"}, "transferInfo": {"transactionType": "THIRD_PROVIDER", "debitType": "D",'
        ' "transactionAmount": AMOUNT, "executionType": "ONLINE", "concept": "Payroll", "reference": "REF"}}'
    )
    blank = tmp_path / "blank.json"
    blank.write_text('{"data": {"transaction": [' + tx.replace("AMOUNT", "1500.50").replace("REF", "") + "]}}")
    assert main(["file-hash", str(blank)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == payload_hash(loads(blank.read_text()))
    # The same file after the consent id went into its references, with the amount spelled differently.
    filled = tmp_path / "filled.json"
    filled.write_text('{"data": {"transaction": [' + tx.replace("AMOUNT", "1500.5").replace("REF", "pay-fi-1") + "]}}")
    assert main(["file-hash", str(filled)]) == 0
    assert capsys.readouterr().out.strip() == printed
    # A payload the sandbox would refuse is named, not hashed.
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": {"transaction": [' + tx.replace("AMOUNT", "1500.505").replace("REF", "") + "]}}")
    assert main(["file-hash", str(bad)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "data.transaction[0].transferInfo.transactionAmount must have at most 2 decimals" in captured.err
    assert main(["file-hash", str(tmp_path / "missing.json")]) == 2
