"""What one full collection of the cyclic garbage collector costs on the processor's start-up heap (issue 22),
before and after `processor/cli/gc_tuning.py`, in one run.

Each side is a fresh interpreter holding the processor's start-up heap: `processor.cli.service` and what it imports,
and every topic's schema compiled by encoding one batch's outbox events (`relay_encode.batch_events`). "default" keeps
CPython's settings; "tuned" calls `tune_gc`, which freezes that heap (`dispersion processor` calls it once started,
with its engine built and before its HTTP app and Kafka clients exist).
Printed per side, interleaved over `--rounds`: the objects the collector tracks, the frozen ones, and the CPU of one
full collection (mean of `--collections`).

The young and middle collections walk only what is new, so their cost and number depend on the run, not on this
heap: `benchmarks/month_end.py` prints the processor's own counts and CPU per generation, from `/metrics`
(docs/benchmarks.md, eighth pass).

    python benchmarks/gc_pauses.py [--collections 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from typing import Any

from relay_encode import batch_events

from processor.cli.gc_tuning import tune_gc
from producers.relay import EventEncoder


def child(mode: str, collections: int) -> dict[str, Any]:
    """One side's figures: the start-up heap built, tuned or not, then `collections` full collections."""
    import processor.cli.service  # noqa: F401  (the processor's modules: its start-up heap)

    encoder = EventEncoder()
    for event in batch_events(0, 100):
        encoder(event)  # every topic's schema compiled, as after a processor's first batch
    frozen = tune_gc()[1] if mode == "tuned" else 0
    start = time.thread_time()
    for _ in range(collections):
        gc.collect()
    full = (time.thread_time() - start) / collections
    return {"tracked": len(gc.get_objects()), "frozen": frozen, "full": full}


def main() -> int:
    """Both sides interleaved in child processes; prints the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--collections", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=("default", "tuned"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.collections)))
        return 0
    print(f"CPU of one full collection on the processor's start-up heap (mean of {args.collections})")
    for _ in range(args.rounds):
        for mode in ("default", "tuned"):
            done = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--collections", str(args.collections)],
                capture_output=True,
                text=True,
                check=True,
            )
            got = json.loads(done.stdout)
            print(
                f"{mode:8s} {got['tracked']:7d} objects tracked, {got['frozen']:7d} frozen:"
                f" {got['full'] * 1000:7.3f} ms per full collection"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
