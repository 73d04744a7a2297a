"""The float check of the JSON the store writes, before and after issue 22's pass, side by side in one run.

Every document the store writes as JSON (`processor.store.values.dump_json`: each outbox event's payload, a
completed batch's 100 transfer events and its COMPLETED event among them) and every bank body
(`processor.bank.models.dumps`) is first looked through for a float. "Before" is the recursive walk they each had
(kept below: `isinstance(value, Mapping)` on every value goes through the ABC machinery); "after" is
`processor.domain.money.holds_float` (the exact type looked up first). Printed: CPU per document (this process),
and the same with the JSON written, interleaved over `--rounds`.

    python benchmarks/json_checks.py [--batches 50] [--transactions 100] [--rounds 3]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from relay_encode import batch_events, batch_parser  # the same completed batches as the relay's benchmark

from processor.domain.money import holds_float


def walk_before(value: object) -> None:
    """The check as it was in `processor/store/values.py` (`_no_floats`) before this pass."""
    if isinstance(value, float):
        raise TypeError("float")
    if isinstance(value, Mapping):
        for item in value.values():
            walk_before(item)
    elif isinstance(value, list | tuple):
        for item in value:
            walk_before(item)


def check_after(value: object) -> None:
    """The check as `dump_json` makes it now."""
    if holds_float(value):
        raise TypeError("float")


def per_document(documents: list[Any], work: Callable[[Any], object]) -> float:
    """CPU seconds per document of `work`."""
    start = time.process_time()
    for document in documents:
        work(document)
    return (time.process_time() - start) / len(documents)


def main() -> int:
    """Both variants interleaved; prints the figures."""
    args = batch_parser(__doc__).parse_args()
    documents = [event.payload for batch in range(args.batches) for event in batch_events(batch, args.transactions)]
    per_batch = len(documents) / args.batches
    print(f"{args.batches} completed batches: {len(documents)} documents ({per_batch:.0f} per batch)")
    variants: dict[str, Callable[[Any], object]] = {"before": walk_before, "after": check_after}
    for _ in range(args.rounds):
        for name, check in variants.items():
            alone = per_document(documents, check)

            def written(document: Any, check: Callable[[Any], object] = check) -> object:
                check(document)
                return orjson.dumps(document)

            with_json = per_document(documents, written)
            print(
                f"{name:7s} float check {alone * 1e6:5.2f} us per document; with the JSON written"
                f" {with_json * 1e6:5.2f} us = {with_json * per_batch * 1e3:.2f} ms per batch"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
