"""`dispersion sandbox ...`: serve the sandbox bank, or write a fresh key pair and config (`init`)."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from sandbox.clients import ClientRegistry
from sandbox.config import SandboxConfig

# The bank's event loop stays asyncio's, as every figure of it was measured (uvicorn's "auto" would take uvloop,
# installed for the processor): its CPU is the yardstick the processor's is compared with (docs/benchmarks.md).
_LOOP = "asyncio"


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion sandbox`."""
    d = SandboxConfig()
    p = argparse.ArgumentParser(prog="dispersion sandbox", description="Run the sandbox bank.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8700)
    p.add_argument(
        "--listen-fd",
        type=int,
        metavar="FD",
        help="serve on this inherited listening socket instead of HOST:PORT (a starter that holds the port)",
    )
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
    p.add_argument(
        "--max-body-mb",
        type=_positive_mib,
        default=d.max_body_bytes,
        dest="max_body_bytes",
        metavar="MIB",
        help=f"largest request body accepted, in MiB (default {d.max_body_bytes // 2**20})",
    )
    p.add_argument("--faults", help="fault plan (JSON file, see docs/sandbox.md)")
    p.add_argument(
        "--admin",
        action="store_true",
        help="serve /__sandbox/* (clock, faults, counts) for tests; never in front of users",
    )
    p.add_argument("--log-level", default="warning")
    return p


def _positive_mib(text: str) -> int:
    """`--max-body-mb`: a positive whole number of MiB, as bytes."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of MiB: {text!r}") from None
    if not 1 <= value <= 4096:
        raise argparse.ArgumentTypeError("must be between 1 and 4096 MiB")
    return value * 2**20


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
        max_body_bytes=args.max_body_bytes,
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
    sock = None
    if args.listen_fd is not None:
        # The starter held the port (no other program could take it meanwhile); the base URL names its address.
        sock = socket.socket(fileno=args.listen_fd)
        args.host, args.port = sock.getsockname()[:2]
    try:
        clients = ClientRegistry.load(args.clients)
        faults = FaultPlan.from_json(json.loads(Path(args.faults).read_text())) if args.faults else FaultPlan()
    except (OSError, ValueError) as exc:
        print(f"dispersion sandbox: {exc}", file=sys.stderr)
        return 2
    config = config_from_args(args)
    bank = Bank(config=config, clients=clients, store=Store(config.db_path), faults=faults)
    print(f"sandbox bank serving issuer and resource server at {config.issuer}", flush=True)
    if sock is None:
        uvicorn.run(create_app(bank), host=args.host, port=args.port, log_level=args.log_level, loop=_LOOP)
    else:
        uvicorn.Server(uvicorn.Config(create_app(bank), log_level=args.log_level, loop=_LOOP)).run(sockets=[sock])
    return 0


def file_hash(argv: list[str]) -> int:
    """`dispersion sandbox file-hash PAYLOAD.json`: print the FileHash a file payment consent must carry.

    The hash is base64(SHA-256(RFC 8785 form of the payload with every `transferInfo.reference` blanked)),
    computed with the sandbox's own functions (sandbox.filecheck), so the payload may be given before or
    after the consent id was written into its references. The payload is checked as the sandbox checks
    `SupplementaryData`; a problem is reported on stderr with exit status 1 (2 for unreadable input).
    """
    from sandbox.filecheck import CheckError, check_payload, payload_hash
    from sandbox.jsonutil import loads

    p = argparse.ArgumentParser(
        prog="dispersion sandbox file-hash",
        description="Print the FileHash (base64 SHA-256 of the RFC 8785 form, references blank) of a file payload.",
    )
    p.add_argument("payload", help='file payload JSON {"data": {"transaction": [...]}} ("-" reads stdin)')
    args = p.parse_args(argv)
    try:
        raw = sys.stdin.buffer.read() if args.payload == "-" else Path(args.payload).read_bytes()
        payload = loads(raw)  # fractions as Decimal: the hash depends on exact amounts, never on floats
    except (OSError, ValueError, RecursionError) as exc:
        print(f"dispersion sandbox file-hash: cannot read {args.payload}: {exc}", file=sys.stderr)
        return 2
    blanked = _blank_references(payload)
    try:
        check_payload(blanked, "", "", SandboxConfig().max_transactions)
    except CheckError as exc:
        print(f"dispersion sandbox file-hash: {exc}", file=sys.stderr)
        return 1
    print(payload_hash(blanked))
    return 0


def _blank_references(payload: object) -> object:
    """A copy with every `transferInfo.reference` that is present set to ""; other shapes pass unchanged."""
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), dict):
        return payload
    transactions = payload["data"].get("transaction")
    if not isinstance(transactions, list):
        return payload
    out = []
    for tx in transactions:
        info = tx.get("transferInfo") if isinstance(tx, dict) else None
        if isinstance(info, dict) and "reference" in info:
            tx = {**tx, "transferInfo": {**info, "reference": ""}}
        out.append(tx)
    return {**payload, "data": {**payload["data"], "transaction": out}}


def main(argv: list[str] | None = None) -> int:
    """Entry point: `init DIR`, `file-hash PAYLOAD.json` or serve."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "init":
        from sandbox.init import main as init_main

        return init_main(argv[1:])
    if argv and argv[0] == "file-hash":
        return file_hash(argv[1:])
    return serve(argv)
