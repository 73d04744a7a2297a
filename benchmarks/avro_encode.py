"""The Avro encoding of a completed batch's outbox events, fastavro's writer against the compiled one, in one run.

"Before" is what `schemas.Codec.encode` did until the ninth pass of issue 22: the single-object header, then
fastavro's `schemaless_writer` with `strict_allow_default=True`. "After" is `Codec.encode` of this checkout (the
writer compiled once per schema version, `schemas/avro_binary.py`; fastavro only for what it does not take). The
records are the relay's (`outbox_record` of `relay_encode.batch_events`: 100 `dispersion.transfers` events and
the COMPLETED status event of 100 results per batch); both sides must give the same bytes. Printed: this process's
CPU per event of each topic, interleaved over `--rounds`.

    python benchmarks/avro_encode.py [--batches 50] [--transactions 100] [--rounds 3]
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Mapping
from typing import Any

from fastavro import schemaless_writer
from json_checks import per_document  # CPU seconds per item of a callable
from relay_encode import batch_events, batch_parser  # the same completed batches as the relay's benchmark

from producers.relay import outbox_record
from schemas import Codec
from schemas.topics import STATUS_TOPIC, TRANSFERS_TOPIC


def fastavro_encode(codec: Codec) -> Callable[[Mapping[str, Any]], bytes]:
    """The codec's encoding as it was before the compiled writer."""

    def encode(record: Mapping[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(codec.writer.header)
        schemaless_writer(out, codec.writer.schema, record, strict_allow_default=True)
        return out.getvalue()

    return encode


def main() -> int:
    """Both writers interleaved; prints the figures."""
    args = batch_parser(__doc__).parse_args()
    events = [event for batch in range(args.batches) for event in batch_events(batch, args.transactions)]
    topics = (TRANSFERS_TOPIC, STATUS_TOPIC)
    records = {topic: [outbox_record(e) for e in events if e.topic == topic] for topic in topics}
    codecs = {topic: Codec(topic) for topic in records}
    writers = {
        "fastavro": {topic: fastavro_encode(codec) for topic, codec in codecs.items()},
        "compiled": {topic: codec.encode for topic, codec in codecs.items()},
    }
    for topic, items in records.items():  # warm up, and check both write the same bytes
        if [writers["fastavro"][topic](r) for r in items] != [writers["compiled"][topic](r) for r in items]:
            print(f"the writers disagree on {topic}", file=sys.stderr)
            return 1
    print(f"{args.batches} completed batches of {args.transactions} transfers: the same bytes from both writers")
    for _ in range(args.rounds):
        for name, encode in writers.items():
            transfer = per_document(records[TRANSFERS_TOPIC], encode[TRANSFERS_TOPIC])
            status = per_document(records[STATUS_TOPIC], encode[STATUS_TOPIC])
            batch = transfer * args.transactions + status
            print(
                f"{name:9s} {TRANSFERS_TOPIC} {transfer * 1e6:6.2f} us per event;"
                f" COMPLETED {status * 1e6:7.1f} us; {batch * 1000:5.2f} ms per batch"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
