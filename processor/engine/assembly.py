"""Wiring the engine from a configuration: context, flow kinds, authorizer, workers, callback API.

    engine = build_engine(config, store)
    worker = engine.worker()                  # claims due flows of every registered source
    app = callback_app(engine)                # processor.api: the callback API (approval links, redirect)
    ...
    await engine.aclose()

Another flow kind plugs in with `engine.kinds.register(kind, hooks)` and `engine.add_source(source)`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from processor.bank.integration import Integration
from processor.domain.kinds import Kind
from processor.domain.time import Clock, SystemClock
from processor.engine.authorization import Authorizer, FlowKinds
from processor.engine.banks import BankPool
from processor.engine.context import Checkpoint, EngineContext, _no_checkpoint
from processor.engine.file_flow import FileAuthorizationHooks, FileFlow
from processor.engine.settings import EngineSettings
from processor.engine.worker import Worker, WorkSource
from processor.store import Store


class EngineConfig(Protocol):
    """What the engine needs of the deployment's configuration (`processor.cli.config.Config` provides it)."""

    @property
    def integrations(self) -> Mapping[str, Integration]:
        """The bank integrations by name."""
        ...

    @property
    def public_url(self) -> str:
        """The callback API's public address."""
        ...

    @property
    def engine(self) -> EngineSettings:
        """The `[engine]` tunables."""
        ...


@dataclass
class Engine:
    """The assembled engine of one process."""

    config: EngineConfig
    ctx: EngineContext
    kinds: FlowKinds
    file_flow: FileFlow
    authorizer: Authorizer
    sources: list[WorkSource] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)

    def add_source(self, source: WorkSource) -> None:
        """Run another kind of work in this engine's workers (created afterwards)."""
        self.sources.append(source)

    def worker(self, *, keys: Collection[str] | None = None, owner: str | None = None) -> Worker:
        """A worker over every source, with the configured concurrency, lease and idle interval."""
        s = self.ctx.settings
        worker = Worker(
            self.sources,
            owner=owner,
            concurrency=s.concurrency,
            idle_interval=s.idle_interval,
            lease_seconds=s.lease_seconds,
            keys=keys,
        )
        self.workers.append(worker)
        return worker

    def wake(self) -> None:
        """Wake every worker (work became due now)."""
        for worker in self.workers:
            worker.wake()

    def redirect_paths(self) -> set[str]:
        """The path parts of every integration's redirect URI."""
        return {urlsplit(i.redirect_uri).path or "/" for i in self.config.integrations.values()}

    async def verify_banks(self, *, wait: float = 15.0) -> dict[str, str]:
        """Discovery for every integration now; `IssuerMismatch` means: refuse to start (see `BankPool.verify`)."""
        return await self.ctx.banks.verify(wait=wait)

    async def aclose(self) -> None:
        """Close the bank clients (the store is the caller's)."""
        await self.ctx.banks.aclose()


def build_engine(
    config: EngineConfig,
    store: Store,
    *,
    clock: Clock | None = None,
    settings: EngineSettings | None = None,
    checkpoint: Checkpoint = _no_checkpoint,
    bank_options: dict[str, Any] | None = None,
) -> Engine:
    """Assemble the engine: the file kind is registered and its flows are a work source."""
    clock = clock or SystemClock()
    settings = settings or config.engine
    banks = BankPool(config.integrations, clock=clock, **(bank_options or {}))
    ctx = EngineContext(
        store=store,
        banks=banks,
        public_url=config.public_url,
        settings=settings,
        clock=clock,
        checkpoint=checkpoint,
    )
    kinds = FlowKinds()
    kinds.register(Kind.FILE, FileAuthorizationHooks(ctx))
    file_flow = FileFlow(ctx)
    engine = Engine(
        config=config,
        ctx=ctx,
        kinds=kinds,
        file_flow=file_flow,
        authorizer=Authorizer(store, banks, kinds, clock=clock, settings=settings),
        sources=[file_flow],
    )
    ctx.notify = engine.wake
    engine.authorizer.notify = engine.wake
    return engine
