"""The processor's event loop is uvloop's (processor/cli/service.py; docs/benchmarks.md, sixth pass), its garbage
collector is tuned once it has started (processor/cli/gc_tuning.py; eighth pass), and its start-up log line says
both; `/metrics` counts the collector's work."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
from bank_support import integration_table
from processor_support import start_api_processor, write_config


def test_the_processor_runs_on_uvloop_with_its_collector_tuned_and_logs_it(tmp_path: Path, unserved_port: int) -> None:
    tables: dict[str, dict[str, Any]] = {
        "processor": {"store": f"sqlite:///{tmp_path / 'db.sqlite'}", "store_threads": 1},
        "integrations.sandbox": integration_table(f"http://127.0.0.1:{unserved_port}", retry={"max_attempts": 1}),
    }
    config = tmp_path / "dispersion.toml"
    write_config(config, tables)
    env = {**os.environ, "DISPERSION_STORE_ALLOW_DEV_KEY": "1"}
    process, api = start_api_processor(config, "looped-1", env, "--log-format", "json")
    try:
        scraped = httpx.get(f"{api}/metrics", timeout=30).text
    finally:
        process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()[-3000:]
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    started = [line for line in lines if line.get("event") == "processor_started"]
    assert len(started) == 1, err.decode()[-3000:]
    assert started[0]["event_loop"] == "uvloop"
    assert started[0]["instance"] == "looped-1"
    assert started[0]["gc_young_threshold"] == 5_000
    assert started[0]["gc_frozen"] > 50_000  # the modules, settings and engine built at start-up
    for name in ("dispersion_gc_collections_total", "dispersion_gc_cpu_seconds_total"):
        assert f'{name}{{generation="2"}}' in scraped
