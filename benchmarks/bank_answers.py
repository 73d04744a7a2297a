"""Bank answer parsing benchmark: the pydantic readers of `processor/bank/models.py` against the hand-written
readers they replaced, interleaved in one run.

The old readers are read from git (`--baseline`, default the last commit that had them) into a scratch module,
so both run on the same machine at the same moment. Each kind is timed from the parsed body (what the client
hands the reader; the JSON parsing, `loads` or `loads_echo`, is the same for both and shown apart):

    domestic VRP       one B2 answer (per call)
    file consent       A1 answer echoing a file of N transfers, read with `loads_echo` (the echo is dropped)
    report             the report-file of an N-transfer file payment (JSON parsing included, as in the reader)
    report lines only  the lines of that report: "old" is the fast path the reader keeps, "new" every line
                       through the pydantic model `ReportLineAnswer` (what the fast path spares)

    python benchmarks/bank_answers.py [--transfers N] [--runs R] [--baseline REV]

Prints microseconds per answer, best of R runs each, old / new / ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from processor.bank import models

BASELINE = "085a18c1be906e9aebb0f43afec202cb769917c1"  # main before the readers became pydantic models
STAMP = "2026-11-26T09:00:00.000Z"


def _old_models(rev: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{rev}:processor/bank/models.py"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_bank_models.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_bank_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_bank_models"] = module
    spec.loader.exec_module(module)
    return module


def _vrp() -> bytes:
    return orjson.dumps(
        {
            "Data": {
                "DomesticVRPId": "obvrp-1",
                "ConsentId": "vrp-1",
                "Status": "Pending",
                "CreationDateTime": STAMP,
                "StatusUpdateDateTime": STAMP,
                "Charges": [
                    {
                        "ChargeBearer": "BorneByDebtor",
                        "Type": "UK.OBIE.CHAPSOut",
                        "Amount": {"Amount": "0.15", "Currency": "GBP"},
                    }
                ],
                "Instruction": {
                    "InstructionIdentification": "i1",
                    "EndToEndIdentification": "e1",
                    "InstructedAmount": {"Amount": "12.34", "Currency": "GBP"},
                },
            },
            "Links": {"Self": "http://bank/x"},
            "Meta": {},
        }
    )


def _consent(transfers: int) -> bytes:
    rows = [
        {
            "originAccount": {"accountNumber": "3001", "accountType": "MONETARY", "currency": "GTQ"},
            "destinationAccount": {"accountNumber": str(2000 + i), "accountType": "MONETARY", "currency": "GTQ"},
            "transferInfo": {"transactionType": "CREDIT", "transactionAmount": "10.25", "reference": f"r{i}"},
        }
        for i in range(transfers)
    ]
    body = {
        "Data": {
            "ConsentId": "pay-fi-1",
            "Status": "AwaitingUpload",
            "CreationDateTime": STAMP,
            "StatusUpdateDateTime": STAMP,
            "Initiation": {
                "SupplementaryData": {"data": {"transaction": rows}},
                "FileType": "UK.OBIE.PaymentInitiation.3.1",
                "FileHash": "abc",
                "NumberOfTransactions": str(transfers),
                "ControlSum": "1025.00",
            },
        },
        "Links": {"Self": "http://bank/x"},
    }
    return orjson.dumps(body).replace(b'"10.25"', b"10.25")


def _report(transfers: int) -> bytes:
    lines = [
        {
            "Index": i,
            "DestinationAccount": str(2000 + i),
            "Amount": "10.25",
            "Currency": "GTQ",
            "Status": "Rejected" if i % 50 == 0 else "Accepted",
            **({"ReasonCode": "AC04", "Reason": "closed"} if i % 50 == 0 else {}),
        }
        for i in range(transfers)
    ]
    data = {"Data": {"Status": "InitiationCompleted", "Transactions": lines}}
    return orjson.dumps(data).replace(b'"10.25"', b"10.25")


def _best(call: Callable[[], Any], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        call()
    return (time.perf_counter() - start) / repeat * 1e6


def main() -> None:
    """Time every kind of answer, old and new readers interleaved, and print microseconds per answer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transfers", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", default=BASELINE)
    args = parser.parse_args()
    old = _old_models(args.baseline)
    vrp_body, consent_raw, report_raw = _vrp(), _consent(args.transfers), _report(args.transfers)
    vrp, consent = models.loads(vrp_body), models.loads_echo(consent_raw)
    kinds: dict[str, tuple[Callable[[], Any], Callable[[], Any], int]] = {
        "domestic VRP": (lambda: old.DomesticVrp.parse(vrp, "i"), lambda: models.DomesticVrp.parse(vrp, "i"), 2000),
        f"file consent ({args.transfers} echoed)": (
            lambda: old.FileConsent.parse(consent, "i"),
            lambda: models.FileConsent.parse(consent, "i"),
            2000,
        ),
        f"report ({args.transfers} lines)": (
            lambda: old.FilePaymentReport.parse("fp", "application/json", report_raw, "i"),
            lambda: models.FilePaymentReport.parse("fp", "application/json", report_raw, "i"),
            1,
        ),
    }
    new_lines = models.FilePaymentReport.parse("fp", "application/json", report_raw, "i").lines
    old_lines = old.FilePaymentReport.parse("fp", "application/json", report_raw, "i").lines
    assert new_lines == tuple(models.ReportLine(*vars_of(line)) for line in old_lines), "the readers disagree"
    items = models.loads(report_raw)["Data"]["Transactions"]
    # What the report's fast path spares: every line through the pydantic model instead.
    kinds[f"report lines only, pydantic ({args.transfers})"] = (
        lambda: [models._plain_line(item) for item in items],
        lambda: [models._checked_line(item, "") for item in items],
        1,
    )
    print(f"{'answer':<40} {'old µs':>12} {'new µs':>12} {'new/old':>8}")
    for name, (before, after, repeat) in kinds.items():
        olds, news = [], []
        for _ in range(args.runs):
            olds.append(_best(before, repeat))
            news.append(_best(after, repeat))
        o, n = min(olds), min(news)
        print(f"{name:<40} {o:>12.1f} {n:>12.1f} {n / o:>8.2f}")
    loads_echo_us = _best(lambda: models.loads_echo(consent_raw), 1)
    print(f"(for scale: loads_echo of the consent answer {loads_echo_us:.0f} µs, {len(consent_raw) / 1e6:.1f} MB)")


def vars_of(line: Any) -> tuple[Any, ...]:
    """The fields of an old ReportLine, in order (slots dataclass)."""
    return tuple(getattr(line, name) for name in line.__slots__)


if __name__ == "__main__":
    main()
