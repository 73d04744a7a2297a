"""A child process for the VRP kill test: submits one payment through a real engine and dies (`os._exit`, no
cleanup, like a SIGKILL) when the engine reaches the named checkpoint.

    python vrp_engine_child.py '{"url": ..., "schema": ..., "key": ..., "dir": ..., "offset": ..., "point": ...,
                                 "payment": {...}}'
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

from vrp_engine_support import ShiftedClock, flow_b_config, instant_sleep

from processor.engine.assembly import build_engine
from processor.engine.settings import EngineSettings
from processor.engine.vrp import attach_vrp
from processor.store import Cipher, Store

KILLED = 17


async def main(args: dict[str, object]) -> int:
    store = Store.open(
        str(args["url"]),
        cipher=Cipher.from_text(str(args["key"])),
        schema=None if args["schema"] is None else str(args["schema"]),
        migrate_schema=False,
    )
    point = str(args["point"])

    def checkpoint(at: str, flow_id: str) -> None:
        if at == point:
            os._exit(KILLED)

    engine = build_engine(
        flow_b_config(Path(str(args["dir"]))),
        store,
        clock=ShiftedClock(timedelta(seconds=float(str(args["offset"])))),
        settings=EngineSettings(lease_seconds=30),
        checkpoint=checkpoint,
        bank_options={"sleep": instant_sleep},
    )
    vrp = attach_vrp(engine)
    payment = args["payment"]
    assert isinstance(payment, dict)
    await vrp.submit_payment(payment)
    return 0  # not reached when the checkpoint fires


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(json.loads(sys.argv[1]))))
