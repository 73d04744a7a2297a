"""`dispersion sandbox ...`: serve the sandbox bank, or write a fresh key pair and config (`init`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sandbox.clients import ClientRegistry
from sandbox.config import SandboxConfig


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion sandbox`."""
    d = SandboxConfig()
    p = argparse.ArgumentParser(prog="dispersion sandbox", description="Run the sandbox bank.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8700)
    p.add_argument("--clients", required=True, help="clients file (JSON, see DESIGN.md)")
    p.add_argument("--base-url", help="public base address (default http://HOST:PORT)")
    p.add_argument("--financial-id", default=d.financial_id, help="participant id expected in x-fapi-financial-id")
    p.add_argument("--db", help="SQLite file so state survives a restart (default: memory)")
    p.add_argument("--client-credentials-ttl", type=int, default=d.client_credentials_ttl)
    p.add_argument("--auth-code-token-ttl", type=int, default=d.auth_code_token_ttl)
    p.add_argument("--refresh-token-ttl", type=int, default=d.refresh_token_ttl)
    p.add_argument("--par-ttl", type=int, default=d.par_ttl)
    p.add_argument("--code-ttl", type=int, default=d.code_ttl)
    p.add_argument(
        "--file-payment-delay",
        type=float,
        default=d.file_payment_delay,
        help="seconds a file payment stays InitiationPending",
    )
    p.add_argument("--vrp-delay", type=float, default=d.vrp_delay, help="seconds a domestic VRP stays Pending")
    p.add_argument("--faults", help="fault plan (JSON file, see docs/sandbox.md)")
    p.add_argument(
        "--admin",
        action="store_true",
        help="serve /__sandbox/* (clock, faults, counts) for tests; never in front of users",
    )
    p.add_argument("--log-level", default="warning")
    return p


def config_from_args(args: argparse.Namespace) -> SandboxConfig:
    """Settings from parsed arguments."""
    return SandboxConfig(
        base_url=args.base_url or f"http://{args.host}:{args.port}",
        financial_id=args.financial_id,
        client_credentials_ttl=args.client_credentials_ttl,
        auth_code_token_ttl=args.auth_code_token_ttl,
        refresh_token_ttl=args.refresh_token_ttl,
        par_ttl=args.par_ttl,
        code_ttl=args.code_ttl,
        file_payment_delay=args.file_payment_delay,
        vrp_delay=args.vrp_delay,
        admin=args.admin,
        db_path=args.db,
    )


def serve(argv: list[str]) -> int:
    """Run the sandbox until interrupted."""
    import uvicorn

    from sandbox.app import create_app
    from sandbox.faults import FaultPlan
    from sandbox.state import Bank
    from sandbox.store import Store

    args = build_parser().parse_args(argv)
    try:
        clients = ClientRegistry.load(args.clients)
        faults = FaultPlan.from_json(json.loads(Path(args.faults).read_text())) if args.faults else FaultPlan()
    except (OSError, ValueError) as exc:
        print(f"dispersion sandbox: {exc}", file=sys.stderr)
        return 2
    config = config_from_args(args)
    bank = Bank(config=config, clients=clients, store=Store(config.db_path), faults=faults)
    print(f"sandbox bank serving issuer and resource server at {config.issuer}", flush=True)
    uvicorn.run(create_app(bank), host=args.host, port=args.port, log_level=args.log_level)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: `init DIR` or serve."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "init":
        from sandbox.init import main as init_main

        return init_main(argv[1:])
    return serve(argv)
