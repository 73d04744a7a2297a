"""No secret reaches the logs when the redirect fails: the store is busy when the approver's browser (and the
bank's delivery) arrive, the callback API answers 503 and logs the exception, in the processor's JSON and console
formats (a child process with the processor's real logging, `logs_child.py`). The output is searched for the
authorization code, the state and the Basic credential; a standard-library logger's line (librdkafka's arrive that
way) is in the same output, formatted and redacted the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import child_pythonpath

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_failed_redirect_logs_no_secret(tmp_path: Path, fmt: str) -> None:
    env = {**os.environ, "PYTHONPATH": child_pythonpath(HERE)}
    child = subprocess.run(
        [sys.executable, str(HERE / "logs_child.py"), fmt, f"sqlite:///{tmp_path / 'store.sqlite'}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    facts = json.loads(child.stdout.strip().splitlines()[-1])
    err = child.stderr
    assert facts["answers"] == [503, 503]
    assert "redirect handling failed" in err and "redirect delivery failed" in err  # the failures were logged
    assert "Traceback" in err and "StoreBusyError" in err  # with their tracebacks, plain
    for secret in [facts["query"]["code"], facts["query"]["state"], *facts["basic"]]:
        assert secret not in err, f"{secret[:6]}… leaked into the {fmt} log"
    assert "[redacted]" in err
    assert "approval = " not in err and "locals" not in err.lower()  # no local variables printed
    stdlib_lines = [line for line in err.splitlines() if "request failed" in line]
    assert stdlib_lines, err
    if fmt == "json":
        records = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is one JSON object
        assert all(record["instance"] == "p-1" for record in records)
        assert json.loads(stdlib_lines[0])["logger"] == "dispersion.kafka.relay"
