"""A child process for the flow A kill tests: runs one flow through a real engine on the test's store and bank,
and SIGKILLs itself (no cleanup, no lease release) when the engine reaches the named point: a checkpoint of
`FileFlow` (`create_payment:after`, ...) or a bank call (`poll:after`, see test_engine_crashes.bank_point).

    python file_engine_child.py < '{"url": ..., "schema": ..., "key": ..., "sandbox_url": ..., "public_url": ...,
                                    "client_id": ..., "client_secret": ..., "signing_key": ..., "now": ...,
                                    "point": ..., "batch_id": ...}'

The bank's clock is the parent's manual clock, which does not move while the child runs, so the child's clock is
fixed at the parent's `now`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import datetime

from bank_support import integration_table, processor_transport
from engine_support import instant_sleep
from test_engine_crashes import SETTINGS, Tripwire

from processor.cli.config import Config
from processor.engine.assembly import build_engine
from processor.store import Cipher, Store


class FixedClock:
    """The parent's clock at the moment it started this child."""

    def __init__(self, now: datetime) -> None:
        self.moment = now

    def now(self) -> datetime:
        return self.moment


async def main(args: dict[str, str]) -> int:
    store = Store.open(
        args["url"], cipher=Cipher.from_text(args["key"]), schema=args.get("schema"), migrate_schema=False
    )
    point = args["point"]

    def hit(at: str, flow_id: str = "") -> None:
        if at == point:
            os.kill(os.getpid(), signal.SIGKILL)

    table = integration_table(
        args["sandbox_url"],
        client_id=args["client_id"],
        client_secret=args["client_secret"],
        redirect_uri=args["public_url"] + "/callback",
        signing_key=args["signing_key"],
        retry={"max_attempts": 3, "base_delay": 0.01, "max_delay": 0.05, "max_elapsed": 5, "max_retry_after": 0},
        timeouts={"read": 2.0},
    )
    config = Config(processor={"public_url": args["public_url"]}, integrations={"sandbox": table})
    engine = build_engine(
        config,
        store,
        clock=FixedClock(datetime.fromisoformat(args["now"])),
        settings=SETTINGS,
        checkpoint=hit,
        bank_options={"sleep": instant_sleep, "transport": Tripwire(processor_transport(), hit)},
    )
    owner = f"child-{os.getpid()}"
    for _ in range(10):
        flow = await engine.file_flow.acquire(args["batch_id"], owner=owner)
        if flow is None:
            break
        await engine.file_flow.run(flow, owner=owner)
    print("the point was never reached", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(json.loads(sys.stdin.read()))))
