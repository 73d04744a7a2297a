"""The garbage collector tuned at processor start (processor/cli/gc_tuning.py): start-up's objects frozen out of
its walks, a higher young threshold, and its collections and CPU counted for `/metrics`."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# In a fresh interpreter holding the processor's modules: what a full collection walks before and after, the
# thresholds, and what /metrics says after one collection of each generation.
PROBE = """
import gc, json
import processor.cli.service
from prometheus_client import REGISTRY, generate_latest
from processor.cli.gc_tuning import tune_gc
walked_before = len(gc.get_objects())
young_before = gc.get_threshold()[0]
threshold, frozen = tune_gc()
again = tune_gc()  # a second call (a restarted server in one process) must not count twice or fail
walked_after = len(gc.get_objects())
for generation in (0, 1, 2):
    gc.collect(generation)
lines = [line for line in generate_latest(REGISTRY).decode().splitlines() if line.startswith("dispersion_gc_")]
print(json.dumps({
    "walked_before": walked_before, "walked_after": walked_after, "young_before": young_before,
    "young_after": gc.get_threshold()[0], "returned": [threshold, frozen], "again": list(again),
    "frozen": gc.get_freeze_count(), "lines": lines,
}))
"""


def _probe() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_start_up_objects_are_frozen_and_collections_are_counted() -> None:
    got = _probe()
    assert got["young_before"] < 5_000  # CPython's default (700 on 3.11): the probe starts untuned
    assert got["walked_before"] > 50_000  # what every full collection walked
    assert got["young_after"] == 5_000
    assert got["walked_after"] < 1_000  # frozen out of every walk
    frozen = got["frozen"]
    assert isinstance(frozen, int) and frozen > 50_000
    threshold, reported = got["returned"]
    assert threshold == 5_000 and 50_000 < reported <= frozen  # what the start-up log line says
    assert got["again"][0] == 5_000
    lines = got["lines"]
    assert isinstance(lines, list)
    # one collection of each generation, and the full one each `tune_gc` made (counting starts before it)
    for generation, count in ((0, 1), (1, 1), (2, 3)):
        assert f'dispersion_gc_collections_total{{generation="{generation}"}} {count}.0' in lines
    cpu = [line for line in lines if line.startswith("dispersion_gc_cpu_seconds_total{")]
    assert len(cpu) == 3
    assert sum(float(line.rsplit(" ", 1)[1]) for line in cpu) > 0.0  # the collections' own thread CPU
