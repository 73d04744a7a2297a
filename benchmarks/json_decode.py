"""Reading JSON with exact decimals, before and after issue 22's tenth pass, side by side in one run.

What the processor reads back most at month end: each outbox event's stored payload (the relay parses every one
before it writes its Avro record: a completed batch's 100 transfer events and its status events) and the bank's
answers (`processor.bank.models.loads`: a token, a payment's status, a VRP). "Before" is what `load_json` and
`loads` were, `json.loads(text, parse_float=Decimal)` (the store's kept one `JSONDecoder` for text); "after" is
`processor.domain.exact_json.loads_decimal`, msgspec's decoder with the standard library behind it. Printed: CPU
microseconds per document (this process), interleaved over `--rounds`, and the two readings checked equal.

The echoed file's answers are `benchmarks/bank_echo.py`'s.

    python benchmarks/json_decode.py [--batches 50] [--transactions 100] [--rounds 3]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from json_checks import per_document
from relay_encode import batch_events, batch_parser  # the same completed batches as the relay's benchmark

from processor.domain.exact_json import loads_decimal

_STORE_BEFORE = json.JSONDecoder(parse_float=Decimal)

# Bank answers of the kinds `loads` reads at month end (the shapes of the spec's examples).
ANSWERS: dict[str, bytes] = {
    "token": b'{"access_token":"at-5f0c1f0e6f8a4a7d9b1e","token_type":"Bearer","expires_in":3600,'
    b'"scope":"payments","refresh_token":"rt-2b7e151628aed2a6abf7"}',
    "file payment": b'{"Data":{"FilePaymentId":"pay-fp-1","ConsentId":"pay-fi-1","Status":"InitiationCompleted",'
    b'"CreationDateTime":"2026-11-30T09:00:00.000Z","StatusUpdateDateTime":"2026-11-30T09:00:02.000Z",'
    b'"Charges":[{"ChargeBearer":"BorneByDebtor","Type":"UK.OBIE.CHAPSOut","Amount":{"Amount":"0.88",'
    b'"Currency":"GTQ"}}],"Initiation":{"FileType":"UK.OBIE.PaymentInitiation.4.0","FileHash":"h=",'
    b'"NumberOfTransactions":"100","ControlSum":123456.78,"SupplementaryData":null}},'
    b'"Links":{"Self":"http://bank/file-payments/pay-fp-1"},"Meta":{}}',
}


def main() -> int:
    """Both readings interleaved on each kind of document; prints the figures."""
    args = batch_parser(__doc__).parse_args()
    events = [event for batch in range(args.batches) for event in batch_events(batch, args.transactions)]
    kinds: dict[str, list[str | bytes]] = {
        "transfer event payload": [e.payload_text for e in events if e.topic == "dispersion.transfers"],
        "status event payload": [e.payload_text for e in events if e.topic == "dispersion.status"],
        **{f"bank answer: {name}": [body] * 2_000 for name, body in ANSWERS.items()},
    }
    readers: dict[str, Callable[[Any], Any]] = {
        "before": lambda text: (
            _STORE_BEFORE.decode(text) if isinstance(text, str) else json.loads(text, parse_float=Decimal)
        ),
        "after": loads_decimal,
    }
    for name, documents in kinds.items():
        for document in documents[:50]:
            if repr(readers["before"](document)) != repr(readers["after"](document)):
                print(f"{name}: the readings differ", file=sys.stderr)
                return 1
        size = sum(len(d) for d in documents) / len(documents)
        figures: dict[str, list[float]] = {reader: [] for reader in readers}
        for _ in range(args.rounds):
            for reader, read in readers.items():
                figures[reader].append(per_document(documents, read) * 1e6)
        before, after = min(figures["before"]), min(figures["after"])
        print(
            f"{name:28} {len(documents):6} x {size:6.0f} B: before {before:7.1f} us, after {after:7.1f} us "
            f"({before / after:.1f}x)"
        )
    per_batch = sum(1 for e in events) / args.batches
    print(f"({args.batches} completed batches, {per_batch:.0f} events each; best of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
