"""Reading the bank's echo of our file (issue 22): a file consent or file payment answer repeats the whole file in
`Data.Initiation.SupplementaryData`, and the processor reads these answers without it (`models.loads_echo`).

"Before" is the reading of df5f042: `json.loads` of the whole body (the bytes decoded into one str first), each
transfer object dropped by an `object_pairs_hook` as soon as it was read. "After" is this checkout's `loads_echo`:
a body of at least `ECHO_STREAM_BYTES` is read as ijson's stream of events with the file's events skipped, a smaller
one is parsed whole (by orjson when that is exact, `models._echo_by_orjson`; else by `json.loads`). For each size,
both are run interleaved in this process; printed per reading: CPU ms (best of
`--runs`) and the peak of Python allocations (tracemalloc) in MiB, beside the body's size. `--wide` puts a
character past U+00FF in every concept, which makes the decoded str two bytes per character.

    python benchmarks/bank_echo.py [--transfers 100 100000] [--runs 3] [--wide]
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from processor.bank import models

_ROW_MEMBERS = frozenset({"originAccount", "destinationAccount", "transferInfo", "accountNumber", "transactionType"})


def _before_hook(pairs: list[tuple[str, Any]]) -> Any:
    for name, _ in pairs:
        if name in _ROW_MEMBERS:
            return None
    return dict(pairs)


def before(raw: bytes) -> Any:
    """The echo reading of df5f042."""
    return json.loads(raw, parse_float=Decimal, object_pairs_hook=_before_hook)


def answer(transfers: int, concept: str) -> bytes:
    """An A1 answer echoing a file of `transfers` rows shaped as the processor's file payload."""
    rows = ",".join(
        f'{{"destinationAccount":{{"accountNumber":"{i:012d}","accountType":"SAVINGS","currency":"GTQ",'
        f'"email":"employee{i}@example.com"}},"originAccount":{{"accountNumber":"000111222333",'
        f'"accountType":"MONETARY","currency":"GTQ"}},"transferInfo":{{"concept":"{concept}","debitType":"D",'
        f'"executionType":"ONLINE","reference":"","transactionAmount":1234.56,"transactionType":"THIRD_PROVIDER"}}}}'
        for i in range(transfers)
    )
    return (
        '{"Data":{"ConsentId":"pay-fi-1","Status":"AwaitingUpload","CreationDateTime":"2026-11-27T00:00:00.000Z",'
        '"StatusUpdateDateTime":"2026-11-27T00:00:00.000Z","Initiation":{"SupplementaryData":{"data":{"transaction":['
        + rows
        + ']}},"FileType":"UK.OBIE.PaymentInitiation.4.0","FileHash":"h","NumberOfTransactions":"'
        + str(transfers)
        + '","ControlSum":123456.00}},"Links":{"Self":"http://bank/x"},"Meta":{}}'
    ).encode()


def _measure(read: Callable[[bytes], Any], raw: bytes) -> tuple[float, float]:
    start = time.process_time()
    read(raw)
    cpu = time.process_time() - start
    tracemalloc.start()
    try:
        read(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return cpu * 1000, peak / 2**20


def main() -> None:
    """Print CPU and peak allocations of both readings for each size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transfers", type=int, nargs="+", default=[100, 100_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--wide", action="store_true", help="a character past U+00FF in every concept")
    args = parser.parse_args()
    concept = "Salario \u0150" if args.wide else "Salario"
    print(f"streamed from {models.ECHO_STREAM_BYTES / 2**20:.0f} MiB; concepts {concept!r}")
    print(f"{'transfers':>10} {'body MiB':>9} {'before ms':>10} {'after ms':>9} {'before MiB':>11} {'after MiB':>10}")
    for transfers in args.transfers:
        raw = answer(transfers, concept)
        sums = [read(raw)["Data"]["Initiation"]["ControlSum"] for read in (before, models.loads_echo)]
        if sums[0] != sums[1]:
            raise SystemExit("the readings disagree")
        old, new = [], []
        for _ in range(args.runs):
            old.append(_measure(before, raw))
            new.append(_measure(models.loads_echo, raw))
        print(
            f"{transfers:>10} {len(raw) / 2**20:>9.2f} {min(o[0] for o in old):>10.2f} {min(n[0] for n in new):>9.2f}"
            f" {max(o[1] for o in old):>11.2f} {max(n[1] for n in new):>10.2f}"
        )


if __name__ == "__main__":
    main()
