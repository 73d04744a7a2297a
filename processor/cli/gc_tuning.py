"""The cyclic garbage collector set for a long-running processor (`dispersion processor` calls `tune_gc` once its
start-up objects exist, just before it serves), and its work exported on `/metrics`.

Nearly everything the processor allocates per batch is freed by reference counting: during
`benchmarks/month_end.py --instances 1 --batches 300` the collector found 10 objects of cyclic garbage in all. With
CPython's defaults it still ran 571 young, 52 middle and 4 full collections in that run, 0.64 s of CPU (about 5 % of
the processor's): a young collection starts whenever 700 container objects have been allocated, net, since the last
one, and each full collection walked the 108,000 objects made at start-up (modules, functions, settings, schemas),
60-90 ms with the event loop stalled while bank calls were being timed.

Frozen (moved to the permanent generation, which no collection walks), start-up's objects cost nothing: a full
collection takes 0.005 ms (`benchmarks/gc_pauses.py`). The young threshold then sets how often the rest runs; the
same run, from the moment the processor served (docs/benchmarks.md, eighth pass):

    threshold   collections (young / middle / full)   collector CPU
    700         573-576 / 52 / 4                       0.28-0.36 s
    2,000       118-120 / 10 / 0                       0.16 s
    5,000       15-16 / 1 / 0                          0.07 s
    10,000      4 / 0 / 0                              0.02-0.03 s

Reference counting frees as before; what waits for a collection is only cyclic garbage (an exception kept with its
traceback, whose frames hold their locals), and it waits for `YOUNG_THRESHOLD` net container allocations instead of
700. 5,000 takes nine tenths of the collector's CPU away and keeps that wait at 7 times the default's, where 10,000
would take 0.13 ms more per batch for twice the wait. An object frozen at start-up that later becomes cyclic garbage
(a connection dropped from a pool) is never reclaimed: a one-off, bounded by what start-up built.

`dispersion_gc_collections_total` and `dispersion_gc_cpu_seconds_total` (by generation) count the collections from
`tune_gc` on and the CPU of the thread that ran them (prometheus_client's `python_gc_collections_total` counts from
the process's start, without their time).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any, Final

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

YOUNG_THRESHOLD: Final = 5_000


class CollectorClock(Collector):
    """The collector's collections and CPU per generation, kept by a `gc.callbacks` entry and read at scrape time.

    The callback only adds to two lists: it runs inside a collection, in whichever thread allocated, where taking a
    lock (as a prometheus_client metric does) could wait on that same thread. Collections never overlap, and a
    collection's start and stop come from one thread, so one start time suffices."""

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
            "CPU of the cyclic garbage collector since the processor started serving, by generation",
            labels=["generation"],
        )
        runs = CounterMetricFamily(
            "dispersion_gc_collections",
            "Cyclic garbage collections since the processor started serving, by generation",
            labels=["generation"],
        )
        for generation in range(3):
            cpu.add_metric([str(generation)], self.seconds[generation])
            runs.add_metric([str(generation)], self.collections[generation])
        yield cpu
        yield runs


_CLOCK = CollectorClock()
_counting = False  # `_CLOCK` registered and in `gc.callbacks` (once per process)


def tune_gc() -> tuple[int, int]:
    """Start counting collections for `/metrics`, collect once, freeze what survives (start-up's long-lived
    objects) and raise the young generation's threshold (see the module docstring). Returns the threshold and the
    number of frozen objects, for the start-up log line."""
    global _counting
    if not _counting:
        REGISTRY.register(_CLOCK)  # first: should it fail, the collector is left as it was
        gc.callbacks.append(_CLOCK)
        _counting = True
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    return YOUNG_THRESHOLD, gc.get_freeze_count()
