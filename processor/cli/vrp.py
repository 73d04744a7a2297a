"""`dispersion vrp ...`: flow B from the command line, without Kafka (docs/vrp.md).

    dispersion vrp mandate --config C mandate.json   # B1 once per mandate_id; prints the approval link, serves
                                                     # the callback API and waits for the approver's decision
    dispersion vrp pay --config C payment.json       # checks the mandate's limits here, then B2, and follows the
                                                     # payment to AcceptedSettlementCompleted
    dispersion vrp status --config C MANDATE_ID      # the mandate, its payments and its status events

The JSON files hold what a `vrp.mandates` / `vrp.payments` record holds (amounts as decimal strings or numbers,
instants as ISO 8601 with an offset). State lives in the configured store (`[processor] store`), so a second
run with the same file is a no-op and an interrupted run resumes; tokens and PKCE verifiers are encrypted with
`DISPERSION_STORE_KEY` (see docs/store.md).

Exit status: 0 done (mandate AUTHORIZED, payment COMPLETED); 1 refused or ended otherwise (REJECTED, EXPIRED,
INVALID, LIMIT_EXCEEDED, ...); 2 bad usage or input; 3 still waiting when `--wait` ran out (run it again later:
the state is kept).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from processor.cli.common import (
    DONE,
    ENDED,
    LISTEN_FD_HELP,
    USAGE,
    WAITING,
    CliError,
    callback_api,
    configure_command_logging,
    open_engine,
)
from processor.cli.config import Config
from processor.domain.exact_json import loads_decimal
from processor.domain.settings import ConfigError
from processor.domain.time import iso_ms
from processor.domain.vrp_requests import InvalidRequestError
from processor.domain.vrp_states import Mandate, mandate_terminal, payment_terminal
from processor.engine.assembly import Engine
from processor.engine.vrp import VrpEngine, attach_vrp
from processor.engine.vrp_views import amount_text
from processor.store import NotFoundError, Store, StoreError, VrpMandate, VrpPayment
from schemas.topics import VRP_STATUS_TOPIC


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion vrp`."""
    parser = argparse.ArgumentParser(prog="dispersion vrp", description="Variable recurring payments (flow B).")
    parser.add_argument("--verbose", action="store_true", help="log the engine's steps to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config", type=Path, help="configuration file (default: $DISPERSION_CONFIG or ./dispersion.toml)"
        )

    mandate = sub.add_parser("mandate", help="create a VRP mandate (consent) and wait for its authorization")
    common(mandate)
    mandate.add_argument("request", type=Path, help="mandate request JSON (the vrp.mandates fields); - reads stdin")
    mandate.add_argument("--wait", type=float, default=3600.0, help="seconds to wait for the approver (default 3600)")
    mandate.add_argument("--no-wait", action="store_true", help="print the approval link and return")
    mandate.add_argument(
        "--listen",
        help="HOST:PORT to serve the callback API on while waiting (default: from [processor] public_url)",
    )
    mandate.add_argument("--listen-fd", type=int, metavar="FD", help=LISTEN_FD_HELP)
    mandate.add_argument(
        "--no-serve",
        action="store_true",
        help="do not serve the callback API here (another `dispersion` process serves it on the same store)",
    )

    pay = sub.add_parser("pay", help="pay under an authorised mandate and follow the payment to its end")
    common(pay)
    pay.add_argument("instruction", type=Path, help="payment instruction JSON (the vrp.payments fields); - reads stdin")
    pay.add_argument("--wait", type=float, default=600.0, help="seconds to follow the payment (default 600)")

    status = sub.add_parser("status", help="show a mandate, its payments and its status events")
    common(status)
    status.add_argument("mandate_id")
    status.add_argument("--json", action="store_true", help="print the status events as JSON lines")
    return parser


def main(argv: Sequence[str]) -> int:
    """Run `dispersion vrp ...`."""
    args = build_parser().parse_args(list(argv))
    configure_command_logging(args.verbose)
    try:
        return asyncio.run(_run(args))
    except (CliError, ConfigError, StoreError, InvalidRequestError) as exc:
        print(f"dispersion vrp: {exc}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        print("interrupted; the state is kept: run the same command again to resume", file=sys.stderr)
        return WAITING


def read_document(path: Path, stdin: TextIO | None = None) -> dict[str, Any]:
    """A JSON object from a file (or stdin for `-`), fractions as Decimal so amounts stay exact."""
    try:
        text = (stdin or sys.stdin).read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        document = loads_decimal(text)
    except ValueError as exc:
        raise CliError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CliError(f"{path} must hold a JSON object")
    return document


@dataclass(frozen=True)
class _Parts:
    config: Config
    store: Store
    engine: Engine
    vrp: VrpEngine


@contextlib.asynccontextmanager
async def _engine(config_path: Path | None, *, verify: bool = True) -> AsyncIterator[_Parts]:
    async with open_engine(config_path, verify=verify) as (config, store, engine):
        yield _Parts(config, store, engine, attach_vrp(engine))


async def _run(args: argparse.Namespace) -> int:
    if args.command == "mandate":
        return await mandate_command(args)
    if args.command == "pay":
        return await pay_command(args)
    return await status_command(args)


# -- mandate ----------------------------------------------------------------------------------------------------


async def mandate_command(args: argparse.Namespace) -> int:
    """Create the mandate's consent, print the approval link, wait for the approver."""
    document = read_document(args.request)
    async with _engine(args.config) as parts:
        config, engine, vrp = parts.config, parts.engine, parts.vrp
        _defaults(document, config, source="dispersion-vrp-cli")
        outcome = await vrp.submit_mandate(document)
        mandate = outcome.mandate
        if outcome.problems:
            print(f"mandate {mandate.mandate_id}: INVALID")
            for problem in outcome.problems:
                print(f"  {problem}")
            return ENDED
        if not outcome.created:
            note = "" if outcome.same_document else " (the request differs from the stored one; the stored one counts)"
            print(f"mandate {mandate.mandate_id} already exists: {mandate.state}{note}")
        if args.no_wait or _settled(mandate):
            return _report_mandate(vrp, mandate)
        async with callback_api(engine, config, args.listen, serve=not args.no_serve, listen_fd=args.listen_fd):
            mandate = await _wait_for_mandate(vrp, mandate.mandate_id, args.wait)
        return _report_mandate(vrp, mandate)


def _defaults(document: dict[str, Any], config: Config, *, source: str) -> None:
    if "integration" not in document and len(config.integrations) == 1:
        document["integration"] = next(iter(config.integrations))
    document.setdefault("requested_at", iso_ms(datetime.now(UTC)))
    document.setdefault("source", source)


def _settled(mandate: VrpMandate) -> bool:
    return mandate.state == Mandate.AUTHORIZED or mandate_terminal(mandate.state)


async def _wait_for_mandate(vrp: VrpEngine, mandate_id: str, seconds: float) -> VrpMandate:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    shown = False
    while True:
        mandate = await vrp.advance_mandate(mandate_id)
        if mandate.state == Mandate.AWAITING_AUTHORIZATION and not shown:
            print(f"mandate {mandate_id}: consent {mandate.consent_id} awaits authorization")
            print(f"approval link: {vrp.approval_url(mandate)}")
            if mandate.authorization_deadline is not None:
                print(f"the link works until {iso_ms(mandate.authorization_deadline)}")
            print("waiting for the approver...", flush=True)
            shown = True
        if _settled(mandate) or loop.time() >= deadline:
            return mandate
        await asyncio.sleep(0.5)


def _report_mandate(vrp: VrpEngine, mandate: VrpMandate) -> int:
    state = mandate.state
    if state == Mandate.AUTHORIZED:
        print(f"mandate {mandate.mandate_id}: AUTHORIZED (consent {mandate.consent_id})")
        return DONE
    if mandate_terminal(state):
        reason = f": {mandate.last_error}" if mandate.last_error else ""
        print(f"mandate {mandate.mandate_id}: {state}{reason}")
        return ENDED
    if state in (Mandate.AWAITING_AUTHORIZATION, Mandate.REAUTHORIZATION_REQUIRED):
        print(f"mandate {mandate.mandate_id}: {state} (consent {mandate.consent_id})")
        print(f"approval link: {vrp.approval_url(mandate)}")
    else:
        note = f" (last error: {mandate.last_error})" if mandate.last_error else ""
        print(f"mandate {mandate.mandate_id}: {state}{note}; run the command again to continue")
    return WAITING


# -- pay --------------------------------------------------------------------------------------------------------


async def pay_command(args: argparse.Namespace) -> int:
    """Check the payment against its mandate here, pay it, follow it to its end."""
    document = read_document(args.instruction)
    document.setdefault("requested_at", iso_ms(datetime.now(UTC)))
    async with _engine(args.config) as parts:
        vrp = parts.vrp
        outcome = await vrp.submit_payment(document)
        payment = outcome.payment
        if payment is None:
            print(f"payment {document.get('payment_id')}: INVALID: {outcome.reason}")
            return ENDED
        if not outcome.created:
            note = "" if outcome.same_document else " (the instruction differs from the stored one; nothing was paid)"
            print(f"payment {payment.payment_id} already exists: {payment.state}{note}")
        if not payment_terminal(payment.state):
            payment = await vrp.follow_payment(payment.payment_id, max_seconds=args.wait)
        return _report_payment(payment)


def _report_payment(payment: VrpPayment) -> int:
    parts = [f"payment {payment.payment_id}: {payment.state}", f"{payment.amount} {payment.currency}"]
    if payment.domestic_vrp_id:
        parts.append(f"domestic VRP {payment.domestic_vrp_id}")
    if payment.bank_status:
        parts.append(f"bank status {payment.bank_status}")
    print(", ".join(parts))
    if payment.last_error and payment.state != "COMPLETED":
        print(f"  reason: {payment.last_error}")
    if payment.state == "COMPLETED":
        return DONE
    return ENDED if payment_terminal(payment.state) else WAITING


# -- status -----------------------------------------------------------------------------------------------------


async def status_command(args: argparse.Namespace) -> int:
    """Print a mandate, its payments and its status events."""
    async with _engine(args.config, verify=False) as parts:  # reads the store only
        store, vrp = parts.store, parts.vrp
        try:
            mandate = await vrp.mandate(args.mandate_id)
        except NotFoundError:
            print(f"mandate {args.mandate_id} is unknown", file=sys.stderr)
            return ENDED
        payments = await vrp.payments_of(mandate.mandate_id)
        events = await store.arun(lambda tx: tx.outbox.events(VRP_STATUS_TOPIC, mandate.mandate_id), write=False)
        if args.json:
            for event in events:
                print(json.dumps(event.payload, sort_keys=True))
            return DONE
        print(f"mandate {mandate.mandate_id}: {mandate.state} (integration {mandate.integration})")
        if mandate.consent_id:
            print(f"  consent: {mandate.consent_id} ({mandate.bank_status or 'status unknown'})")
        if mandate.state == Mandate.AWAITING_AUTHORIZATION:
            print(f"  approval link: {vrp.approval_url(mandate)}")
        if mandate.last_error:
            print(f"  last error: {mandate.last_error}")
        print(f"payments: {len(payments)}")
        for p in payments:
            extra = f" {p.domestic_vrp_id}" if p.domestic_vrp_id else ""
            print(f"  {p.payment_id}: {p.state} {amount_text(p)} {p.currency}{extra}")
        print(f"status events: {len(events)}")
        for event in events:
            payload = event.payload
            about = f" {payload['payment_id']}" if payload.get("payment_id") else ""
            reason = f": {payload['reason']}" if payload.get("reason") else ""
            print(f"  {payload.get('occurred_at')} {payload.get('status')}{about}{reason}")
        return DONE
