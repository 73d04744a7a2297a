"""The file payloads of flow A's batches, built from the stored batch when a step needs them and cached for a few
flows (A1 and A2 of one flow build it once)."""

from __future__ import annotations

from collections import OrderedDict
from functools import cached_property

import structlog

from processor.domain.batch import PayrollBatch, batch_from_stored
from processor.domain.payload import FilePayload, prepare_file_payload, upload_file_json
from processor.domain.validation import validated
from processor.engine.file_events import origin_currency
from processor.store import Flow, Store

log = structlog.get_logger("processor.engine.file")


class Prepared:
    """A flow's file payload, and the `Data.Initiation` of A1 and A3 as JSON bytes in parts (the canonical file
    itself between two small pieces: never a second copy of a large file; the bank client joins them once, into
    the request body), built on first use: A2 never needs them."""

    def __init__(self, payload: FilePayload) -> None:
        self.payload = payload
        self.currency = payload.origin.currency
        self.transactions = len(payload.source.batch.transactions)

    @cached_property
    def initiation(self) -> tuple[bytes, bytes, bytes]:
        return self.payload.initiation_parts()


class FilePayloads:
    """Payloads by (batch id, payload hash), most recent last, holding at most `cache_transactions` transfers in
    all: enough for every flow in flight at month end (32 x a few hundred) to build its payload once for A1 and
    A2, while a very large batch is never kept between steps (a 100,000-transfer payload is about 160 MiB)."""

    def __init__(self, store: Store, *, cache_transactions: int = 20_000) -> None:
        self.store = store
        self._cache: OrderedDict[tuple[str, str], Prepared] = OrderedDict()
        self._cache_transactions = cache_transactions
        self._cached_transactions = 0

    async def prepared(self, flow: Flow) -> Prepared | None:
        """The file payload of the flow's batch (validated again, deterministic), cached for a few flows."""
        key = (flow.batch_id, flow.payload_sha256)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        batch = await self.batch(flow)
        if batch is None:
            return None
        try:
            payload = prepare_file_payload(batch)
        except ValueError:
            log.exception("stored batch no longer builds a payload", batch_id=flow.batch_id)
            return None
        del batch  # the payload holds what it needs of it
        prepared = Prepared(payload)
        size = prepared.transactions
        if size <= self._cache_transactions:
            self._cache[key] = prepared
            self._cached_transactions += size
            while self._cached_transactions > self._cache_transactions:
                _, dropped = self._cache.popitem(last=False)
                self._cached_transactions -= dropped.transactions
        return prepared

    async def upload(self, flow: Flow, consent_id: str) -> tuple[bytes, str] | None:
        """A2's body (the file with every reference set to the consent id) and the batch's currency. From the
        cached payload when there is one; else rendered straight from the stored batch, which a batch too large
        to cache always is: its canonical file (39 MiB for 100,000 transfers) is then never built beside the
        upload's bytes, nor the validated batch kept while they are made."""
        key = (flow.batch_id, flow.payload_sha256)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached.payload.upload_json(consent_id), cached.currency
        batch = await self.batch(flow)
        if batch is None:
            return None
        currency = batch.origin.currency
        try:
            body = upload_file_json(validated(batch), consent_id)
        except ValueError:
            log.exception("stored batch no longer builds a payload", batch_id=flow.batch_id)
            return None
        return body, currency

    async def batch(self, flow: Flow) -> PayrollBatch | None:
        """The flow's batch for the per-transaction results (from the cache, or parsed from the store without
        building the file payload again)."""
        cached = self._cache.get((flow.batch_id, flow.payload_sha256))
        if cached is not None:
            return cached.payload.source.batch
        text = await self.store.arun(lambda tx: tx.flows.payload(flow.batch_id), write=False)
        if text is None:
            return None
        try:
            return batch_from_stored(text)  # the text (23 MiB for 100,000 transfers) is let go of on return
        except ValueError:
            log.exception("stored batch can no longer be read", batch_id=flow.batch_id)
            return None

    async def currency(self, flow: Flow) -> str | None:
        """The origin account's currency of the flow's batch (from the cache, or read from the stored text)."""
        cached = self._cache.get((flow.batch_id, flow.payload_sha256))
        if cached is not None:
            return cached.currency
        text = await self.store.arun(lambda tx: tx.flows.payload(flow.batch_id), write=False)
        return None if text is None else origin_currency(text)
