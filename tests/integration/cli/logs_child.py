"""A child process for test_logs_secrets: the processor's real logging (`configure_logging(FORMAT)`) around an
engine rig whose redirect handling fails with a busy store. Prints the redirect's parameters and the Basic
credential (what must not be logged) as JSON on stdout; the logs go to stderr.

    python logs_child.py json|console STORE_URL
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

from engine_support import batch, engine_rig

from processor.cli.logs import configure_logging
from processor.domain.file_states import FlowState
from processor.store import Cipher, Store, StoreBusyError, generate_key


async def main(fmt: str, url: str) -> int:
    configure_logging(fmt, instance="p-1")
    store = Store.open(url, cipher=Cipher.from_text(generate_key()))
    try:
        async with engine_rig(store) as rig:
            document = batch()
            batch_id = str(document["batch_id"])
            await rig.submit(document)
            await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
            approval = await rig.approve(rig.approval_url(batch_id), deliver=False)

            async def busy(*args: Any, **kwargs: Any) -> Any:
                raise StoreBusyError(f"database is locked while handling {approval.redirect}")

            rig.engine.authorizer.complete = busy  # type: ignore[method-assign]
            browser = await rig.http.get(approval.redirect, headers={"accept": "text/html"})
            delivery = await rig.http.post(approval.redirect.split("?")[0], json={"redirect_url": approval.redirect})
            # A standard-library logger, as librdkafka's lines arrive through confluent-kafka.
            logging.getLogger("dispersion.kafka.relay").warning("request failed: GET %s", approval.redirect)
            basic = [i.basic_credential().reveal() for i in rig.engine.config.integrations.values()]
    finally:
        store.close()
    print(json.dumps({"query": approval.query, "basic": basic, "answers": [browser.status_code, delivery.status_code]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1], sys.argv[2])))
