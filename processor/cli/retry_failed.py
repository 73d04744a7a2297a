"""`dispersion retry-failed`: pay a batch's failed transfers again, as a new batch `ID.retry-N` with its own
approval (through the admin API of a running processor).

    dispersion retry-failed --batch ID [--corrections FILE] [--config C] [--url URL]

`--corrections` names a CSV file (`index,account_number[,account_type]`, a header line first) or a JSON list of
`{"index": 2, "account_number": "...", "account_type": "..."}`: a new destination account for a transfer, by its
index in the original batch. Only failed transfers are retried (and corrected); a transfer an earlier retry paid
or still has in flight is left out. The new batch is paid through the normal flow: follow it with
`dispersion status --batch ID.retry-N --until-terminal` and approve it at the link its AUTHORIZATION_REQUIRED
carries.

With `--corrections` the retry is a request that waits for a second person (`[controls] four_eyes`, default on):
`dispersion requests approve ID` by someone else with the approver or admin role makes the retry batch.

Exit status: 0 a retry batch was created; 5 the corrected retry waits as a request for a second person; 1 nothing
to retry (no failed transfer, or all in flight), or the retry
was refused (the batch is not final, a correction names a transfer that did not fail, the corrected batch is
invalid); 2 usage or configuration (no token, unreadable corrections file, processor not reachable).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

from processor.cli.admin_client import AdminClient, AdminRefusalError, add_arguments, add_requested_by
from processor.cli.common import CliError
from processor.domain.masking import mask_account
from processor.domain.text import printable

EXIT_PENDING = 5


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion retry-failed`."""
    p = argparse.ArgumentParser(
        prog="dispersion retry-failed", description="Pay a batch's failed transfers again as ID.retry-N."
    )
    p.add_argument("--batch", required=True, help="the batch whose failed transfers to pay again")
    p.add_argument("--corrections", type=Path, help="CSV (index,account_number[,account_type]) or JSON list")
    add_requested_by(p)
    add_arguments(p)
    return p


def read_corrections(path: Path) -> list[dict[str, Any]]:
    """The corrections file as the admin API's `corrections` list; `CliError` naming the bad line."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    if path.suffix.lower() == ".json":
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise CliError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(document, list):
            raise CliError(f"{path} must hold a JSON list of corrections")
        return document
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or [c.strip().lower() for c in rows[0][:2]] != ["index", "account_number"]:
        raise CliError(f"{path}: the first line must be the header index,account_number[,account_type]")
    out: list[dict[str, Any]] = []
    for line, row in enumerate(rows[1:], start=2):
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) < 2 or not row[0].strip().isdigit() or not row[1].strip():
            raise CliError(f"{path}: line {line}: expected a transfer index and an account number")
        item: dict[str, Any] = {"index": int(row[0]), "account_number": row[1].strip()}
        if len(row) > 2 and row[2].strip():
            item["account_type"] = row[2].strip()
        out.append(item)
    return out


def main(argv: list[str]) -> int:
    """`dispersion retry-failed`."""
    args = parser().parse_args(argv)
    try:
        corrections = read_corrections(args.corrections) if args.corrections else None
        client = AdminClient.from_args(args)
        body: dict[str, Any] = {"corrections": corrections}
        if args.requested_by:
            body["requested_by"] = args.requested_by
        answer = client.call("POST", f"/batches/{args.batch}/retry", body=body)
    except CliError as exc:
        print(f"dispersion retry-failed: {exc}", file=sys.stderr)
        return 2
    except AdminRefusalError as exc:
        print(f"dispersion retry-failed: {exc}", file=sys.stderr)
        return 1
    print(printable(answer["message"]))
    for index, retry_id in sorted(answer.get("in_flight", {}).items(), key=lambda kv: int(kv[0])):
        print(f"  transfer {index}: still in {retry_id}")
    request = answer.get("request")
    if request is not None and request["state"] == "PENDING":
        for item in request["corrections"]:
            print(f"  transfer {item['index']}: {item['old_account']} -> {item['new_account']}")
        print(f"a second person approves it: dispersion requests approve {request['id']} (approver or admin)")
        return EXIT_PENDING
    if not answer.get("retry_batch_id"):
        return 1
    fixed = {int(c["index"]): c["account_number"] for c in corrections or []}
    for index in answer["transfer_indexes"]:
        note = f" -> {mask_account(fixed[index])}" if index in fixed else ""
        print(f"  transfer {index}{note}")
    retry_id = answer["retry_batch_id"]
    print(f"follow it: dispersion status --batch {retry_id} --until-terminal (approve at its link)")
    return 0
