"""The 100,000-transfer batch's memory, piece by piece (issue 22, fifth pass): each piece the pass changed, its
reading of 1b7883a ("before") and this checkout's ("after"), interleaved in this process.

- `answer read`: a bank answer arriving in 64 KiB chunks. Before: httpx's `aread` (every chunk kept, then joined).
  After: `BankClient._exchange`'s one growing bytearray.
- `file render`: the canonical file (`payload._render`). Before: `b"".join` of its slices. After: one `BytesIO`.
- `record text`: the decoded Avro record written as the text to store. Before: `_as_text` (the whole record written
  at once). After: `_handed_text` (a transfer at a time, each let go of once written); the record is built inside
  the measurement, so its release counts.
- `report`: the report-file's lines. Before: the body parsed whole, then its lines read. After:
  `FilePaymentReport.parse` (each line object made a line as the parser reads it).
- `store text` (with `--pg-url`): a batch's text into a PostgreSQL row. Before: one statement parameter. After:
  `Tx.set_text` (COPY in pieces). tracemalloc sees psycopg's copy of the text, not libpq's own buffer (memray saw
  32 MiB of it for 23 MB).

Printed per piece: CPU ms (best of `--runs`) and the peak of Python allocations (tracemalloc) above what the piece
was given, in MiB.

    python benchmarks/big_memory.py [--transfers 100000] [--runs 3] [--pg-url postgresql://...]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable, Iterator

import orjson
from payload import make_batch_dict

from processor.bank import models
from processor.domain import payload
from processor.domain.batch import batch_from_json
from processor.domain.validation import validated
from processor.engine.intake import _as_text, _handed_text
from processor.store.db import connect

Piece = Callable[[], object]


def _measure(work: Piece) -> tuple[float, float]:
    start = time.process_time()
    work()
    cpu = time.process_time() - start
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return cpu * 1000, peak / 2**20


def _chunks(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), 65_536):
        yield body[start : start + 65_536]


def answer_read(body: bytes) -> tuple[Piece, Piece]:
    """Reading an answer's chunks: joined at the end, or into one growing buffer."""

    def before() -> object:
        return b"".join([chunk for chunk in _chunks(body)])

    def after() -> object:
        answer = bytearray()
        for chunk in _chunks(body):
            answer += chunk
        return answer

    return before, after


def file_render(transfers: int) -> tuple[Piece, Piece]:
    """The canonical file of a validated batch."""
    text = orjson.dumps(make_batch_dict(transfers), default=lambda value: orjson.Fragment(str(value))).decode()
    batch = validated(batch_from_json(text))
    concepts = payload._latin1_concepts(batch.concepts, batch.concepts_utf8)
    parts = (batch, batch.batch.origin, payload.DEFAULT_SETTINGS, concepts, "")
    return (lambda: b"".join(list(payload._render_slices(*parts)))), (lambda: payload._render(*parts))


def record_text(transfers: int) -> tuple[Piece, Piece]:
    """A decoded record written as text; the record is made inside the piece (its release is what counts)."""

    return (lambda: _as_text(make_batch_dict(transfers))), (lambda: _handed_text(make_batch_dict(transfers)))


def report(transfers: int) -> tuple[Piece, Piece]:
    """A 100,000-line report-file's lines."""
    rows = ",".join(
        f'{{"Index":{i},"DestinationAccount":"{3000000000 + i}","Amount":{i % 5000}.25,"Currency":"GTQ",'
        f'"Status":"Settled","ReasonCode":null,"Reason":null}}'
        for i in range(transfers)
    )
    body = f'{{"Data":{{"Status":"InitiationCompleted","Transactions":[{rows}]}}}}'.encode()

    def before() -> object:
        data = models.loads(body)
        return tuple(models._plain_line(item) for item in data["Data"]["Transactions"])

    return before, lambda: models.FilePaymentReport.parse("fp", "application/json", body, "iid").lines


def store_text(pg_url: str, transfers: int) -> tuple[Piece, Piece]:
    """A batch's text into a row of a temporary table on PostgreSQL."""
    text = _as_text(make_batch_dict(transfers))
    db = connect(pg_url)

    def write(in_pieces: bool) -> object:
        with db.transaction() as tx:
            tx.execute("CREATE TEMPORARY TABLE bench_text (k TEXT PRIMARY KEY, v TEXT NOT NULL) ON COMMIT DROP")
            if in_pieces:
                tx.execute("INSERT INTO bench_text VALUES ('k', '')")
                return tx.set_text("bench_text", "v", "k", "k", text)
            return tx.execute("INSERT INTO bench_text VALUES ('k', ?)", (text,))

    return (lambda: write(False)), (lambda: write(True))


def main() -> None:
    """Print CPU and peak allocations before and after for each piece."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transfers", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pg-url", default=None, help="also the store's text write, on this PostgreSQL")
    args = parser.parse_args()
    n: int = args.transfers
    echo = b"x" * (400 * n)  # the size of the bank's echo of the file (39 MB for 100,000 transfers)
    pieces: dict[str, tuple[Piece, Piece]] = {
        "answer read": answer_read(echo),
        "file render": file_render(n),
        "record text": record_text(n),
        "report": report(n),
    }
    if args.pg_url:
        pieces["store text"] = store_text(args.pg_url, n)
    print(f"{n:,} transfers; CPU ms (best of {args.runs}) and peak MiB above the piece's input")
    print(f"{'piece':<12} {'before ms':>10} {'after ms':>9} {'before MiB':>11} {'after MiB':>10}")
    for name, (before, after) in pieces.items():
        old, new = [], []
        for _ in range(args.runs):
            old.append(_measure(before))
            new.append(_measure(after))
        print(
            f"{name:<12} {min(o[0] for o in old):>10.1f} {min(x[0] for x in new):>9.1f}"
            f" {max(o[1] for o in old):>11.1f} {max(x[1] for x in new):>10.1f}"
        )


if __name__ == "__main__":
    main()
