"""The Worker: wires the supervisor, the renewal sweep and the job runner together and runs them
as one structured unit: a root task group holds the renewal sweep and the settle batcher; the
supervisor runs beside them and fills the job group (one task per job).

Shutdown: stop claiming, let running jobs finish within the grace period while renewal keeps their
leases alive, then hand what is still held back to pending at once (fenced) and return.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator

import anyio
from redis.asyncio import Redis

from emq_worker.jobs.tasks import App
from emq_worker.observe.clock import TimeAndChance
from emq_worker.observe.http import HttpEndpoint
from emq_worker.observe.log import get_logger
from emq_worker.observe.looplag import LoopLag, warn_after_ms
from emq_worker.observe.metrics import Counters
from emq_worker.observe.sdnotify import Notifier
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.assembly import Connections, Observers, Parts, assemble
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.jobgroup import JobGroup
from emq_worker.runtime.lease import LeaseBook
from emq_worker.runtime.presence import WorkerRegistry
from emq_worker.runtime.renewal_lines import RenewalLines, renewal_connect_timeout_s
from emq_worker.runtime.state import StopSignal, WorkerState
from emq_worker.valkey.autopipeline import handler_client
from emq_worker.valkey.connection import connect
from emq_worker.valkey.failures import RETRYABLE, describe

RELEASE_TIMEOUT_S = 5.0


@contextlib.asynccontextmanager
async def worker_client(settings: WorkerSettings, given: Redis | None) -> AsyncIterator[Redis]:
    """`given`, or a client of the settings' server closed on leaving (an injected one is its
    owner's to close)."""
    if given is not None:
        yield given
        return
    client = connect(
        settings.address,
        settings.wire_version,
        socket_timeout_s=settings.socket_timeout_ms / 1000,
    )
    try:
        yield client
    finally:
        await client.aclose()


class Worker:
    def __init__(
        self,
        settings: WorkerSettings,
        app: App,
        *,
        client: Redis | None = None,
        notifier: Notifier | None = None,
        time_and_chance: TimeAndChance | None = None,
    ) -> None:
        self.settings = settings
        self.app = app
        self.counters = Counters()
        self.ready = anyio.Event()
        self._client = client
        seams = time_and_chance or TimeAndChance()
        self._clock, self._rng = seams.clock, seams.rng
        self.notifier = notifier or Notifier()
        self.presence: WorkerRegistry | None = None
        self.stop = StopSignal()
        self._root: anyio.CancelScope | None = None
        self.http: HttpEndpoint | None = None
        """The HTTP endpoint while it serves (settings.http); `http.port` is the bound port."""
        self.log = get_logger()
        self.loop_lag = LoopLag(self._clock, warn_after_ms(settings.lease_ms))

    @property
    def stopping(self) -> bool:
        return self.stop.requested

    def request_stop(self) -> None:
        """Graceful: stop claiming, finish or hand back what is held."""
        if not self.stop.requested:
            grace_ms = self.settings.grace_ms
            self.notifier.stopping(f"stopping: finishing held jobs within {grace_ms} ms")
        self.stop.request()

    def force_stop(self) -> None:
        """At once: leave held leases to the reaper."""
        self.notifier.stopping("stopping at once: held jobs are left to the reaper")
        if self._root is not None:
            self._root.cancel()

    async def run(self) -> None:
        async with worker_client(self.settings, self._client) as client:
            await self._run(client)

    async def _run(self, client: Redis) -> None:
        scripts = Scripts()
        await scripts.load_all(client)
        handlers = handler_client(client)
        lines = self._renewal_lines(scripts)
        settings = self.settings
        self.presence = WorkerRegistry(
            client, settings.queues, settings.concurrency, settings.beat_ms, settings.lease_ms
        )
        queues = {name: Queue(client, scripts, name) for name in settings.queues}
        state = WorkerState(settings, queues, self.counters, self._clock, self._rng, self.stop)
        state.handler_client = handlers
        observers = Observers(self.notifier, self.presence, self.loop_lag, lambda: self.stopping)
        parts = assemble(state, self.app, Connections(client, lines), observers)
        try:
            with anyio.CancelScope() as root:
                self._root = root
                await self._serve(parts)
        finally:
            with anyio.CancelScope(shield=True):
                if lines is not None:
                    await lines.aclose()
                if handlers is not client:  # its own batches, on the worker's connections
                    await handlers.aclose()
        self.http = None
        self.log.info("worker_stopped", forced=root.cancel_called, **self.counters.snapshot())

    def _started(self) -> None:
        settings = self.settings
        self.log.info(
            "worker_started",
            queues=list(settings.queues),
            concurrency=settings.concurrency,
            lease_ms=settings.lease_ms,
            renew_every_ms=settings.renew_interval_ms if settings.renew else 0,
            beat_ms=settings.beat_ms,
            handoff=settings.handoff,
            http=settings.http,
        )
        self.ready.set()
        self.notifier.ready(f"serving {', '.join(settings.queues)}")

    def _renewal_lines(self, scripts: Scripts) -> RenewalLines | None:
        """The renewal's own connections (renewal_lines.py); None with an injected client, whose
        pool then carries the renewals too."""
        settings = self.settings
        if self._client is not None or not settings.renew:
            return None
        dial = functools.partial(
            connect,
            settings.address,
            settings.wire_version,
            socket_timeout_s=settings.lease_ms / 1000,  # an answer later than that is no use
            connect_timeout_s=renewal_connect_timeout_s(settings.renew_interval_ms),
            max_connections=1,
        )
        return RenewalLines(dial, scripts)

    async def _serve(self, parts: Parts) -> None:
        """Beat until stopped; then give running jobs the grace period, write what finished,
        and hand back what is still held."""
        settings, book = self.settings, parts.state.book
        async with anyio.create_task_group() as background:
            if settings.renew:
                background.start_soon(parts.sweep.run)
            background.start_soon(parts.batcher.run)
            background.start_soon(self.loop_lag.run)
            if parts.http is not None:
                await background.start(parts.http.serve)
                self.http = parts.http
            self._started()
            async with JobGroup() as jobs:
                await parts.supervisor.run(jobs)
                grace_ms = 0 if self.stop.hand_back else settings.grace_ms
                if len(book):
                    self.log.info("draining", held=len(book), grace_ms=grace_ms)
                with anyio.move_on_after(grace_ms / 1000):
                    await book.wait_empty()
                jobs.cancel()
            with anyio.move_on_after(settings.settle_timeout_ms / 1000):
                await book.wait_settled()
            await self._release(parts.state.queues, book)
            await self._last_history(parts)
            await parts.pool.close()
            await self._leave()
            background.cancel_scope.cancel()

    async def _last_history(self, parts: Parts) -> None:
        """Flush what happened since the last history flush (a short run leaves its trace)."""
        if parts.history.every_s <= 0:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT_S):
            await parts.supervisor.record_history(self._clock.monotonic())

    async def _leave(self) -> None:
        """Take this worker off the `workers` list at once (else its entries expire)."""
        if self.presence is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT_S):
            try:
                await self.presence.leave()
            except RETRYABLE as exc:
                self.log.warning("leave_failed", error=describe(exc))

    async def _release(self, queues: dict[str, Queue], book: LeaseBook) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT_S):
            for name, held in book.queues():
                leases = [lease for lease in held if not lease.settling]
                try:
                    released = await queues[name].release([lease.held for lease in leases])
                except RETRYABLE as exc:  # e.g. READONLY: the reaper returns them after the lease
                    self.log.warning("release_failed", queue=name, error=describe(exc))
                    released = 0
                self.counters.released += released
                for lease in leases:
                    book.discard(lease)
                self.log.info("leases_released", queue=name, held=len(leases), released=released)
