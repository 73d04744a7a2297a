"""The processor's event loop is uvloop's (processor/cli/service.py; docs/benchmarks.md, sixth pass), and it says so
in its start-up log line."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from bank_support import integration_table
from processor_support import start_api_processor, write_config


def test_the_processor_runs_on_uvloop_and_logs_it(tmp_path: Path, unserved_port: int) -> None:
    tables: dict[str, dict[str, Any]] = {
        "processor": {"store": f"sqlite:///{tmp_path / 'db.sqlite'}", "store_threads": 1},
        "integrations.sandbox": integration_table(f"http://127.0.0.1:{unserved_port}", retry={"max_attempts": 1}),
    }
    config = tmp_path / "dispersion.toml"
    write_config(config, tables)
    env = {**os.environ, "DISPERSION_STORE_ALLOW_DEV_KEY": "1"}
    process, _ = start_api_processor(config, "looped-1", env, "--log-format", "json")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()[-3000:]
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    started = [line for line in lines if line.get("event") == "processor_started"]
    assert len(started) == 1, err.decode()[-3000:]
    assert started[0]["event_loop"] == "uvloop"
    assert started[0]["instance"] == "looped-1"
