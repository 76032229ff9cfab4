"""The Worker: wires the supervisor, the renewal sweep and the job runner together and runs them
as one structured unit: a root task group holds the renewal sweep and the supervisor; the
supervisor owns the task group of jobs.

Shutdown: stop claiming, let running jobs finish within the grace period while renewal keeps their
leases alive, then hand what is still held back to pending at once (fenced) and return.
"""

from __future__ import annotations

import random

import anyio
from redis.asyncio import Redis

from emq_worker.clock import Clock, MonotonicClock
from emq_worker.config import WorkerSettings
from emq_worker.connection import connect
from emq_worker.lease import LeaseBook, SlotSignal
from emq_worker.log import get_logger
from emq_worker.metrics import Counters
from emq_worker.queue import Queue
from emq_worker.renewal import RenewalSweep
from emq_worker.runner import JobRunner
from emq_worker.scripts import Scripts
from emq_worker.supervisor import Supervisor
from emq_worker.tasks import App

RELEASE_TIMEOUT_S = 5.0


class Worker:
    def __init__(
        self,
        settings: WorkerSettings,
        app: App,
        *,
        client: Redis | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.app = app
        self.counters = Counters()
        self.ready = anyio.Event()
        self._client = client
        self._clock = clock or MonotonicClock()
        self._rng = rng or random.Random()
        self._supervisor: Supervisor | None = None
        self._stop_requested = False
        self._root: anyio.CancelScope | None = None
        self.log = get_logger()

    def request_stop(self) -> None:
        """Graceful: stop claiming, finish or hand back what is held."""
        self._stop_requested = True
        if self._supervisor is not None:
            self._supervisor.request_stop()

    def force_stop(self) -> None:
        """At once: leave held leases to the reaper."""
        if self._root is not None:
            self._root.cancel()

    async def run(self) -> None:
        settings = self.settings
        client = self._client or connect(
            settings.redis_url,
            settings.wire_version,
            socket_timeout_s=settings.beat_ms / 1000 + 10,
        )
        try:
            await self._run(client)
        finally:
            if self._client is None:
                await client.aclose()

    async def _run(self, client: Redis) -> None:
        settings = self.settings
        scripts = Scripts()
        await scripts.load_all(client)
        queues = {name: Queue(client, scripts, name) for name in settings.queues}
        book, slots = LeaseBook(), SlotSignal()
        runner = JobRunner(self.app, queues, book, slots, settings, self.counters, self._rng)
        sweep = RenewalSweep(queues, book, slots, settings, self.counters, self._clock)
        supervisor = Supervisor(
            client,
            list(queues.values()),
            runner,
            book,
            slots,
            settings,
            self.counters,
            self._clock,
            self._rng,
            reap_max_attempts=self.app.most_attempts(settings.max_attempts),
        )
        self._supervisor = supervisor
        if self._stop_requested:
            supervisor.request_stop()
        self.log.info(
            "worker_started",
            queues=list(settings.queues),
            concurrency=settings.concurrency,
            lease_ms=settings.lease_ms,
            renew_every_ms=settings.renew_interval_ms if settings.renew else 0,
            beat_ms=settings.beat_ms,
        )
        self.ready.set()
        with anyio.CancelScope() as root:
            self._root = root
            async with anyio.create_task_group() as background:
                if settings.renew:
                    background.start_soon(sweep.run)
                async with anyio.create_task_group() as jobs:
                    await supervisor.run(jobs)
                    if len(book):
                        self.log.info("draining", held=len(book), grace_ms=settings.grace_ms)
                    with anyio.move_on_after(settings.grace_ms / 1000):
                        await book.wait_empty()
                    jobs.cancel_scope.cancel()
                await self._release(queues, book)
                background.cancel_scope.cancel()
        self.log.info("worker_stopped", forced=root.cancel_called, **self.counters.snapshot())

    async def _release(self, queues: dict[str, Queue], book: LeaseBook) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT_S):
            for name, leases in book.queues():
                released = await queues[name].release([lease.held for lease in leases])
                self.counters.released += released
                for lease in leases:
                    book.discard(lease)
                self.log.info("leases_released", queue=name, held=len(leases), released=released)
