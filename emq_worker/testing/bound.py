"""`Emq`: the testing helpers bound to one server (what the `emq` fixture gives a test). Plain
code: a script without pytest may use it too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from emq_worker.jobs.producer import Producer
from emq_worker.jobs.tasks import App
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.testing.clock import fast_forward, fire_repeats
from emq_worker.testing.idle import run_until_idle
from emq_worker.testing.outcomes import JobOutcome, expect_completed, expect_dead, outcome
from emq_worker.valkey.connection import connect


class Emq:
    """The testing helpers bound to one server (the `emq` fixture)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def producer(self) -> Producer:
        """A new Producer on the server: `async with emq.producer() as producer: ...`."""
        return Producer.from_url(self.url)

    async def run_until_idle(self, app: App, queue: str, **options: Any) -> Counters:
        """`emq_worker.testing.run_until_idle` on this server."""
        return await run_until_idle(app, queue, url=self.url, **options)

    async def fast_forward(self, queue: str) -> int:
        """Promote every scheduled job of `queue` now; how many."""
        async with self._queue(queue) as target:
            return await fast_forward(target)

    async def fire_repeats(self, queue: str) -> int:
        """Mint one occurrence of every unpaused repeat of `queue` now; how many."""
        async with self._queue(queue) as target:
            return await fire_repeats(target)

    async def outcome(self, queue: str, job_id: str) -> JobOutcome:
        async with self._queue(queue) as target:
            return await outcome(target, job_id)

    async def assert_completed(
        self, queue: str, job_id: str, *, attempts: int | None = None
    ) -> JobOutcome:
        return expect_completed(await self.outcome(queue, job_id), attempts=attempts)

    async def assert_dead(
        self, queue: str, job_id: str, *, error: str | None = None, attempts: int | None = None
    ) -> JobOutcome:
        """The job is dead; `error` is a regular expression its last error must match."""
        return expect_dead(await self.outcome(queue, job_id), error=error, attempts=attempts)

    @asynccontextmanager
    async def _queue(self, name: str) -> AsyncIterator[Queue]:
        client = connect(self.url, DEFAULT_WIRE_VERSION)
        try:
            yield Queue(client, Scripts(), name)
        finally:
            await client.aclose()
