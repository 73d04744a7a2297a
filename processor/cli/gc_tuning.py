"""The cyclic garbage collector set for a long-running processor (`dispersion processor` calls `tune_gc` once its
start-up objects exist, just before it serves), and its cost exported on `/metrics`.

Nearly everything the processor allocates per batch is freed by reference counting: during
`benchmarks/month_end.py --instances 1 --batches 300` the collector found 10 objects of cyclic garbage in all. With
CPython's default first threshold (700 container objects allocated net since the last collection) it still ran 571
young collections, 52 middle ones and 4 full ones in that run: 0.64 s of CPU, about 4.5 % of the processor's. Each
full collection walked the 110,000 objects made at start-up (modules, functions, schemas, settings), about 90 ms with
the event loop stalled. Frozen (moved to the permanent generation, which the collector never walks), they cost
nothing; with the first threshold at 10,000 the same run made 4 young collections and no other: 0.03 s. Reference
counting frees as before; only cyclic garbage (a traceback that holds its frame, say) waits longer, for 10,000 net
container allocations instead of 700. Measured in docs/benchmarks.md, eighth pass; `benchmarks/gc_pauses.py` times
each generation's collection on the start-up heap, before and after.

`dispersion_gc_cpu_seconds_total` and `dispersion_gc_collections_total` (by generation) count the collections since
`tune_gc` and the CPU of the thread that ran them (prometheus_client's `python_gc_collections_total` counts from the
process's start but not their time).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any, Final

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

YOUNG_THRESHOLD: Final = 10_000


class CollectorClock(Collector):
    """The collector's collections and CPU per generation, kept by a `gc.callbacks` entry and read at scrape time.

    The callback only adds to two lists: it runs inside a collection, in whichever thread allocated, where taking a
    lock (as a prometheus_client metric does) could wait on that same thread."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        """The `gc.callbacks` entry: the thread's CPU clock at the start, the difference at the stop."""
        if phase == "start":
            self._started = time.thread_time()
            return
        generation = info["generation"]
        self.collections[generation] += 1
        self.seconds[generation] += time.thread_time() - self._started

    def collect(self) -> Iterator[CounterMetricFamily]:
        """The two counters, by generation (called by prometheus_client on each scrape)."""
        cpu = CounterMetricFamily(
            "dispersion_gc_cpu_seconds",
            "CPU of the cyclic garbage collector since start-up, by generation",
            labels=["generation"],
        )
        runs = CounterMetricFamily(
            "dispersion_gc_collections",
            "Cyclic garbage collections since start-up, by generation",
            labels=["generation"],
        )
        for generation in range(3):
            cpu.add_metric([str(generation)], self.seconds[generation])
            runs.add_metric([str(generation)], self.collections[generation])
        yield cpu
        yield runs


_CLOCK = CollectorClock()


def tune_gc() -> tuple[int, int]:
    """Collect once, freeze what survives (start-up's long-lived objects), raise the young generation's threshold
    (see the module docstring) and start counting collections for `/metrics`. Returns the threshold and the number
    of frozen objects, for the start-up log line."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    if _CLOCK not in gc.callbacks:
        gc.callbacks.append(_CLOCK)
        REGISTRY.register(_CLOCK)
    return YOUNG_THRESHOLD, gc.get_freeze_count()
