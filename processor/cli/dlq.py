"""`dispersion dlq`: the dead letters the processor recorded, and their audited replay (through the admin API).

    dispersion dlq list [--since T] [--batch ID] [--json]
    dispersion dlq show ID [--json]
    dispersion dlq replay ID --reason TEXT [--force]

`replay` re-publishes the dead letter's original bytes and key to the topic it was read from, with headers naming
the dead letter (`dispersion-replay-of: topic/partition/offset`), who replayed it, when and why; the replay is
recorded. A dead letter already replayed is refused unless `--force`. A replayed message that is still refused is
dead-lettered again; `show` then lists it under "dead-lettered again as", and its own `replay_of` names this one.

Exit status: 0 done; 1 refused (unknown dead letter, already replayed, Kafka did not take it); 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from processor.cli.admin_client import AdminClient, AdminRefusalError, add_arguments, add_requested_by
from processor.cli.common import CliError
from processor.domain.text import printable


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion dlq`."""
    p = argparse.ArgumentParser(prog="dispersion dlq", description="List, show and replay dead letters.")
    sub = p.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="recorded dead letters, oldest first")
    listing.add_argument("--since", help="only those recorded from this time (ISO 8601 with offset)")
    listing.add_argument("--batch", help="only those of this batch id")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    add_arguments(listing)
    show = sub.add_parser("show", help="one dead letter, its replays and the chain")
    show.add_argument("id", help="the dead letter's id (from list)")
    show.add_argument("--json", action="store_true")
    add_arguments(show)
    replay = sub.add_parser("replay", help="re-publish the original message, recorded")
    replay.add_argument("id", help="the dead letter's id (from list)")
    replay.add_argument("--reason", required=True, help="why it is replayed (recorded and sent as a header)")
    replay.add_argument("--force", action="store_true", help="replay even if it was replayed before")
    add_requested_by(replay)
    add_arguments(replay)
    return p


def _line(letter: dict[str, Any]) -> str:
    chain = f"  replay of {letter['replay_of']}" if letter.get("replay_of") else ""
    return (
        f"{letter['id']}  {letter['created_at']}  {letter.get('batch_id') or '-'}  "
        f"{letter['topic']}/{letter['partition']}/{letter['offset']}  {letter['reason'][:160]}{chain}"
    )


def _list(client: AdminClient, args: argparse.Namespace) -> int:
    after = 0
    while True:
        page = client.call("GET", "/dead-letters", params={"since": args.since, "batch_id": args.batch, "after": after})
        for letter in page["dead_letters"]:
            print(json.dumps(letter, ensure_ascii=False) if args.json else printable(_line(letter)))
        if page.get("next_after") is None:
            return 0
        after = page["next_after"]


def _show(client: AdminClient, args: argparse.Namespace) -> int:
    letter = client.call("GET", f"/dead-letters/{args.id}")
    if args.json:
        print(json.dumps(letter, ensure_ascii=False))
        return 0
    print(printable(_line(letter)))
    if len(letter["reason"]) > 160:  # the whole reason (a conflict's difference with the stored batch, say)
        print(printable(f"  reason: {letter['reason']}"))
    print(f"  on the dead-letter topic at {letter['dead_letter']}")
    for line in record_lines(letter.get("record") or {}):
        print(printable(line) if not line.startswith("    ") else line)
    for replay in letter["replays"]:
        where = "not acknowledged" if replay["offset"] is None else f"{replay['topic']}/{replay['partition']}/"
        where += "" if replay["offset"] is None else str(replay["offset"])
        print(
            printable(f"  replayed {replay['replayed_at']} by {replay['replayed_by']} ({replay['reason']}) -> {where}")
        )
    for again in letter["dead_lettered_again_as"]:
        print(f"  dead-lettered again as {again}")
    return 0


HEX_LINES = 16  # lines of hex `show` prints (16 bytes each); the console shows more


def record_lines(record: dict[str, Any]) -> list[str]:
    """The dead letter's original record: its key, then decoded, as text, or as hex (`letter_record`)."""
    if record.get("unreadable"):
        return [f"  record: not readable here ({record['unreadable']})"]
    if not record:
        return []
    lines = [f"  key: {record['key'] if record.get('key') is not None else 'none'}"]
    size = record.get("size", 0)
    if record.get("decoded") is not None:
        lines.append(f"  record (decoded, {size} bytes):")
        body = str(record["decoded"]).splitlines()
    elif record.get("text") is not None:
        lines.append(f"  record (not of the topic's schema; UTF-8 text, {size} bytes):")
        body = str(record["text"]).splitlines()
    else:
        lines.append(f"  record (does not decode, not text; hex, {size} bytes):")
        body = str(record.get("hex") or "").splitlines()
        if len(body) > HEX_LINES:
            body = [*body[:HEX_LINES], f"... ({len(body) - HEX_LINES} more lines: see the console)"]
    lines.extend(printable(f"    {line}") for line in body)
    for key, value in record.get("headers") or []:
        lines.append(printable(f"  header {key}: {value}"))
    return lines


def _replay(client: AdminClient, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"reason": args.reason, "force": args.force}
    if args.requested_by:
        body["replayed_by"] = args.requested_by
    done = client.call("POST", f"/dead-letters/{args.id}/replay", body=body)
    print(
        f"dead letter {done['dead_letter']} replayed to {done['topic']}/{done['partition']}/{done['offset']} "
        f"by {done['replayed_by']} at {done['replayed_at']}: {done['reason']}"
    )
    return 0


def main(argv: list[str]) -> int:
    """`dispersion dlq`."""
    args = parser().parse_args(argv)
    try:
        client = AdminClient.from_args(args)
        return {"list": _list, "show": _show, "replay": _replay}[args.action](client, args)
    except CliError as exc:
        print(f"dispersion dlq: {exc}", file=sys.stderr)
        return 2
    except AdminRefusalError as exc:
        print(f"dispersion dlq: {exc}", file=sys.stderr)
        return 2 if exc.status == 400 else 1
