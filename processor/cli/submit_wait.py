"""`dispersion submit` waits for the processor's verdict on the message it produced (unless `--no-wait`), asking
the admin API (`GET /admin/intake?topic=T&partition=P&offset=O`) until the processor has decided or `--wait`
seconds passed, and exits accordingly:

| verdict | output | exit |
| --- | --- | --- |
| accepted (a new batch, or a new attempt of an ended one) | `accepted: ...` | 0 |
| duplicate: the same content as a batch already received | `same batch: ...` (its state), nothing is paid twice | 0 |
| invalid | every problem on standard error | 1 |
| conflict: the batch id was received with other content | the difference on standard error | 5 |
| held as a possible duplicate payroll | which batch, the figures, how to confirm | 6 |
| no verdict within `--wait` (processor down or unreachable) | what is known | 7 |

The admin API's address and token are found as `retry-failed` finds them (`--url`, `[admin] url`,
`$DISPERSION_ADMIN_TOKEN` or `[admin] token_env`). Without a token `submit` cannot ask: it says so on standard
error and exits 0 once Kafka took the batch, as with `--no-wait`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Final

from processor.cli.admin_client import AdminClient, AdminRefusalError
from processor.cli.common import CliError
from processor.domain.text import printable

EXIT_CONFLICT: Final = 5
EXIT_HELD: Final = 6
EXIT_NO_VERDICT: Final = 7
EXIT_INVALID: Final = 1


def add_wait_arguments(parser: argparse.ArgumentParser) -> None:
    """`--no-wait`, `--wait S`, `--url`, `--allow-duplicate-of ID`."""
    parser.add_argument("--no-wait", action="store_true", help="return once Kafka took the batch; no verdict")
    parser.add_argument(
        "--wait", type=float, default=60.0, metavar="S", help="seconds to wait for the processor's verdict (60)"
    )
    parser.add_argument("--url", help="the processor's admin API (default: [admin] url, else [processor] public_url)")
    parser.add_argument(
        "--allow-duplicate-of",
        metavar="ID",
        help="this batch pays what batch ID pays, on purpose: do not hold it as a possible duplicate of ID",
    )


def _ask(client: AdminClient, where: dict[str, Any], deadline: float) -> dict[str, Any] | None:
    """The verdict, once the processor has one; None when `deadline` passed first with the processor answering
    "not yet". When the last attempt could not reach the admin API, its error is raised instead: how long the
    refusal took to arrive must not decide which of the two the operator is told."""
    while True:
        try:
            answer: dict[str, Any] = client.call("GET", "/intake", params=where)
            return answer
        except AdminRefusalError as exc:
            if exc.status != 404:
                raise
            unreachable: CliError | None = None
        except CliError as exc:
            unreachable = exc
        if time.monotonic() >= deadline:
            if unreachable is not None:
                raise unreachable
            return None
        time.sleep(0.3)


def verdict_client(args: argparse.Namespace) -> AdminClient | None:
    """The admin API client to ask for the verdict; None without an admin token (then `submit` cannot wait and
    says so)."""
    try:
        return AdminClient.from_args(argparse.Namespace(config=args.config, url=args.url, timeout=10.0))
    except CliError as exc:
        if "no admin token" in str(exc):
            return None
        raise


def await_verdict(
    args: argparse.Namespace, client: AdminClient, batch_id: str, topic: str, partition: int, offset: int
) -> int:
    """Wait for the verdict and say it (see the module docstring)."""
    where = {"topic": topic, "partition": partition, "offset": offset}
    try:
        verdict = _ask(client, where, time.monotonic() + max(args.wait, 0.0))
    except (CliError, AdminRefusalError) as exc:
        print(
            f"dispersion submit: the processor's verdict cannot be asked ({exc}); the batch is on Kafka. "
            f"Follow it: dispersion status --batch {batch_id} (or submit with --no-wait)",
            file=sys.stderr,
        )
        return EXIT_NO_VERDICT
    if verdict is None:
        print(
            f"dispersion submit: no verdict from the processor within {args.wait:g} s; the batch is on Kafka and "
            f"will be decided when a processor reads it. Follow it: dispersion status --batch {batch_id}",
            file=sys.stderr,
        )
        return EXIT_NO_VERDICT
    return _say(verdict, batch_id)


def _say(verdict: dict[str, Any], batch_id: str) -> int:
    kind = str(verdict.get("verdict"))
    detail = printable(str(verdict.get("detail") or ""))
    attempt = verdict.get("attempt") or 1
    if kind == "accepted":
        how = f"as attempt {attempt} (its earlier attempt ended)" if detail == "a new attempt" else "a new batch"
        print(f"accepted by the processor: {batch_id}, {how}")
        return 0
    if kind == "duplicate":
        print(
            f"same batch: {batch_id} was already received with this content ({detail}); nothing new, paid at most once"
        )
        return 0
    if kind == "held":
        print(
            f"dispersion submit: held: {detail}. Nothing goes to the bank until a person confirms it: "
            f"dispersion confirm-duplicate --batch {batch_id} (or the console's batch page)",
            file=sys.stderr,
        )
        return EXIT_HELD
    if kind == "conflict":
        print(f"dispersion submit: conflict: {detail}", file=sys.stderr)
        return EXIT_CONFLICT
    print(f"dispersion submit: the processor refused batch {batch_id} as INVALID:", file=sys.stderr)
    for problem in detail.split("; "):  # the processor joins the problems so (no problem's text holds "; ")
        print(f"  {problem}", file=sys.stderr)
    return EXIT_INVALID
